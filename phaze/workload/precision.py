"""FP8 training as Transformer Engine runs it under Megatron-Core and NeMo (`train.precision=fp8`).

The GEMMs of a transformer layer's linear modules (QKV, attention output, MLP) run in FP8, forward,
data gradient and weight gradient alike (Transformer Engine's te.Linear / LayerNormLinear /
LayerNormMLP, "Using FP8 with Transformer Engine", NVIDIA TE documentation): they read 1-byte FP8
operands and write bf16 outputs. The attention core, the embedding and the LM head stay in bf16:
Megatron-Core builds its output layer without Transformer Engine and the recipes leave FP8 attention
off (NeMo `fp8_dot_product_attention: false`). An activation that a layer keeps only for its FP8
GEMMs is kept as their FP8 copy (TE saves the cast input for the weight gradient). Expert GEMMs of a
mixture of experts are traced as batched matmuls and stay in bf16 here.

Their operands are cast by kernels of their own: each linear module casts its input activation, and in backward
its output gradient, to FP8 together with the FP8 transpose its weight-gradient GEMM reads (Transformer Engine's
fused cast-transpose, `fp8_cast_transpose_fused`, in te.Linear's forward and every module's backward); where a
norm feeds the module (te.LayerNormLinear) the norm kernel writes the FP8 copy itself and only the transpose is
left (`fp8_transpose`). `fp8_casts` adds these kernels to a graph, one per distinct tensor cast.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from phaze.schema.choices import Precision
from phaze.workload.graph import BLOCK_PARTS, EDGE_COLUMNS, NO_TRAFFIC, LayerGraph, OpGraph, Workload

FP8_BYTES_PER_ELEM = 1
"""E4M3 / E5M2: one byte per element (Micikevicius et al., "FP8 Formats for Deep Learning", 2022)."""

LINEAR_GEMM_TARGETS = ("mm", "addmm")
"""The aten GEMMs of nn.Linear / Conv1D layers (the attention core is `bmm` or a fused kernel)."""

FP8_PARTS = BLOCK_PARTS
"""The parts whose linear layers are Transformer Engine modules: the transformer blocks."""

FP8_WEIGHT_CACHE_BYTES_PER_PARAM = 2.0
"""Transformer Engine keeps, per FP8 weight, its FP8 copy and FP8 transpose for the step's microbatches
(`is_first_microbatch` weight caching): 2 bytes per parameter beside the bf16 weight and fp32 master."""


def fp8_gemms(ops: pd.DataFrame) -> np.ndarray:
    """Which ops are linear-layer GEMMs run in FP8 (standalone `mm` / `addmm`)."""
    fused = ops["fused"].to_numpy(dtype=bool) if "fused" in ops.columns else np.zeros(len(ops), dtype=bool)
    return (ops["kind"].to_numpy() == "matmul") & np.isin(ops["target"].to_numpy(), LINEAR_GEMM_TARGETS) & ~fused


FP8_CAST = "phaze.fp8_cast_transpose"
"""A bf16 tensor read once, written as its FP8 copy and FP8 transpose."""
FP8_TRANSPOSE = "phaze.fp8_transpose"
"""An FP8 tensor (a fused norm's FP8 output) read once, written transposed."""
NORM_KIND = "norm"


PASS_THROUGH_KINDS = ("view", "collective")
"""What a cast looks through to the tensor's producer: views, and the all-gathers of sequence parallelism (Transformer
Engine gathers the norm's FP8 output, so a gathered norm output is still cast by its norm)."""


def _sources(op: int, preds: dict[int, list[int]], kinds: np.ndarray) -> frozenset[int]:
    """The operators whose outputs reach `op` directly or through views and collectives (empty: a graph input)."""
    out, stack, seen = set(), list(preds.get(op, [])), set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        if kinds[p] in PASS_THROUGH_KINDS:
            stack.extend(preds.get(p, []))
        else:
            out.add(p)
    return frozenset(out)


def _cast_row(target: str, elements: float, read_bytes_per_elem: float, copies_written: int, shape) -> dict:
    return {**NO_TRAFFIC, "name": target.split(".")[-1], "target": target, "kind": "elementwise", "out_shape": shape,
            "in_shapes": (shape,), "numel_out": int(elements), "flops": float(elements),
            "bytes_read": elements * read_bytes_per_elem, "bytes_written": copies_written * elements * FP8_BYTES_PER_ELEM,
            "mm_b": 0, "mm_m": 0, "mm_k": 0, "mm_n": 0, "elem_bytes": FP8_BYTES_PER_ELEM, "fused": False, "fp8": False}


def _planned_casts(graph: OpGraph, forward: bool) -> list[dict]:
    """The casts `fp8_casts` inserts: each a row, the FP8 GEMMs that read it and the operators it reads."""
    ops = graph.ops
    fp8 = ops["fp8"].to_numpy(dtype=bool)
    kinds = ops["kind"].to_numpy()
    takes_weight = ops["param_bytes"].to_numpy(dtype=np.float64) > 0
    preds = graph.edges.groupby("dst")["src"].agg(list).to_dict() if len(graph.edges) else {}
    casts: dict[object, dict] = {}
    for g in np.flatnonzero(fp8 & takes_weight).tolist():
        sources = _sources(g, preds, kinds)
        key = sources if forward and sources else g
        if key not in casts:
            row = ops.iloc[g]
            elements = float(row.mm_b * row.mm_m * row.mm_k)
            by_norm = bool(sources) and all(kinds[s] == NORM_KIND for s in sources)
            target, read, copies = (FP8_TRANSPOSE, FP8_BYTES_PER_ELEM, 1) if by_norm else (FP8_CAST, float(row.elem_bytes), 2)
            shape = (int(row.mm_b * row.mm_m), int(row.mm_k))
            casts[key] = {"row": _cast_row(target, elements, read, copies, shape), "gemms": [], "sources": sorted(sources)}
        casts[key]["gemms"].append(g)
    for g in np.flatnonzero(fp8 & ~takes_weight).tolist():
        sources = sorted(_sources(g, preds, kinds))
        # a weight-gradient GEMM reads the transpose its data-gradient GEMM's cast wrote
        mate = next((c for c in casts.values() if sources and c["sources"] == sources and len(c["gemms"]) == 1), None)
        if mate is not None:
            mate["gemms"].append(g)
    return list(casts.values())


def fp8_casts(graph: OpGraph, forward: bool) -> OpGraph:
    """The graph with a cast kernel before the FP8 GEMMs that read a tensor it casts (module docstring): in forward
    one per distinct input of the GEMMs (Hugging Face's query, key and value projections read one), a transpose only
    where a norm produced it; in backward one per data-gradient GEMM (each reads its own output gradient; the
    weight-gradient GEMM reads the transpose the same cast wrote). A graph input is cast first, any other tensor
    right before its first reader; each cast depends on the operators it reads (through views), its GEMMs on it."""
    casts = _planned_casts(graph, forward)
    if not casts:
        return graph
    before: dict[int, list[dict]] = {}
    for cast in casts:
        before.setdefault(min(cast["gemms"]) if cast["sources"] else 0, []).append(cast)
    rows, new_id, cast_id = [], {}, []
    for i, row in enumerate(graph.ops.to_dict("records")):
        for cast in before.get(i, []):
            cast_id.append((len(rows), cast))
            rows.append(cast["row"])
        new_id[i] = len(rows)
        rows.append(row)
    edges = [(new_id[s], new_id[d], b) for s, d, b in graph.edges[list(EDGE_COLUMNS)].itertuples(index=False)]
    for c, cast in cast_id:
        edges += [(new_id[s], c, cast["row"]["bytes_read"] / len(cast["sources"])) for s in cast["sources"]]
        edges += [(c, new_id[g], cast["row"]["numel_out"] * FP8_BYTES_PER_ELEM) for g in cast["gemms"]]
    frame = pd.DataFrame(rows, columns=list(graph.ops.columns))
    frame["op_id"] = np.arange(len(frame))
    return OpGraph(frame, pd.DataFrame(edges, columns=list(EDGE_COLUMNS)))


def _compute_consumers(op: int, consumers: dict, kinds: np.ndarray) -> set[int]:
    """The ops that read `op`'s output, looking through views (reshapes and transposes of the same bytes);
    an output that leaves the graph through a view counts a consumer of -1 (not an FP8 GEMM)."""
    out, stack = set(), list(consumers.get(op, []))
    while stack:
        d = stack.pop()
        if kinds[d] != "view":
            out.add(d)
        elif consumers.get(d):
            stack.extend(consumers[d])
        else:
            out.add(-1)
    return out


def _fp8_graph(graph: OpGraph, keep_fp8_saves: bool) -> tuple[OpGraph, float]:
    """The graph with its linear GEMMs in FP8 (an `fp8` column, operand bytes at 1 byte), and the saved bytes
    its forward sheds by keeping FP8 copies of what only FP8 GEMMs read."""
    ops = graph.ops.copy()
    fp8 = fp8_gemms(ops)
    elem = ops["elem_bytes"].to_numpy(dtype=np.float64)
    ops["fp8"] = fp8
    ops["bytes_read"] = np.where(fp8, ops["bytes_read"].to_numpy(dtype=np.float64) * FP8_BYTES_PER_ELEM / elem, ops["bytes_read"])
    shed = 0.0
    if keep_fp8_saves and len(graph.edges):
        consumers = graph.edges.groupby("src")["dst"].agg(list).to_dict()
        saved = ops["saved_bytes"].to_numpy(dtype=np.float64).copy()
        for src in np.flatnonzero(saved > 0):
            dsts = _compute_consumers(int(src), consumers, ops["kind"].to_numpy())
            if dsts and all(d >= 0 and fp8[d] for d in dsts):
                fp8_copy = saved[src] * FP8_BYTES_PER_ELEM / elem[src]
                shed += saved[src] - fp8_copy
                saved[src] = fp8_copy
        ops["saved_bytes"] = saved
    return OpGraph(ops, graph.edges), shed


def fp8_layer(layer: LayerGraph) -> LayerGraph:
    """One part under FP8 training: its linear GEMMs flagged and cheaper, its FP8-only saves halved."""
    if layer.part not in FP8_PARTS:
        return layer
    fwd, shed = _fp8_graph(layer.fwd, keep_fp8_saves=True)
    bwd, _ = _fp8_graph(layer.bwd, keep_fp8_saves=False)
    return dataclasses.replace(layer, fwd=fp8_casts(fwd, forward=True), bwd=fp8_casts(bwd, forward=False),
                               saved_bytes=layer.saved_bytes - shed)


def with_precision(workload: Workload, precision: str) -> Workload:
    """The workload as trained in `precision` (bf16, the traced precision: unchanged; the value is checked by
    phaze.schema.training.TrainCfg)."""
    if precision != Precision.fp8:
        return workload
    return workload.with_parts(fp8_layer)


FP8_PARAMS_TRANSPOSE_BYTES_PER_PARAM = 1.0
"""With FP8 weights (`train.fp8_params`) the weight itself is the FP8 copy; Transformer Engine keeps its FP8 transpose
beside it (Float8Tensor's cached transpose, for the data-gradient GEMM)."""


def fp8_weight_cache_bytes_per_param_byte(precision: str, bytes_per_elem: int, fp8_params: bool = False) -> float:
    """Bytes of FP8 weight caches per byte of (training-precision) weights: 0 unless training in FP8; with FP8 weights
    only the transpose."""
    if precision != "fp8":
        return 0.0
    return (FP8_PARAMS_TRANSPOSE_BYTES_PER_PARAM if fp8_params else FP8_WEIGHT_CACHE_BYTES_PER_PARAM) / bytes_per_elem


def weight_bytes_per_param_byte(bytes_per_elem: int, fp8_params: bool) -> float:
    """Bytes a device keeps, and a ZeRO gather moves, per byte of training-precision weights: 1, or the FP8 weights' share
    with `train.fp8_params` (Transformer Engine's fp8_model_init: the linear layers' weights exist in FP8 only, and the
    distributed optimizers gather them in FP8). Applied to every weight of a part, as the caches are."""
    return FP8_BYTES_PER_ELEM / bytes_per_elem if fp8_params else 1.0
