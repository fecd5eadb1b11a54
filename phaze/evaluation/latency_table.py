"""The latency table a placement reads, {part: {field: [len(variants), len(tp)]}}, and what its entries are costed from.

An entry is one (layer variant index, TP width index, part, direction): its makespan is table[part][f"{direction}_s"].
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.plan_space import LayerVariant
from phaze.schedule.streams import StreamOptions, stream_makespan
from phaze.workload.graph import Workload

LATENCY_FIELDS = ("fwd_s", "bwd_s", "tp_comm_fwd_s", "tp_comm_bwd_s", "core_fwd_s")
"""Per-part latencies a placement reads; core_fwd_s is the attention core's forward (selective recompute)."""
DIRECTIONS = ("fwd", "bwd")
SIZE_FIELDS = ("param_bytes", "saved_bytes", "input_bytes", "output_bytes", "core_saved_bytes", "expert_param_bytes")

LatencyTable = dict[str, dict[str, np.ndarray]]
Key = tuple[int, int, str, str]
"""An entry: (layer variant index, TP width index, part, direction)."""


def makespan_field(direction: str) -> str:
    """The table field holding a direction's makespan."""
    return f"{direction}_s"


def with_makespans(values: LatencyTable, keys, makespan_s: float) -> LatencyTable:
    """A copy of the table with these entries' makespans at least makespan_s; `values` is left as it is (the arrays
    not written are shared, so a copy costs one small array per field written)."""
    table = {part: dict(fields) for part, fields in values.items()}
    copied: set[tuple[str, str]] = set()
    for vi, ti, part, direction in keys:
        field = makespan_field(direction)
        if (part, field) not in copied:
            table[part][field] = table[part][field].copy()
            copied.add((part, field))
        table[part][field][vi, ti] = max(table[part][field][vi, ti], makespan_s)
    return table


def variant_graph(workloads: dict[int, Workload], variant: LayerVariant, tp: int, part: str):
    """The part's LayerGraph for a layer variant at TP width tp, or None when it was not extracted."""
    w = workloads[variant.mbs]
    return w.part(tp, part, variant.sp, variant.cp, variant.ep) if w.has(tp, variant.sp, variant.cp, variant.ep) else None


def entry_inputs(workloads: dict[int, Workload], point: pd.DataFrame, network: Network, chips, variant: LayerVariant, tp: int,
                 part: str, direction: str) -> tuple:
    """(view-free graph, unit, single-core s, all-core s) of one entry's operators, costed on this point: what its
    bounds and its schedule start from."""
    g = variant_graph(workloads, variant, tp, part)
    compute = (g.fwd if direction == "fwd" else g.bwd).without_views()
    lat = op_latencies(compute.ops, point, network, tp, chips)
    return compute, lat.unit, lat.single_s[:, 0], lat.parallel_s[:, 0]


def core_fwd_s(ops, unit, parallel_s) -> np.ndarray:
    """The attention core's forward time: its compute operators on all cores, one after another (what
    selective recompute runs again in backward); 0 without a marked core. [P] for parallel_s [n_ops, P]."""
    if "core" not in ops.columns:
        return np.zeros(np.asarray(parallel_s).shape[1:])
    mask = ops["core"].to_numpy(dtype=bool) & np.isin(unit, ("tc", "vc"))
    return np.asarray(parallel_s)[mask].sum(axis=0)


def single_stream_s(compute, unit, parallel_s, opts: StreamOptions) -> tuple[np.ndarray, np.ndarray]:
    """(makespan, exposed communication) of a direction on a chip without inter-operator parallelism."""
    makespan = stream_makespan(compute, unit, parallel_s, opts)
    busy = np.asarray(parallel_s)[np.isin(unit, ("tc", "vc"))].sum(axis=0)
    return makespan, np.maximum(makespan - busy, 0.0)


def tp_values_of(workloads: dict[int, Workload]) -> list[int]:
    """Every TP width some workload was extracted at, ascending: the table's second axis."""
    return sorted({t for w in workloads.values() for t in w.tp_widths})


def part_sizes(workloads: dict[int, Workload], tp_values, variants: list[LayerVariant]) -> LatencyTable:
    """Per part, the workload's bytes (SIZE_FIELDS) for every (layer variant, TP width); NaN where not extracted."""
    sizes = {}
    for part in next(iter(workloads.values())).parts:
        sizes[part] = {f: np.full((len(variants), len(tp_values)), np.nan) for f in SIZE_FIELDS}
        for vi, variant in enumerate(variants):
            for ti, t in enumerate(tp_values):
                g = variant_graph(workloads, variant, t, part)
                if g is not None:
                    for f in SIZE_FIELDS:
                        sizes[part][f][vi, ti] = getattr(g, f)
    return sizes
