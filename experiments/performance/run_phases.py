"""Where the headline run's wall time goes, phase by phase, with one worker and with two, and what that leaves two
workers at most.

    python -m experiments.performance.run_phases [--overrides model=llama2 hw=phaze_grid] [--workers 1 2]

Each run is `python -m phaze.run` from empty caches in a fresh temporary directory (experiments.harness.fresh_run),
in a child process that stamps the launcher's wall clock at the start and end of each stage (the stage functions
wrapped, nothing else changed). Phases: imports; the traces (the workload summary's and the search's workloads,
traced together, MLflow's parent run created beside them: its own time is shown apart, and what the launcher still
waits for it after the traces); the search's workloads read from the cache; the bounds over every point; the study
(every worker's search loop, up to the last worker's end); the baseline (computed by a process beside the study:
what is left of it when the study ends, and reading the study's trials; with a worker per core, by the last worker
before its share of the study, so inside the study's time); the report and the interpreter's exit.
Everything but the study runs in the launcher alone, so with the study split perfectly two workers would take
serial + study / 2: the ceiling printed for the speed-up. The CPU seconds of all the run's processes (user +
system) give the other ceiling: the one-worker run already uses the second core (the tracer helper, the bounds'
threads, the baseline beside the study), and n workers cannot take less than their own CPU seconds / n.
The one-worker run's study has a second core's help too: the baseline, computed beside it; its own time (timed
alone, in one more fresh run that builds the same evaluator) is added to the work a perfect split shares out.
Writes experiments/results/run_phases.{md,json}.
"""

from __future__ import annotations

import argparse
import functools
import re
import resource
import sys
import time

import pandas as pd

MODULE = "experiments.performance.run_phases"
"""This module, run as the child of each run (`python -m`): the harness is imported by the parent only, so the child
pays just phaze.run's imports."""
STAMP = "phase-stamp"
BASELINE = "baseline-seconds"
STAGES = {"phaze.workload.extract": ("extract_jobs",), "phaze.search.study": ("tracker_for", "optimize"),
          "phaze.search.evaluator": ("load_workloads", "SpaceEvaluator.__init__", "SpaceEvaluator.baseline"),
          "phaze.search.workers": ("SideJob.result",)}
"""Module -> the functions (or Class.method) whose start and end are stamped, under the names their callers look up."""


def child(phaze_args: list[str]) -> None:
    """Run phaze.run in this process with its stage functions stamped on stderr (wall-clock time, which the parent
    compares with the moment it started this process)."""
    def stamp(event: str) -> None:  # one write, on a line of its own: progress bars share stderr from other threads
        sys.stderr.write(f"\n{STAMP} {time.time():.3f} {event}\n")
        sys.stderr.flush()

    import importlib
    import runpy

    import phaze.run  # noqa: F401  (the imports, as `python -m phaze.run` pays them)
    stamp("imported")
    for module_name, names in STAGES.items():
        module = importlib.import_module(module_name)
        for name in names:
            owner, attr = (getattr(module, name.split(".")[0]), name.split(".")[1]) if "." in name else (module, name)
            setattr(owner, attr, stamped(getattr(owner, attr), name, stamp))
    sys.argv = ["phaze.run", *phaze_args]
    try:
        runpy.run_module("phaze.run", run_name="__main__", alter_sys=True)
    finally:
        stamp("main returned")


def baseline_child(phaze_args: list[str]) -> None:
    """Build the run's evaluator (tracing its workloads, its bounds) and print how long the baseline takes on an empty
    schedule cache: what the one-worker run's process beside the study computes (phaze.search.study.baselines)."""
    from phaze.config import compose_config, study_spec
    from phaze.search.evaluator import SpaceEvaluator
    from phaze.search.study import baselines

    evaluator = SpaceEvaluator(study_spec(compose_config(*phaze_args)))
    start = time.perf_counter()
    baselines(evaluator)
    print(f"{BASELINE} {time.perf_counter() - start:.3f}")


def baseline_s(overrides: list[str]) -> float:
    """Seconds the baseline takes alone, from empty caches (baseline_child in a fresh directory)."""
    from experiments.harness import fresh_run, module_command
    with fresh_run(overrides, module_command(MODULE, "--baseline")) as (_, out, _storage):
        return next(float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith(BASELINE))


def stamped(function, name: str, stamp):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        stamp(f"> {name}")
        try:
            return function(*args, **kwargs)
        finally:
            stamp(f"< {name}")
    return wrapper


def events_of(stderr: str, started: float) -> list[tuple[float, str]]:
    """(seconds since the child process was started, event) of each stamp, wherever a progress bar's redraw left it."""
    return [(float(seconds) - started, event.strip()) for seconds, event in
            re.findall(rf"{STAMP} (\d+\.\d+) ([^\n\r]*?)(?={STAMP}|$)", stderr.replace("\r", "\n"), flags=re.MULTILINE)]


def first(events, event: str) -> float:
    return next(t for t, e in events if e == event)


def last(events, event: str) -> float:
    return max(t for t, e in events if e == event)


def phases(events, wall_s: float) -> dict[str, float]:
    """Seconds per phase of one run, from its stamps."""
    imported, traces_end = first(events, "imported"), first(events, "< extract_jobs")
    tracker_start, tracker_end = first(events, "> tracker_for"), first(events, "< tracker_for")
    mlflow_wait = max(0.0, tracker_end - traces_end)
    load_start, load_end = first(events, "> load_workloads"), last(events, "< load_workloads")
    evaluator_end = last(events, "< SpaceEvaluator.__init__")
    study_start, study_end = first(events, "> optimize"), last(events, "< optimize")
    # The baseline is computed beside the study (SideJob): what the launcher waits for is the rest of it after the study
    # (in the launcher itself under compat.baseline_in_optimum_run); with a worker per core, by the last worker before
    # its share of the study (WorkerPool.run_first): nothing is left of it after the study.
    baseline_end = max((t for t, e in events if e in ("< SideJob.result", "< SpaceEvaluator.baseline")), default=study_end)
    return {"imports": imported, "traces": traces_end - imported, "MLflow run (beside the traces)": tracker_end - tracker_start,
            "waiting for MLflow": mlflow_wait, "workloads read": load_end - load_start, "bounds": evaluator_end - load_end,
            "other before": study_start - traces_end - mlflow_wait - (load_end - load_start) - (evaluator_end - load_end),
            "study": study_end - study_start, "baseline": baseline_end - study_end, "report and exit": wall_s - baseline_end}


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children and their waited-for descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(overrides: list[str], workers: int) -> tuple[dict[str, float], str]:
    """(seconds per phase and the CPU seconds of every process of the run, the best throughput found) of one run
    from empty caches."""
    from experiments.harness import best_throughput, fresh_run, module_command
    started, cpu_before = time.time(), children_cpu_s()
    with fresh_run([*overrides, f"search.n_workers={workers}"], module_command(MODULE, "--child")) as (wall_s, out, _):
        cpu_s = children_cpu_s() - cpu_before
        return {"wall": wall_s, "CPU (all processes)": cpu_s, **phases(events_of(out.stderr, started), wall_s)}, best_throughput(out.stdout)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--child", "--baseline"):
        (child if sys.argv[1] == "--child" else baseline_child)(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=["model=llama2", "hw=phaze_grid"])
    parser.add_argument("--workers", nargs="*", type=int, default=[1, 2])
    args = parser.parse_args()
    rows, bests = {}, {}
    for n in args.workers:
        rows[n], bests[n] = run(args.overrides, n)
    table = pd.DataFrame(rows).round(1)
    table.columns = [f"search.n_workers={n} (s)" for n in rows]
    lines = []
    if 1 in rows:
        one, beside_s = rows[1], baseline_s(args.overrides)
        for n, row in rows.items():
            if n > 1:
                serial = row["wall"] - row["study"]
                lines.append(f"- {n} workers: {one['wall'] / row['wall']:.2f}x; the study {one['study'] / row['study']:.2f}x; outside it "
                             f"{serial:.0f} s in the launcher alone, so with the one-worker study split perfectly at most "
                             f"{one['wall'] / (serial + one['study'] / n):.2f}x, and with the baseline the one-worker run "
                             f"computes beside its study ({beside_s:.1f} s alone) shared out too, at most "
                             f"{one['wall'] / (serial + (one['study'] + beside_s) / n):.2f}x. CPU: the one-worker run kept "
                             f"{one['CPU (all processes)'] / one['wall']:.2f} cores busy on average, so its CPU seconds spread "
                             f"perfectly over {n} cores give at most {n * one['wall'] / one['CPU (all processes)']:.2f}x; the "
                             f"{n}-worker run used {row['CPU (all processes)']:.0f} CPU s ({row['CPU (all processes)'] / row['wall']:.2f} "
                             f"cores busy), at least {row['CPU (all processes)'] / n:.0f} s of wall on {n} cores.")
    from experiments.harness import commit, write_result
    text = (f"# The headline run, phase by phase\n\nGenerated by `python -m {MODULE} --overrides {' '.join(args.overrides)}` "
            f"at commit {commit()}: `python -m phaze.run` from empty caches, 2 cores; best seq/s "
            f"{', '.join(f'{n} workers {b}' for n, b in bests.items())}.\n\n{table.to_markdown()}\n\n" + "\n".join(lines) + "\n")
    write_result("run_phases", text, overrides=args.overrides, phases_s=table, best_seq_s=bests)


if __name__ == "__main__":
    main()
