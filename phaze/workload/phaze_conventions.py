"""The workload as the PHAZE code costs it, one `compat.*` switch per convention (docs/phaze-reference.md §9).

Each switch rewrites the operator tables the cost model reads, after extraction (the workload cache
keeps the traced step; the schedule cache keys on the latencies these tables produce):
- `no_weight_grad` (§4.2 step 2, §9.4): the weight-gradient GEMMs cost nothing, as PHAZE computes
  them and never returns them;
- `linear_mbs1` (§4.2 step 1, §9.2): a Hugging Face nn.Linear GEMM is costed as its microbatch-1 problem;
- `post_layers_lost` (§9.5): the final norm, LM head and loss cost nothing and hold no memory;
- `vector_no_memory` (§4.3, §4.5): vector-core operators move no bytes (PHAZE's vector model is compute-bound).
A dropped operator becomes a zero-cost `view`, so OpGraph.without_views removes it and keeps its dependencies.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from phaze.workload.graph import LayerGraph, OpGraph, Workload
from phaze.workload.precision import LINEAR_GEMM_TARGETS

CONV1D_FAMILIES = ("gpt2",)
"""Families whose blocks use GPT-2's Conv1D (a 2-D addmm over mbs x seq tokens), which PHAZE costs with the
microbatch; its nn.Linear GEMMs (BERT, OPT, Llama, every LM head) drop it (§9.2)."""

VECTOR_FREE_KINDS = ("matmul", "collective", "view")
"""Kinds that are not vector-core operators (phaze.cost.latency.op_units)."""

SWITCHES = ("no_weight_grad", "linear_mbs1", "post_layers_lost", "vector_no_memory")
"""The compat switches this module applies."""


def linear_gemms(ops: pd.DataFrame) -> np.ndarray:
    """Standalone nn.Linear / Conv1D GEMMs (mm, addmm; not a fused attention step)."""
    fused = ops["fused"].to_numpy(dtype=bool) if "fused" in ops.columns else np.zeros(len(ops), dtype=bool)
    return (ops["kind"].to_numpy() == "matmul") & np.isin(ops["target"].to_numpy(), LINEAR_GEMM_TARGETS) & ~fused


def weight_grad_gemms(bwd: pd.DataFrame) -> np.ndarray:
    """The backward's weight-gradient GEMMs: linear GEMMs that read no parameter (the data gradient reads the weight)."""
    return linear_gemms(bwd) & (bwd["param_bytes"].to_numpy(dtype=np.float64) == 0)


def as_dropped(ops: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """`ops` with the masked operators turned into zero-cost views (no FLOPs, no bytes)."""
    ops = ops.copy()
    ops.loc[mask, "kind"] = "view"
    ops.loc[mask, ["flops", "bytes_read", "bytes_written"]] = 0.0
    return ops


def at_mbs1(ops: pd.DataFrame, mask: np.ndarray, mbs: int, weight_grad: np.ndarray) -> pd.DataFrame:
    """The masked GEMMs as their microbatch-1 problems: the token dimension (m; k of a weight gradient, which
    reduces over tokens), the FLOPs and the activation bytes divided by mbs; weight bytes unchanged."""
    ops = ops.copy()
    token_col = np.where(weight_grad, "mm_k", "mm_m")
    for i in np.flatnonzero(mask):
        col = token_col[i]
        tokens = int(ops.at[i, col])
        if tokens % mbs:
            raise ValueError(f"GEMM {ops.at[i, 'name']}: token dimension {col}={tokens} is not a multiple of mbs={mbs}")
        ops.at[i, col] = tokens // mbs
    weights = ops["param_bytes"].to_numpy(dtype=np.float64)
    read = ops["bytes_read"].to_numpy(dtype=np.float64)
    written = ops["bytes_written"].to_numpy(dtype=np.float64)
    ops["flops"] = np.where(mask, ops["flops"].to_numpy(dtype=np.float64) / mbs, ops["flops"])
    ops["bytes_read"] = np.where(mask, (read - weights) / mbs + weights, read)
    ops["bytes_written"] = np.where(mask & ~weight_grad, written / mbs, written)
    return ops


def without_vector_memory(ops: pd.DataFrame) -> pd.DataFrame:
    """`ops` with every vector-core operator's bytes read and written at 0 (its latency is then its lane time)."""
    ops = ops.copy()
    vector = ~np.isin(ops["kind"].to_numpy(), VECTOR_FREE_KINDS)
    ops.loc[vector, ["bytes_read", "bytes_written"]] = 0.0
    return ops


def convert_direction(ops: pd.DataFrame, backward: bool, compat, linear_mbs: int) -> pd.DataFrame:
    """One direction's table under the switches; `linear_mbs` > 1 scales this part's nn.Linear GEMMs."""
    ops = ops.reset_index(drop=True)
    weight_grad = weight_grad_gemms(ops) if backward else np.zeros(len(ops), dtype=bool)
    if linear_mbs > 1:
        ops = at_mbs1(ops, linear_gemms(ops), linear_mbs, weight_grad)
    if compat.no_weight_grad:
        ops = as_dropped(ops, weight_grad)
    if compat.vector_no_memory:
        ops = without_vector_memory(ops)
    return ops


def convert_part(layer: LayerGraph, compat, family: str) -> LayerGraph:
    """One part under the switches."""
    if compat.post_layers_lost and layer.part == "post":
        return dataclasses.replace(
            layer, fwd=OpGraph(as_dropped(layer.fwd.ops, np.ones(len(layer.fwd), dtype=bool)), layer.fwd.edges),
            bwd=OpGraph(as_dropped(layer.bwd.ops, np.ones(len(layer.bwd), dtype=bool)), layer.bwd.edges),
            param_bytes=0.0, saved_bytes=0.0, input_bytes=0.0, core_saved_bytes=0.0, expert_param_bytes=0.0)
    nn_linear = not (layer.part == "layer" and family in CONV1D_FAMILIES)
    linear_mbs = layer.mbs if compat.linear_mbs1 and nn_linear else 1
    return dataclasses.replace(layer, fwd=OpGraph(convert_direction(layer.fwd.ops, False, compat, linear_mbs), layer.fwd.edges),
                               bwd=OpGraph(convert_direction(layer.bwd.ops, True, compat, linear_mbs), layer.bwd.edges))


def with_phaze_conventions(workload: Workload, compat, family: str) -> Workload:
    """The workload as PHAZE's code costs it under the `compat` switches (unchanged when none of them is on)."""
    if not any(bool(getattr(compat, s, False)) for s in SWITCHES):
        return workload
    return workload.with_parts(lambda layer: convert_part(layer, compat, family))
