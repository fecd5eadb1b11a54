"""Benchmark: what more MILP effort buys on the layer graphs the list schedule leaves open.

    python -m experiments.performance.bench_work_limit [--points 40] [--limits 1 5 30]      (from the repository root)

Llama-2-7B layer graphs (t=1, microbatch 1, experiments.performance.layer_graphs) on `--points` seeded
random points of hw=phaze_grid; only the graphs whose list schedule is more than the 1% gap above
its lower bound (the ones the search sends to the MILP) are kept. Each is scheduled with Gurobi under
every work limit of `--limits` (time limit 600 s, 1 thread, cache off): its makespan and proven bound
relative to the list schedule, and the seconds it took. This is the evidence behind the default
schedule.work_limit. Writes experiments/results/work_limit_bench.{md,json}.
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

TIME_LIMIT_S = 600.0
"""Loose enough that every run stops on its work limit (or closes the gap), never on time."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--limits", type=float, nargs="+", default=[1.0, 5.0, 30.0])
    args = parser.parse_args()
    cfg = compose_config("model=llama2")
    with tempfile.TemporaryDirectory() as wl_dir:
        workload = extract_workload(cfg.model, 1, cfg.train.bytes_per_elem, (1,), cache_dir=wl_dir)
    network = Network.from_cfg(cfg.cluster)
    grid = enumerate_space(compose_config().hw)
    picks = np.random.default_rng(SEED).choice(len(grid), args.points, replace=False)
    graphs = open_graphs(workload, [(int(k), grid.iloc[[int(k)]]) for k in picks], network, cfg.schedule.mip_gap)
    print(f"{len(graphs)} open graphs on {args.points} points", flush=True)
    rows = []
    for name, gargs, listed_s in graphs:
        for limit in args.limits:
            sched_cfg = ScheduleCfg(backend="gurobi", mip_gap=cfg.schedule.mip_gap, time_limit_s=TIME_LIMIT_S, work_limit=limit, threads=1, cache=False)
            t0 = time.perf_counter()
            s = schedule_layer(*gargs, cfg=sched_cfg)
            rows.append(dict(graph=name, work_limit=limit, makespan_vs_list=s.makespan_s / listed_s, bound_vs_list=s.bound_s / listed_s,
                             closed=s.status == "optimal", seconds=time.perf_counter() - t0))
        print(f"  {name} done", flush=True)
    df = pd.DataFrame(rows)
    summary = df.groupby("work_limit").agg(
        graphs=("graph", "size"), median_makespan_vs_list=("makespan_vs_list", "median"), min_makespan_vs_list=("makespan_vs_list", "min"),
        median_bound_vs_list=("bound_vs_list", "median"), closed=("closed", "sum"), median_s=("seconds", "median"), max_s=("seconds", "max"),
    ).reset_index()
    base = df[df.work_limit == min(args.limits)].set_index("graph").makespan_vs_list
    top = df[df.work_limit == max(args.limits)].set_index("graph").makespan_vs_list
    gain = (base - top) / base
    write_result("work_limit_bench", bench_page([
        "# MILP effort on the open layer graphs (`python -m experiments.performance.bench_work_limit`)",
        "",
        f"Llama-2-7B, t=1, microbatch 1; {args.points} seeded (seed {SEED}) random points of hw=phaze_grid; the {len(graphs)} layer graphs whose "
        f"list schedule is more than {cfg.schedule.mip_gap:.0%} above its lower bound. Gurobi, 1 thread, time limit {TIME_LIMIT_S:.0f} s "
        f"(never reached), cache off. Makespan and bound relative to the list schedule's makespan. Machine: {platform.machine()}, 2 cores shared.",
        "",
        f"Schedule improvement from work limit {max(args.limits):g} over {min(args.limits):g}: median {gain.median():.3%}, "
        f"largest {gain.max():.3%} (graphs: {len(gain)}).",
    ], summary, df), points=args.points, limits=args.limits, summary=summary, graphs=df)

if __name__ == "__main__":
    main()
