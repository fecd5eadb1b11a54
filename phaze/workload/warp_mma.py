"""The fused attention kernel's instruction set, applied after the trace cache: with warp-level MMA (mma.sync, as
FlashAttention-2 is written) its matmul steps are flagged `warp_mma`, and the cost model runs them at the chip's
hw.mma_sync_fraction (phaze.cost.latency)."""

from __future__ import annotations

import dataclasses

from phaze.workload.graph import OpGraph, Workload


def _flagged(graph: OpGraph) -> OpGraph:
    ops = graph.ops.copy()
    ops["warp_mma"] = ops["fused"].to_numpy(dtype=bool) & (ops["kind"].to_numpy() == "matmul")
    return OpGraph(ops, graph.edges)


def with_warp_mma(workload: Workload, warp_mma: bool) -> Workload:
    """The workload with its fused kernels' matmuls computed with warp-level MMA (`warp_mma`), else unchanged."""
    if not warp_mma:
        return workload
    return workload.with_parts(lambda layer: dataclasses.replace(layer, fwd=_flagged(layer.fwd), bwd=_flagged(layer.bwd)))

