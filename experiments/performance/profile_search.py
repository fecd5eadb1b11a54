"""Where a search's time goes: `python -m phaze.run` under cProfile, its functions' own time summed by stage.

    python -m experiments.performance.profile_search                                   # model=llama2 hw=phaze_grid, empty caches
    python -m experiments.performance.profile_search --overrides model=llama2 hw=modern_grid cluster=dgx_h100 train=megatron

Runs the study in this process from empty caches (a temporary cache and storage, MLflow to a temporary store) and
attributes every function's own time (cProfile's tottime) to the stage its module belongs to: workload extraction,
operator costs and bounds, list schedules, layer MILPs, the placement DP, Optuna's storage and bookkeeping, MLflow
logging. cProfile slows pure-Python code more than compiled code, so the shares are indicative; the wall time of
the same run without the profiler is measured first. Writes experiments/results/search_profile.{md,json}.
"""

from __future__ import annotations

import argparse
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from experiments.harness import command_line, study_milps, write_result

STAGES = (
    ("workload extraction", ("phaze/workload/", "torch/", "transformers/")),
    ("list schedules", ("phaze/schedule/heuristic", "phaze/schedule/sgs", "phaze/schedule/instance")),
    ("layer MILPs", ("phaze/schedule/ilp", "phaze/schedule/backends", "gurobipy", "highspy", "phaze/schedule/layer")),
    ("placement DP", ("phaze/placement/",)),
    ("operator costs and bounds", ("phaze/cost/", "phaze/search/bounds", "phaze/schedule/bounds", "phaze/schedule/streams", "phaze/hardware/")),
    ("Optuna and its storage", ("optuna/", "sqlalchemy/", "sqlite3", "phaze/search/claims", "phaze/search/resume")),
    ("MLflow logging", ("mlflow/", "phaze/tracking/")),
    ("search loop, evaluator, config", ("phaze/search/", "phaze/pipeline", "phaze/plan_space", "phaze/config", "omegaconf/", "hydra/")),
)
"""Stages by the path of a function's module, or a built-in's name (first match wins); everything else is `other`."""


def stage_of(filename: str, function: str) -> str:
    where = f"{filename}:{function}"
    for stage, keys in STAGES:
        if any(key in where for key in keys):
            return stage
    return "other"


def stage_seconds(stats: dict) -> pd.Series:
    """Seconds per stage: each function's own time (cProfile's tottime) to its module's stage; a library function's
    (numpy, pandas, OmegaConf, built-ins) split among its callers' stages in proportion to each caller's cumulative
    time in it, up the call graph until a stage's function is met."""
    memo: dict = {}

    def fractions(key, seen: frozenset) -> dict[str, float]:
        stage = stage_of(key[0], key[2])
        if stage != "other":
            return {stage: 1.0}
        if key in memo:
            return memo[key]
        callers = {c: v for c, v in stats[key][4].items() if c not in seen}
        total = sum(v[3] for v in callers.values())
        out: dict[str, float] = {}
        for caller, v in callers.items():
            for name, f in fractions(caller, seen | {key}).items():
                out[name] = out.get(name, 0.0) + f * v[3] / total
        memo[key] = out or {"other": 1.0}
        return memo[key]

    sys.setrecursionlimit(100_000)
    seconds: dict[str, float] = {}
    for key, row in stats.items():
        for name, f in fractions(key, frozenset()).items():
            seconds[name] = seconds.get(name, 0.0) + f * row[2]
    return pd.Series(seconds).sort_values(ascending=False)


def closure_line(milps: pd.DataFrame) -> str:
    """How the run's layer MILPs ended: closed within the gap, stopped at the work limit, stopped on a refuted cut-off."""
    if not len(milps):
        return "No layer MILP ran."
    scheduled = milps[milps.status != "refuted"]
    refuted = milps[milps.status == "refuted"]
    closed = (scheduled.status == "optimal").sum()
    line = (f"Layer MILPs of the run without the profiler (from empty caches: none served by the schedule cache): {len(milps)}, "
            f"median {milps.solve_s.median():.2f} s, max {milps.solve_s.max():.2f} s. Of the {len(scheduled)} that scheduled a "
            f"layer, {closed} ({closed / max(len(scheduled), 1):.0%}) closed within schedule.mip_gap (median "
            f"{scheduled.solve_s.median():.2f} s), the largest gap left {scheduled.mip_gap.max():.1%}")
    if len(refuted):
        line += (f"; {len(refuted)} stopped once their bound showed the point unable to beat the study (status refuted, "
                 f"median {refuted.solve_s.median():.2f} s)")
    return line + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=["model=llama2", "hw=phaze_grid"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        common = [*args.overrides, f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}"]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "phaze.run", *common, f"cache_dir={tmp / 'plain'}", f"schedule.cache_dir={tmp / 'plain' / 'schedule'}", f"search.storage=sqlite:///{tmp / 'plain.db'}"],
                       check=True, capture_output=True, cwd=tmp)
        plain_s = time.perf_counter() - start
        milps = study_milps(f"sqlite:///{tmp / 'plain.db'}")
        profile = tmp / "run.prof"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "phaze.run", *common, f"cache_dir={tmp / 'profiled'}", f"schedule.cache_dir={tmp / 'profiled' / 'schedule'}",
                        f"search.storage=sqlite:///{tmp / 'profiled.db'}"], check=True, capture_output=True, cwd=tmp)
        stats = pstats.Stats(str(profile)).stats
    by_stage = stage_seconds(stats)
    table = pd.DataFrame({"seconds (profiled)": by_stage, "share": by_stage / by_stage.sum()})
    page = "\n".join([
        "# Where a search's time goes", "",
        f"Generated by `{command_line()}`: `python -m phaze.run {' '.join(args.overrides)}` from empty caches, "
        f"{plain_s:.0f} s of wall time without the profiler ({by_stage.sum():.0f} s of function time under cProfile, which "
        "slows pure Python most). Each function's own time by the stage its module belongs to, library code's by its callers':", "",
        table.to_markdown(floatfmt=".3g"), "",
        closure_line(milps), "",
    ])
    write_result("search_profile", page, overrides=args.overrides, wall_s=plain_s, stages=table, milps=len(milps))


if __name__ == "__main__":
    main()
