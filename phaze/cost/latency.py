"""Latency of every operator of a layer on every accelerator point, on one core and on all cores.

One call costs an operator table (OP_COLUMNS of phaze.workload.graph) against a points frame
(phaze.hardware.enumerate_space) with numpy broadcasting over ops x points; operators and points
that cost the same are computed once.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.cost.chip import unique_chips
from phaze.cost.matmul import matmul_latency_s
from phaze.cost.vector import vector_latency_s
from phaze.cost.vector_cycles import cycles_per_elem
from phaze.hardware.derating import FP8_COLUMN
from phaze.hardware.rates import GB
from phaze.workload.precision import FP8_BYTES_PER_ELEM

UNITS = ("tc", "vc", "net", "none")
"""Tensor cores, vector cores, the network, nothing (views)."""

COLLECTIVES = {
    "phaze.all_reduce": "allreduce_s",
    "phaze.reduce_scatter": "reduce_scatter_s",
    "phaze.all_gather": "all_gather_s",
    "phaze.all_to_all": "all_to_all_s",
}
"""Collective targets and the Network method that times them over the TP group."""


@dataclass(frozen=True, eq=False)
class OpLatency:
    """Per-op unit and latency in seconds: `single_s` on one core of the unit, `parallel_s` spread over
    all of them; both (n_ops, n_points). Network ops take the same time either way; views take 0."""

    unit: np.ndarray
    single_s: np.ndarray
    parallel_s: np.ndarray


def op_units(ops: pd.DataFrame) -> np.ndarray:
    """matmul -> tc, collective -> net, view -> none, every other kind -> vc."""
    kind = ops["kind"].to_numpy()
    return np.select([kind == "matmul", kind == "collective", kind == "view"], ["tc", "net", "none"], "vc").astype(str)


def elem_bytes(ops: pd.DataFrame) -> np.ndarray:
    """Bytes per element of each op's output: the `elem_bytes` column, else bytes_written / numel_out."""
    if "elem_bytes" in ops.columns:
        given = ops["elem_bytes"].to_numpy(dtype=np.float64)
        if np.all(given > 0):
            return given
    numel = ops["numel_out"].to_numpy(dtype=np.float64)
    written = ops["bytes_written"].to_numpy(dtype=np.float64)
    if np.any(numel <= 0) or np.any(written <= 0):
        raise ValueError("costed operators need elem_bytes > 0, or numel_out > 0 and bytes_written > 0")
    return written / numel


def _flag(ops: pd.DataFrame, column: str) -> np.ndarray:
    """A boolean column of the operator table, False for every op where the table lacks it."""
    return ops[column].to_numpy(dtype=bool) if column in ops.columns else np.zeros(len(ops), dtype=bool)


def fused_steps(ops: pd.DataFrame) -> np.ndarray:
    """Steps inside a fused kernel (the `fused` column; False when absent): operands stay on chip."""
    return _flag(ops, "fused")


def kernel_launches(ops: pd.DataFrame) -> np.ndarray:
    """1 where an op starts a kernel (pays the launch overhead): every op but the later steps of a
    fused kernel, whose first step is the one that reads from memory."""
    return (~fused_steps(ops) | (ops["bytes_read"].to_numpy(dtype=np.float64) > 0)).astype(np.float64)


INPUT_STREAMING_KINDS = ("reduction", "softmax", "norm", "loss")
"""Vector kinds whose lanes process every input element (a sum reads n values to write one); the
other kinds (elementwise, embedding) process one output element per lane-cycle."""


def vector_elements(ops: pd.DataFrame) -> np.ndarray:
    """Elements a vector op puts through its lanes: its output, or for input-streaming kinds its
    largest input when that is larger."""
    numel_out = ops["numel_out"].to_numpy(dtype=np.float64)
    streams = np.isin(ops["kind"].to_numpy(), INPUT_STREAMING_KINDS)
    if "in_shapes" not in ops.columns or not streams.any():
        return numel_out
    largest_in = np.array([max((math.prod(s) for s in shapes), default=0) for shapes in ops["in_shapes"]], dtype=np.float64)
    return np.where(streams, np.maximum(numel_out, largest_in), numel_out)


def _unique_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    distinct, inverse = np.unique(matrix, axis=0, return_inverse=True)
    return distinct, inverse.ravel()


def fp8_ops(ops: pd.DataFrame) -> np.ndarray:
    """GEMMs run in FP8 (the `fp8` column, phaze.workload.precision; False when absent)."""
    return _flag(ops, "fp8")


def warp_mma_ops(ops: pd.DataFrame) -> np.ndarray:
    """Matmuls computed with warp-level MMA (the `warp_mma` column, phaze.workload.warp_mma.with_warp_mma; False when
    absent): they run at the chip's mma_sync_fraction."""
    return _flag(ops, "warp_mma")


def _matmul_rows(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(distinct cost rows, each op's row) of matmul ops: b, m, k, n, bytes per element, bytes moved, on chip, FP8,
    warp-level MMA."""
    fp8 = fp8_ops(ops)
    cols = np.column_stack([
        ops[["mm_b", "mm_m", "mm_k", "mm_n"]].to_numpy(dtype=np.float64),
        np.where(fp8, FP8_BYTES_PER_ELEM, elem_bytes(ops)),
        (ops["bytes_read"] + ops["bytes_written"]).to_numpy(dtype=np.float64),
        fused_steps(ops),
        fp8,
        warp_mma_ops(ops),
    ])
    if np.any(cols[:, :4] <= 0):
        raise ValueError("a matmul op needs positive mm_b, mm_m, mm_k, mm_n")
    return _unique_rows(cols)


def _matmul(distinct: np.ndarray, chip):
    b, m, k, n, e, io, on_chip, in_fp8, warp = (distinct[:, i][:, None] for i in range(9))
    rate = (np.where(in_fp8.astype(bool), chip.fp8_matmul_ratio * chip.fp8_matmul_efficiency, 1.0)
            * np.where(warp.astype(bool), chip.mma_sync_fraction, 1.0))
    return matmul_latency_s(b, m, k, n, e, io, chip, on_chip.astype(bool), rate)


FUSED_SOFTMAX_TARGET = "_softmax"
"""The softmax step of a fused attention kernel (phaze.workload.attention.kernel_steps) has this target."""


def fused_softmax_steps(ops: pd.DataFrame) -> np.ndarray:
    """The online-softmax steps of fused attention kernels: their exponentials may run on special-function units."""
    return fused_steps(ops) & (ops["target"].to_numpy() == FUSED_SOFTMAX_TARGET)


def _vector_rows(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(distinct cost rows, each op's row) of vector ops: elements through the lanes, cycles per element, bytes moved,
    fused softmax."""
    cols = np.column_stack([
        vector_elements(ops),
        np.array([cycles_per_elem(t) for t in ops["target"]], dtype=np.float64),
        (ops["bytes_read"] + ops["bytes_written"]).to_numpy(dtype=np.float64),
        fused_softmax_steps(ops),
    ])
    return _unique_rows(cols)


def _vector(distinct: np.ndarray, chip):
    elems, cycles, io, fused_softmax = (distinct[:, i][:, None] for i in range(4))
    return vector_latency_s(elems, cycles, io, chip, fused_softmax.astype(bool))


def collective_groups(ops: pd.DataFrame, tp: int) -> tuple[np.ndarray, np.ndarray]:
    """(group size, stride) of each collective: its `comm_group` / `comm_stride` columns where set,
    else the `tp` devices of its tensor-parallel group, adjacent."""
    return _groups(*_set_groups(ops), tp)


def _set_groups(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The `comm_group` / `comm_stride` columns (0: not set)."""
    n = len(ops)
    group = ops["comm_group"].to_numpy(dtype=np.int64) if "comm_group" in ops.columns else np.zeros(n, np.int64)
    stride = ops["comm_stride"].to_numpy(dtype=np.int64) if "comm_stride" in ops.columns else np.zeros(n, np.int64)
    return group, stride


def _groups(group: np.ndarray, stride: np.ndarray, tp: int) -> tuple[np.ndarray, np.ndarray]:
    return np.where(group > 0, group, tp), np.where(stride > 0, stride, 1)


def collective_s(ops: pd.DataFrame, network, tp: int) -> np.ndarray:
    """Time of each collective op over its group (phaze.cost.latency.collective_groups)."""
    groups, strides = collective_groups(ops, tp)
    return _collective_s(ops["target"].tolist(), ops["comm_bytes"].to_numpy(dtype=np.float64), groups, strides, network)


def _collective_s(targets: list[str], nbytes: np.ndarray, groups: np.ndarray, strides: np.ndarray, network) -> np.ndarray:
    times = np.empty(len(targets))
    for i, target in enumerate(targets):
        if target not in COLLECTIVES:
            raise ValueError(f"unknown collective {target!r}; known: {sorted(COLLECTIVES)}")
        times[i] = getattr(network, COLLECTIVES[target])(nbytes[i], int(groups[i]), int(strides[i]))
    return times


@dataclass(frozen=True, eq=False)
class CostRows:
    """What op_latencies reads from an operator table, whatever the chip: each unit's rows (tc, vc, net), the distinct
    cost rows of the tc and vc ops and each op's among them, kernel launches; the collectives' targets, sizes and groups."""

    unit: np.ndarray
    rows: dict[str, np.ndarray]
    distinct: dict[str, np.ndarray]
    inverse: dict[str, np.ndarray]
    launches: dict[str, np.ndarray]
    net_targets: list[str]
    net_bytes: np.ndarray
    net_set_groups: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, ops: pd.DataFrame) -> "CostRows":
        unit = op_units(ops)
        rows, distinct, inverse, launches = {}, {}, {}, {}
        for name, prepare in (("tc", _matmul_rows), ("vc", _vector_rows)):
            rows[name] = np.flatnonzero(unit == name)
            if rows[name].size:
                table = ops.iloc[rows[name]]
                distinct[name], inverse[name] = prepare(table)
                launches[name] = kernel_launches(table)[:, None]
        rows["net"] = np.flatnonzero(unit == "net")
        net = ops.iloc[rows["net"]]
        return cls(unit, rows, distinct, inverse, launches, net["target"].tolist(), net["comm_bytes"].to_numpy(dtype=np.float64),
                   _set_groups(net))


PREPARED_TABLES = 512
"""Operator tables whose CostRows are kept: a search costs the same few layer graphs on every point it evaluates."""
_prepared: dict[int, tuple[weakref.ref, CostRows]] = {}
_prepared_lock = threading.Lock()
"""Held while _prepared is read or changed: the search's bounds cost several graphs on threads at once."""


def cost_rows(ops: pd.DataFrame) -> CostRows:
    """CostRows.of(ops), computed once per table object while it lives (tables are not modified after extraction)."""
    with _prepared_lock:
        hit = _prepared.get(id(ops))
    if hit is not None and hit[0]() is ops:
        return hit[1]
    prepared = CostRows.of(ops)
    with _prepared_lock:
        if len(_prepared) >= PREPARED_TABLES:
            for key in [k for k, (ref, _) in _prepared.items() if ref() is None] or [next(iter(_prepared))]:
                del _prepared[key]
        _prepared[id(ops)] = (weakref.ref(ops), prepared)
    return prepared


def op_latencies(ops: pd.DataFrame, points: pd.DataFrame, network, tp: int, chips=None) -> OpLatency:
    """Latency of each op of `ops` on each point of `points` (one core / all cores), as an OpLatency.

    Tensor- and vector-core ops run at the point's achievable rates and pay its `op_overhead_s`
    (kernel launch and tail); collectives take the network's time and views none. `chips` is
    unique_chips(points) where the caller already has it."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    prepared = cost_rows(ops)
    chip, point_index = chips if chips is not None else unique_chips(points)
    single = np.zeros((len(ops), len(points)))
    parallel = np.zeros((len(ops), len(points)))
    for name, cost in (("tc", _matmul), ("vc", _vector)):
        rows = prepared.rows[name]
        if rows.size:
            s, p = cost(prepared.distinct[name], chip)
            op_index = prepared.inverse[name]
            launch_s = prepared.launches[name] * np.take(chip.op_overhead_s, point_index, axis=1)
            single[rows] = np.take(s, point_index, axis=1)[op_index] + launch_s
            parallel[rows] = np.take(p, point_index, axis=1)[op_index] + launch_s
    if prepared.net_targets:
        groups, strides = _groups(*prepared.net_set_groups, tp)
        rows = prepared.rows["net"]
        single[rows] = _collective_s(prepared.net_targets, prepared.net_bytes, groups, strides, network)[:, None]
        parallel[rows] = single[rows]
    return OpLatency(unit=prepared.unit, single_s=single, parallel_s=parallel)


def roofline_s(ops: pd.DataFrame, points: pd.DataFrame) -> np.ndarray:
    """The ideal roofline of each compute op on each point, (n_ops, n_points): its FLOPs at the chip's
    peak for its unit (an FP8 GEMM: the FP8 peak), or its bytes at peak HBM bandwidth, whichever is slower (no derating, no
    overhead: a bound no prediction may beat); 0 for network and view ops."""
    unit = op_units(ops)
    flops = ops["flops"].to_numpy(dtype=np.float64)[:, None]
    io = (ops["bytes_read"] + ops["bytes_written"]).to_numpy(dtype=np.float64)[:, None]
    matmul_peak = points["peak_matmul_flops"].to_numpy()[None, :] * np.where(
        fp8_ops(ops)[:, None], points[FP8_COLUMN].to_numpy()[None, :] if FP8_COLUMN in points.columns else 1.0, 1.0)
    peak = np.where((unit == "tc")[:, None], matmul_peak, points["peak_vector_flops"].to_numpy()[None, :])
    bound = np.maximum(flops / peak, io / (points["hbm_gbps"].to_numpy()[None, :] * GB))
    return np.where(np.isin(unit, ("tc", "vc"))[:, None], bound, 0.0)
