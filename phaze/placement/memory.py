"""Memory of one pipeline-stage device: weights, gradients, optimizer state, activations, stash.

Optimizer accounting per parameter (mixed precision, ZeRO: Rajbhandari et al. 2020, arXiv 1910.02054,
§3.1 and §5): weights and gradients in the training precision, plus for Adam fp32 momentum and variance
(8 bytes) and, below fp32, an fp32 master copy (4 bytes): 2 + 2 + 12 = 16 bytes per parameter in fp16.
SGD is weights + gradients, as PHAZE (docs/phaze-reference.md §6.3), no momentum buffer; `none` (inference)
the weights alone.
ZeRO shards over the gradient-reduction group (data x context parallel ranks): stage 1 the optimizer
state, stage 2 also the gradients, stage 3 also the weights (ZeRO §5, Pos / Pos+g / Pos+g+p).
Activations and the stash of in-flight microbatches, with stage (PHAZE) or per-layer (Megatron-LM)
recompute checkpoints: `phaze.placement.dp.stage_memory_bytes` (compiled with the kernels that
call it, so the Numba cache never mixes versions).
"""

from __future__ import annotations

WEIGHT_COPIES = 1.0
GRADIENT_COPIES = 1.0
"""Weights and their gradients, each in the training precision (PHAZE's SGD accounting: 2 copies)."""
ADAM_MOMENTS_BYTES_PER_PARAM = 8.0
"""Adam's first and second moments in fp32 (ZeRO §3.1: 12 bytes of optimizer state = these + master)."""
MOMENT_BYTES_CHOICES = (4, 8)
"""Adam's two moments per parameter: 8 (fp32) or 4 (bf16: Apex DistributedFusedAdam's `dtype`, the optimizer
state's type, set to bf16 in NeMo recipes such as dgxc-benchmarking's nemotron4-340b-synth.yaml)."""
FP32_MASTER_BYTES_PER_PARAM = 4.0
"""fp32 master weights kept when training in a lower precision (ZeRO §3.1)."""
FP32_BYTES = 4
MASTER_BYTES_CHOICES = (0, 2, 4)
"""A master copy below fp32: 4 (fp32), 2 (the low 16 bits of an fp32 value whose high 16 bits are the bf16 weight:
NeMo's `store_param_remainders`) or 0 (none: NeMo's `store_params=False` where the optimizer state has the weights'
type; both in NVIDIA/NeMo megatron_base_model.py setup_optimization)."""

ZERO_TRANSIENT_GRADIENT_COPIES = {0: 0.0, 1: 0.0, 2: 1.0, 3: 1.0}
ZERO_TRANSIENT_WEIGHT_COPIES = {0: 0.0, 1: 0.0, 2: 0.0, 3: 2.0}
"""Unsharded per-part buffers a device holds on top of its shards, in copies of the largest part's
gradients and weights: ZeRO-2 and 3 the full gradients of the part being reduce-scattered; ZeRO-3 also the
gathered weights of the part computing and of the one prefetched (PyTorch FSDP gathers one layer ahead:
Zhao et al. 2023, arXiv 2304.11277, §3.3 'forward/backward prefetching')."""


def transient_part_copies(zero: int, grad_bytes_per_param_byte: float = 1.0, weight_bytes_per_param_byte: float = 1.0) -> float:
    """Bytes of the unsharded per-part buffers per byte of the largest part's weights, the gradient copies in the
    precision the gradients are reduced in (fp32 gradients of bf16 weights: 2 bytes per weight byte), the gathered
    weights in the precision they are kept in (FP8 weights of bf16 training: 0.5)."""
    return (ZERO_TRANSIENT_GRADIENT_COPIES[zero] * grad_bytes_per_param_byte
            + ZERO_TRANSIENT_WEIGHT_COPIES[zero] * weight_bytes_per_param_byte)


def optimizer_state_bytes_per_param_byte(optimizer: str, bytes_per_elem: int, master_bytes_per_param: int | None = None,
                                         moment_bytes_per_param: int | None = None) -> float:
    """Optimizer-state bytes per byte of weights (0 for SGD, 12 / bytes for mixed-precision Adam; a master copy of
    `master_bytes_per_param` instead of fp32's 4, and moments of `moment_bytes_per_param` instead of fp32's 8, where
    the framework stores less)."""
    if optimizer in ("sgd", "none"):
        return 0.0
    if optimizer == "adam":
        master = FP32_MASTER_BYTES_PER_PARAM if master_bytes_per_param is None else float(master_bytes_per_param)
        moments = ADAM_MOMENTS_BYTES_PER_PARAM if moment_bytes_per_param is None else float(moment_bytes_per_param)
        extra = moments + (master if bytes_per_elem < FP32_BYTES else 0.0)
        return extra / bytes_per_elem
    raise ValueError(f"unknown optimizer {optimizer!r}")


STATE_PARTS = ("weights", "weight_cache", "gradients", "optimizer_state")
"""What a device keeps per byte of its weights: the weights, FP8 training's weight caches, the gradients and the
optimizer state, each sharded as the ZeRO stage shards it."""


def state_components(optimizer: str, bytes_per_elem: int, zero: int = 0, shards: int = 1, grad_bytes_per_elem: int | None = None,
                     master_bytes_per_param: int | None = None, weight_cache_copies: float = 0.0,
                     moment_bytes_per_param: int | None = None, weight_copies: float = WEIGHT_COPIES) -> dict[str, float]:
    """Bytes of each of STATE_PARTS per byte of (unsharded) weights held by a device, with ZeRO stage `zero`
    sharding over `shards` ranks (stage 1 the optimizer state, 2 also the gradients, 3 also the weights and their
    caches); gradients kept in `grad_bytes_per_elem` (default: the training precision; Megatron keeps bf16 runs'
    gradients in fp32); `weight_cache_copies` more bytes per weight byte kept beside the weights (FP8 training); Adam's
    master copy and moments in `master_bytes_per_param` and `moment_bytes_per_param` (default: fp32's 4 and 8); the
    weights themselves `weight_copies` bytes per byte (FP8 weights of bf16 training: 0.5)."""
    optimizer_state = optimizer_state_bytes_per_param_byte(optimizer, bytes_per_elem, master_bytes_per_param, moment_bytes_per_param)
    grads = GRADIENT_COPIES * (grad_bytes_per_elem or bytes_per_elem) / bytes_per_elem if optimizer != "none" else 0.0
    weight_shards = shards if zero >= 3 else 1
    return {"weights": weight_copies / weight_shards, "weight_cache": weight_cache_copies / weight_shards,
            "gradients": grads / (shards if zero >= 2 else 1), "optimizer_state": optimizer_state / (shards if zero >= 1 else 1)}


def state_bytes_per_param_byte(optimizer: str, bytes_per_elem: int, zero: int = 0, shards: int = 1,
                               grad_bytes_per_elem: int | None = None, master_bytes_per_param: int | None = None,
                               weight_cache_copies: float = 0.0, moment_bytes_per_param: int | None = None,
                               weight_copies: float = WEIGHT_COPIES) -> float:
    """Bytes of weights + gradients + optimizer state per byte of (unsharded) weights held by a device: the sum of
    state_components."""
    return sum(state_components(optimizer, bytes_per_elem, zero, shards, grad_bytes_per_elem, master_bytes_per_param,
                                weight_cache_copies, moment_bytes_per_param, weight_copies).values())
