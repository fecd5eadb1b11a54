"""FP8 training as Transformer Engine runs it under Megatron-Core and NeMo (`train.precision=fp8`).

The GEMMs of a transformer layer's linear modules (QKV, attention output, MLP) run in FP8, forward,
data gradient and weight gradient alike (Transformer Engine's te.Linear / LayerNormLinear /
LayerNormMLP, "Using FP8 with Transformer Engine", NVIDIA TE documentation): they read 1-byte FP8
operands and write bf16 outputs. The attention core, the embedding and the LM head stay in bf16:
Megatron-Core builds its output layer without Transformer Engine and the recipes leave FP8 attention
off (NeMo `fp8_dot_product_attention: false`). An activation that a layer keeps only for its FP8
GEMMs is kept as their FP8 copy (TE saves the cast input for the weight gradient). Expert GEMMs of a
mixture of experts are traced as batched matmuls and stay in bf16 here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from phaze.workload.graph import BLOCK_PARTS, LayerGraph, OpGraph, Workload

PRECISIONS = ("bf16", "fp8")
"""`train.precision`: bf16 everywhere (with the training dtype's bytes), or FP8 linear-layer GEMMs."""

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
    return dataclasses.replace(layer, fwd=fwd, bwd=bwd, saved_bytes=layer.saved_bytes - shed)


def with_precision(workload: Workload, precision: str) -> Workload:
    """The workload as trained in `precision` (bf16: unchanged)."""
    if precision not in PRECISIONS:
        raise ValueError(f"train.precision={precision!r}: allowed values are {PRECISIONS}")
    if precision == "bf16":
        return workload
    graphs = {shard: {name: fp8_layer(layer) for name, layer in parts.items()} for shard, parts in workload.graphs.items()}
    return dataclasses.replace(workload, graphs=graphs)


def fp8_weight_cache_bytes_per_param_byte(precision: str, bytes_per_elem: int) -> float:
    """Bytes of FP8 weight caches per byte of (training-precision) weights: 0 unless training in FP8."""
    return FP8_WEIGHT_CACHE_BYTES_PER_PARAM / bytes_per_elem if precision == "fp8" else 0.0
