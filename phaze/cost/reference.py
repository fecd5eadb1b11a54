"""The cost model written as a plain-Python loop over one operator and one accelerator.

Slow and obviously correct: tests check the vectorised `op_latencies` against it, and the benchmark
measures the speed-up over it.
"""

from __future__ import annotations

import itertools
import math

from phaze.cost.latency import COLLECTIVES, FUSED_SOFTMAX_TARGET, INPUT_STREAMING_KINDS
from phaze.cost.matmul import BLOCKING_OPERANDS
from phaze.cost.vector import FUSED_SOFTMAX_LANE_OPS
from phaze.cost.vector_cycles import cycles_per_elem
from phaze.hardware.rates import GB, GHZ, KIB, MIB


def _tile(buffer_bytes: float, elem_bytes: float) -> float:
    return max(1.0, math.floor(math.sqrt(buffer_bytes / (BLOCKING_OPERANDS * elem_bytes))))


def _blocked(b, m, k, n, tile, elem_bytes) -> float:
    return elem_bytes * b * (m * k * math.ceil(n / tile) + k * n * math.ceil(m / tile) + m * n)


def _cycles(b, m, k, n, rows, cols, cores) -> float:
    dims = {"m": m, "k": k, "n": n}
    best = math.inf
    for x, y, z in itertools.permutations("mkn"):
        tiles = {x: math.ceil(dims[x] / rows), y: math.ceil(dims[y] / cols), z: 1}
        out_tiles = b * math.prod(t for d, t in tiles.items() if d != "k")
        per_core = math.ceil(out_tiles / cores)
        stream = dims[z] if z == "k" else math.ceil(dims[z] / max(1, cores // out_tiles))
        best = min(best, tiles["k"] * per_core * stream)
    return best


def _tiled_cycles(b, m, k, n, acc, cores) -> float:
    best = math.inf
    for r, c in ((acc.matmul_tile_rows, acc.matmul_tile_cols), (acc.matmul_tile_cols, acc.matmul_tile_rows)):
        blocks = b * math.ceil(m / r) * math.ceil(n / c)
        stream = math.ceil(k / max(1, cores // blocks))
        passes = math.ceil(r / acc.tc_rows) * math.ceil(c / acc.tc_cols)
        best = min(best, math.ceil(blocks / cores) * passes * (stream + acc.matmul_tile_fill_k))
    return best


def _core_cycles(b, m, k, n, acc, cores) -> float:
    if acc.matmul_tile_rows > 0:
        return _tiled_cycles(b, m, k, n, acc, cores)
    return _cycles(b, m, k, n, acc.tc_rows, acc.tc_cols, cores)


def matmul_s(op, acc) -> tuple[float, float]:
    b, m, k, n = (int(op[c]) for c in ("mm_b", "mm_m", "mm_k", "mm_n"))
    e = op["elem_bytes"] if op.get("elem_bytes", 0) > 0 else op["bytes_written"] / op["numel_out"]
    io = op["bytes_read"] + op["bytes_written"]
    f = acc.freq_ghz * GHZ
    f_tc = f * acc.matmul_efficiency / acc.matmul_sustained_slowdown * (acc.mma_sync_fraction if op.get("warp_mma", False) else 1.0)
    mem = acc.memory_efficiency
    hbm_bytes = io if op.get("fused", False) else max(io, _blocked(b, m, k, n, _tile(acc.glb_mib * MIB, e), e))
    port_bytes = max(hbm_bytes, _blocked(b, m, k, n, _tile(acc.tc_buffer_kib * KIB, e), e))
    hbm_s = hbm_bytes / (acc.hbm_gbps * GB * mem)
    glb = acc.glb_gbps * GB * mem
    port = acc.core_buffer_bytes_per_cycle * f * mem
    single = max(_core_cycles(b, m, k, n, acc, 1) / f_tc, hbm_s, port_bytes / min(glb, port))
    parallel = max(_core_cycles(b, m, k, n, acc, acc.n_tc) / f_tc, hbm_s, port_bytes / min(glb, acc.n_tc * port))
    fixed_s = 0.0 if op.get("fused", False) else acc.matmul_fixed_s
    return single + fixed_s, parallel + fixed_s


def vector_s(op, acc) -> tuple[float, float]:
    elems = op["numel_out"]
    if op["kind"] in INPUT_STREAMING_KINDS:
        elems = max([elems] + [math.prod(s) for s in op.get("in_shapes", ())])
    fused_softmax = op.get("fused", False) and op["target"] == FUSED_SOFTMAX_TARGET
    on_sfu = fused_softmax and acc.sfu_lanes > 0
    c = FUSED_SOFTMAX_LANE_OPS if on_sfu else cycles_per_elem(op["target"])
    io = op["bytes_read"] + op["bytes_written"]
    f = acc.freq_ghz * GHZ
    mem = acc.memory_efficiency
    hbm_s = io / (acc.hbm_gbps * GB * mem)
    glb = acc.glb_gbps * GB * mem
    port = acc.core_buffer_bytes_per_cycle * f * mem
    if fused_softmax:  # its kernel's matmul steps' sustained clock (phaze.cost.vector.vector_latency_s)
        f /= acc.matmul_sustained_slowdown

    def cycles(cores):
        lanes = math.ceil(elems / (cores * acc.vc_width)) * c
        return max(lanes, math.ceil(elems / (cores * acc.sfu_lanes))) if on_sfu else lanes

    single = max(cycles(1) / f, hbm_s, io / min(glb, port))
    parallel = max(cycles(acc.n_vc) / f, hbm_s, io / min(glb, acc.n_vc * port))
    return single, parallel


def op_latency(op, acc, network, tp: int) -> tuple[str, float, float]:
    """(unit, single-core s, all-cores s) of one op (a dict of OP_COLUMNS) on one Accelerator."""
    kind = op["kind"]
    if kind == "view":
        return "none", 0.0, 0.0
    if kind == "collective":
        t = float(getattr(network, COLLECTIVES[op["target"]])(op["comm_bytes"], tp))
        return "net", t, t
    unit, (single, parallel) = ("tc", matmul_s(op, acc)) if kind == "matmul" else ("vc", vector_s(op, acc))
    launch_s = acc.op_overhead_s if not op.get("fused", False) or op["bytes_read"] > 0 else 0.0
    return unit, single + launch_s, parallel + launch_s
