"""Benchmark: the Numba list scheduler against the plain-Python reference, on the same layer graphs in one run.

    python -m experiments.performance.bench_list_schedule [--points 40]      (from the repository root)

Every layer graph (pre, layer, post; forward and backward; t=1, microbatch 1) of Llama-2-7B on `--points`
seeded random points of hw=phaze_grid; each is list-scheduled (best_list_schedule: 22 serial and 4 non-delay
schedules, each justified) by phaze/schedule/heuristic.py (Numba kernels, compiled before timing) and by
phaze/schedule/reference.py (plain Python); the schedules must be identical. Writes
experiments/results/list_schedule_bench.{md,json} with the total seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time

import numpy as np

from experiments.harness import write_result
from experiments.performance.layer_graphs import MBS, SEED, TP, graph_inputs
from phaze.config import compose_config
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.schedule import reference
from phaze.schedule.heuristic import best_list_schedule
from phaze.schedule.instance import LayerProblem
from phaze.workload.extract import extract_workload


def timed(schedule, problems) -> tuple[list, float]:
    start = time.perf_counter()
    out = [schedule(p) for p in problems]
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40)
    args = parser.parse_args()
    cfg = compose_config("model=llama2")
    with tempfile.TemporaryDirectory() as wl_dir:
        workload = extract_workload(cfg.model, MBS, cfg.train.bytes_per_elem, (TP,), cache_dir=wl_dir)
    network = Network.from_cfg(cfg.cluster)
    grid = enumerate_space(compose_config().hw)
    rng = np.random.default_rng(SEED)
    points = [grid.iloc[[int(k)]] for k in rng.choice(len(grid), args.points, replace=False)]
    problems = [LayerProblem.build(*inputs) for point in points for _, inputs in graph_inputs(workload, point, network)]
    best_list_schedule(problems[0])  # compile (or load the cached kernels) before timing
    fast, fast_s = timed(best_list_schedule, problems)
    slow, slow_s = timed(reference.best_list_schedule, problems)
    same = sum(a.makespan_s == b.makespan_s and np.array_equal(a.start_s, b.start_s) and np.array_equal(a.parallel, b.parallel)
               for a, b in zip(fast, slow))
    sizes = [p.n for p in problems]
    page = "\n".join([
        "# List scheduler: Numba against plain Python (`python -m experiments.performance.bench_list_schedule`)", "",
        f"Llama-2-7B, t={TP}, microbatch {MBS}; {args.points} seeded (seed {SEED}) random points of hw=phaze_grid; "
        f"{len(problems)} layer graphs of {min(sizes)}-{max(sizes)} operators (median {int(np.median(sizes))}). "
        f"Machine: {platform.machine()}, 2 cores.", "",
        "| scheduler | seconds | ms per graph |", "|---|---|---|",
        f"| Numba (heuristic.py) | {fast_s:.2f} | {1e3 * fast_s / len(problems):.2f} |",
        f"| plain Python (reference.py) | {slow_s:.2f} | {1e3 * slow_s / len(problems):.2f} |", "",
        f"**Speed-up: {slow_s / fast_s:.1f}x**; identical schedules (start times, modes, makespan): {same} of {len(problems)}.", "",
    ])
    write_result("list_schedule_bench", page, points=args.points, graphs=len(problems), numba_s=fast_s, python_s=slow_s,
                 identical=int(same))


if __name__ == "__main__":
    main()
