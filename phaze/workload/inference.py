"""Inference (`train.forward_only`, `train=inference`): the extracted training step's forward alone, as WHAM's
inference-only designs serve it (experiments/paper/inference_baseline.py). Every part keeps its forward graph and its
weights; its backward graph is empty and it keeps no activations for a backward pass."""

from __future__ import annotations

import dataclasses

from phaze.workload.graph import LayerGraph, OpGraph, Workload


def without_backward(graph: LayerGraph) -> LayerGraph:
    """The part with an empty backward and nothing saved for it."""
    fwd = graph.fwd
    empty = OpGraph(fwd.ops.iloc[0:0].copy(), fwd.edges.iloc[0:0].copy())
    return dataclasses.replace(graph, bwd=empty, saved_bytes=0.0, core_saved_bytes=0.0)


def forward_only(workload: Workload) -> Workload:
    """The workload with every part's backward removed (without_backward)."""
    return workload.with_parts(without_backward)
