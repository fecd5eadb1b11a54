"""Benchmark: the mode search on the layer graphs the list schedule leaves open, against the MILP alone.

    python -m experiments.performance.bench_mode_search [--points 60]      (from the repository root)

Llama-2-7B layer graphs (t=1, microbatch 1, experiments.performance.layer_graphs) on `--points` seeded random points of
hw=phaze_grid; only the graphs whose list schedule is more than the 1% gap above the closed-form bound are kept (the
ones a search sends past the list schedule). Each is scheduled from scratch (cache off, the default work limit) with
schedule.mode_search=false (the MILP alone) and =true (the mode search, then the MILP where it leaves the gap). Per
graph: makespan and proven bound relative to the list schedule, closed within the gap or not, seconds. Writes
experiments/results/mode_search_bench.{md,json}.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time

import numpy as np
import pandas as pd

from experiments.harness import write_result
from experiments.performance.layer_graphs import SEED, bench_page, open_graphs
from phaze.config import compose_config
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.schedule import schedule_layer
from phaze.schema import ScheduleCfg
from phaze.workload.extract import extract_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=60)
    args = parser.parse_args()
    cfg = compose_config("model=llama2")
    with tempfile.TemporaryDirectory() as wl_dir:
        workload = extract_workload(cfg.model, 1, cfg.train.bytes_per_elem, (1,), cache_dir=wl_dir)
    grid = enumerate_space(compose_config().hw)
    picks = np.random.default_rng(SEED).choice(len(grid), args.points, replace=False)
    graphs = open_graphs(workload, [(int(k), grid.iloc[[int(k)]]) for k in picks], Network.from_cfg(cfg.cluster), cfg.schedule.mip_gap)
    schedule_layer(*graphs[0][1], cfg=ScheduleCfg(mode_search=True, cache=False))  # compile the Numba kernels outside the timings
    print(f"{len(graphs)} open graphs on {args.points} points", flush=True)
    rows = []
    for name, gargs, listed_s in graphs:
        for modes in (False, True):
            t0 = time.perf_counter()
            s = schedule_layer(*gargs, cfg=ScheduleCfg(mip_gap=cfg.schedule.mip_gap, work_limit=cfg.schedule.work_limit, mode_search=modes, cache=False))
            rows.append(dict(graph=name, mode_search=modes, makespan_vs_list=s.makespan_s / listed_s, bound_vs_list=s.bound_s / listed_s,
                             closed=s.status == "optimal", by=s.backend, seconds=time.perf_counter() - t0))
        print(f"  {name}: {rows[-2]['closed']} -> {rows[-1]['closed']}", flush=True)
    df = pd.DataFrame(rows)
    summary = df.groupby("mode_search").agg(
        graphs=("graph", "size"), closed=("closed", "sum"), median_s=("seconds", "median"), max_s=("seconds", "max"),
        median_makespan_vs_list=("makespan_vs_list", "median"), min_makespan_vs_list=("makespan_vs_list", "min"),
        median_bound_vs_list=("bound_vs_list", "median"),
    ).reset_index()
    write_result("mode_search_bench", bench_page([
        "# The mode search on the open layer graphs (`python -m experiments.performance.bench_mode_search`)",
        "",
        f"Llama-2-7B, t=1, microbatch 1; {args.points} seeded (seed {SEED}) random points of hw=phaze_grid; the {len(graphs)} layer graphs whose "
        f"list schedule is more than {cfg.schedule.mip_gap:.0%} above the closed-form bound. Default schedule settings (gap "
        f"{cfg.schedule.mip_gap:.0%}, work limit {cfg.schedule.work_limit:g}), cache off; mode_search false = the MILP alone. "
        f"Makespan and bound relative to the list schedule's makespan. Machine: {platform.machine()}, 2 cores.",
    ], summary, df, "Per graph (`by`: heuristic = closed without the MILP):"), points=args.points, summary=summary, graphs=df)

if __name__ == "__main__":
    main()
