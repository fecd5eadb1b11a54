"""Workload extraction: model on `meta`, traced training step, operator tables per part and TP width."""

from phaze.workload.graph import KINDS, PARTS, LayerGraph, OpGraph, Workload

__all__ = ["KINDS", "PARTS", "LayerGraph", "OpGraph", "Workload"]
