"""Upper bounds on a point's throughput, used to prune it before any ILP runs (exact: never loses the optimum).

Both come from per-layer lower bounds on the makespan (critical path, work / cores: phaze.schedule
bounds), which never exceed the scheduled latency:
- the work bound, vectorised over all points: every microbatch needs at least W = sum over parts of
  the least device-time (t devices x latency at width t) of its forward and backward, and D devices
  supply D x (time per batch), so throughput <= D * mbs / W, best over microbatch sizes;
- the placement bound, one point at a time: the placement DP itself run on the lower-bound latencies
  (the DP's optimum only grows when latencies shrink; memory does not depend on them).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.cores import usable_cores
from phaze.cost.chip import cost_signatures, unique_chips
from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.pipeline import LATENCY_FIELDS, core_fwd_s, single_stream_s, tp_values_of, variant_graph
from phaze.plan_space import LayerVariant
from phaze.schedule import lower_bound_batch_s
from phaze.schedule.streams import StreamOptions
from phaze.workload.graph import Workload


def direction_lower_bounds(graph, points: pd.DataFrame, network: Network, tp: int, inter_op_parallel: bool,
                           opts: StreamOptions, chips=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(makespan lower bound, TP communication time, attention-core forward time) of one direction, per point:
    three arrays [P]. Without inter-operator parallelism the makespan is the stream timeline itself. `chips`:
    unique_chips(points), where the caller bounds several graphs on the same points."""
    compute = graph.without_views()
    lat = op_latencies(compute.ops, points, network, tp, chips)
    core = core_fwd_s(compute.ops, lat.unit, lat.parallel_s)
    if not inter_op_parallel:
        span, exposed = single_stream_s(compute, lat.unit, lat.parallel_s, opts)
        return span, exposed, core
    comm = lat.single_s[lat.unit == "net"].sum(axis=0)
    bound = lower_bound_batch_s(compute, lat.unit, lat.single_s, lat.parallel_s, points.n_tc.to_numpy(), points.n_vc.to_numpy())
    return bound, comm, core


@dataclass(frozen=True)
class LowerBounds:
    """Lower-bound latencies of every point: per part and field an array [len(variants), len(tp), signatures]
    (NaN where not extracted), one column per distinct cost signature, and each point's column."""

    values: dict[str, dict[str, np.ndarray]]
    signature_of: np.ndarray

    def at(self, index: int) -> dict[str, dict[str, np.ndarray]]:
        """One point's latencies, in the shape phaze.pipeline takes."""
        column = self.signature_of[index]
        return {p: {f: a[..., column] for f, a in fields.items()} for p, fields in self.values.items()}


def lower_bound_latencies(workloads: dict[int, Workload], points: pd.DataFrame, network: Network, inter_op_parallel: bool,
                          variants: list[LayerVariant], tp_async: bool = False, overlap_slowdown: float = 0.0,
                          threads: int | None = None) -> LowerBounds:
    """Every point's lower-bound latencies, computed once per distinct cost signature (HBM capacity, area and TDP
    change no latency) and once per distinct graph (shards share their expert-free parts, variants the
    graphs they do not change; stream options matter only on a single-stream chip), the distinct graphs on `threads`
    threads at once (None: one per usable core; numpy's array operations release the GIL: experiments/performance/bench_bounds.py)."""
    tp_values = tp_values_of(workloads)
    first, signature_of = cost_signatures(points)
    signatures = points.iloc[first].reset_index(drop=True)
    chips = unique_chips(signatures)
    shape = (len(variants), len(tp_values), len(signatures))
    parts = next(iter(workloads.values())).parts
    out = {p: {f: np.full(shape, np.nan) for f in LATENCY_FIELDS} for p in parts}
    distinct: dict[tuple, tuple] = {}
    """(graph, TP width, stream options) of each distinct graph to bound, by its key."""
    slots = []
    for vi, variant in enumerate(variants):
        opts = StreamOptions(tp_async, variant.tp_comm_overlap, overlap_slowdown=overlap_slowdown)
        for ti, t in enumerate(tp_values):
            for part in parts:
                g = variant_graph(workloads, variant, t, part)
                if g is not None:
                    key = (id(g), t, None if inter_op_parallel else opts)
                    distinct.setdefault(key, (g, t, opts))
                    slots.append((vi, ti, part, key))

    def both_directions(job: tuple) -> tuple:
        g, t, opts = job
        return (direction_lower_bounds(g.fwd, signatures, network, t, inter_op_parallel, opts, chips),
                direction_lower_bounds(g.bwd, signatures, network, t, inter_op_parallel, opts, chips))

    with ThreadPoolExecutor(threads or usable_cores()) as pool:
        done = dict(zip(distinct, pool.map(both_directions, distinct.values())))
    for vi, ti, part, key in slots:
        (fwd, comm_fwd, core), (bwd, comm_bwd, _) = done[key]
        fields = out[part]
        fields["fwd_s"][vi, ti], fields["tp_comm_fwd_s"][vi, ti], fields["core_fwd_s"][vi, ti] = fwd, comm_fwd, core
        fields["bwd_s"][vi, ti], fields["tp_comm_bwd_s"][vi, ti] = bwd, comm_bwd
    return LowerBounds(out, signature_of)


def work_bound_throughput(lower_bounds: LowerBounds, workloads: dict[int, Workload], devices: int,
                          variants: list[LayerVariant]) -> np.ndarray:
    """Throughput upper bound (sequences/s) per point from total device-time: max over layer variants of
    D * mbs / W, W the least device-seconds of a microbatch (a stage at width t with cp ranks runs on t x cp devices)."""
    bounds = lower_bounds.values
    tp_values = np.array(tp_values_of(workloads), dtype=np.float64)
    count = next(iter(workloads.values())).part_counts
    best = None
    for vi, variant in enumerate(variants):
        work = 0.0
        for part in count:
            device_s = variant.cp * tp_values[:, None] * (bounds[part]["fwd_s"][vi] + bounds[part]["bwd_s"][vi])  # [T, P]
            work = work + count[part] * np.nanmin(device_s, axis=0)
        bound = devices * variant.mbs / work
        best = bound if best is None else np.maximum(best, bound)
    return best[lower_bounds.signature_of]
