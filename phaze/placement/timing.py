"""PipeDream-flush (1F1B) timing of a pipeline: stage loads, in-flight microbatches, batch time.

The per-stage formulas (compute, recompute, in-flight microbatches, memory) are compiled with the
kernels in `phaze.placement.dp`; the plan evaluator and the reference call the same functions, so
their floating-point results agree bit for bit.
"""

from __future__ import annotations

import numpy as np


def pipeline_in_one_node(devices_per_pipeline, node_size: int):
    """With devices numbered TP-innermost, then stages, then replicas, every pipeline sits inside a
    node when it divides the node; otherwise its stage boundaries are charged the inter-node link
    (exact when they all cross nodes, an upper bound on the rest). Scalar or array of pipeline sizes."""
    k = np.asarray(devices_per_pipeline)
    inside = (k <= node_size) & (node_size % np.maximum(k, 1) == 0)
    return inside if inside.ndim else bool(inside)


def batch_time_s(max_load_s: float, microbatches: int, stages: int, dp_allreduce_s: float) -> float:
    """1F1B time per batch: the bottleneck load for m microbatches plus the (s - 1)-slot bubble,
    then the data-parallel gradient all-reduce (not overlapped with compute)."""
    return max_load_s * float(microbatches + stages - 1) + dp_allreduce_s
