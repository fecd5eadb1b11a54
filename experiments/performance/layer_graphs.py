"""What the layer-schedule benchmarks share: Llama-2-7B's layer graphs (t=1, microbatch 1) costed on seeded random points
of hw=phaze_grid as phaze.pipeline costs them, the ones the list schedule leaves open, and their pages' layout."""

from __future__ import annotations

import pandas as pd

from phaze.cost.latency import op_latencies
from phaze.schedule.instance import LayerProblem
from phaze.schedule.layer import heuristic_for
from phaze.workload.graph import PARTS

SEED = 0
TP = 1
MBS = 1


def graph_inputs(workload, point, network):
    """(name, schedule_layer positional args) of every layer graph, costed as phaze.pipeline does."""
    row = point.iloc[0]
    out = []
    for part in PARTS:
        g = workload.part(TP, part)
        for direction in ("fwd", "bwd"):
            compute = getattr(g, direction).without_views()
            lat = op_latencies(compute.ops, point, network, TP)
            out.append((f"{part} {direction}", (compute, lat.unit, lat.single_s[:, 0], lat.parallel_s[:, 0], int(row.n_tc), int(row.n_vc))))
    return out


def open_graphs(workload, points, network, mip_gap: float) -> list[tuple[str, tuple, float]]:
    """(name, schedule_layer args, list makespan s) of the graphs whose list schedule is over the gap."""
    out = []
    for k, point in points:
        for name, args in graph_inputs(workload, point, network):
            listed = heuristic_for(LayerProblem.build(*args))
            if listed.mip_gap > mip_gap:
                out.append((f"point {k} {name} ({args[4]} TC, {args[5]} VC)", args, listed.makespan_s))
    return out


def bench_page(intro: list[str], summary: pd.DataFrame, df: pd.DataFrame, per_graph: str = "Per graph:") -> str:
    """A bench page: its intro lines, the summary table, then the per-graph table."""
    return "\n".join([*intro, "", summary.to_markdown(index=False, floatfmt=".4f"), "", per_graph, "", df.to_markdown(index=False, floatfmt=".4f"), ""])
