"""Memory of one pipeline-stage device: weights, gradients, optimizer state, activations, stash.

Optimizer accounting per parameter (mixed precision, ZeRO: Rajbhandari et al. 2020, SC'20, §3.1):
weights and gradients in the training precision, plus for Adam fp32 momentum and variance (8 bytes)
and, below fp32, an fp32 master copy (4 bytes): 2 + 2 + 12 = 16 bytes per parameter in fp16.
SGD is weights + gradients, as PHAZE (reference/phaze-method.md §6.3), no momentum buffer.
Activations and the stash of in-flight microbatches, with stage (PHAZE) or per-layer (Megatron-LM)
recompute checkpoints: `phaze.placement.dp.stage_memory_bytes` (compiled with the kernels that
call it, so the Numba cache never mixes versions).
"""

from __future__ import annotations

WEIGHT_AND_GRADIENT_COPIES = 2.0
"""Weights and their gradients, both in the training precision (PHAZE's SGD accounting)."""
ADAM_MOMENTS_BYTES_PER_PARAM = 8.0
"""Adam's first and second moments in fp32 (ZeRO §3.1: 12 bytes of optimizer state = these + master)."""
FP32_MASTER_BYTES_PER_PARAM = 4.0
"""fp32 master weights kept when training in a lower precision (ZeRO §3.1)."""
FP32_BYTES = 4


def state_bytes_per_param_byte(optimizer: str, bytes_per_elem: int) -> float:
    """Bytes of weights + gradients + optimizer state per byte of weights held by a device."""
    if optimizer == "sgd":
        return WEIGHT_AND_GRADIENT_COPIES
    if optimizer == "adam":
        extra = ADAM_MOMENTS_BYTES_PER_PARAM + (FP32_MASTER_BYTES_PER_PARAM if bytes_per_elem < FP32_BYTES else 0.0)
        return WEIGHT_AND_GRADIENT_COPIES + extra / bytes_per_elem
    raise ValueError(f"unknown optimizer {optimizer!r}")
