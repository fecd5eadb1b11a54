"""FlashAttention as one traced operator, and the steps its kernel runs on chip.

`phaze::flash_attention` and `phaze::flash_attention_backward` are real custom operators (with fake
implementations for `meta` tracing), registered with Hugging Face's attention registry, so the
traced graphs hold one fused node per direction, as a FlashAttention training run launches one
kernel. Its inputs and outputs are FlashAttention's: q, k, v in [b, s, heads, d] (K/V with fewer
heads under GQA, never repeated; V's head width d_v may differ from Q's and K's, as in DeepSeek's
multi-head latent attention), out [b, s, heads, d_v] and the log-sum-exp lse [b, heads, s] in fp32,
the only tensors saved for backward (Dao et al. 2022, arXiv 2205.14135; Dao 2023, FlashAttention-2,
arXiv 2307.08691, Algorithms 1 and 2). `kernel_steps` says which matmuls and vector passes
the kernel executes on those shapes, so the operator tables can cost it with the existing kinds.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

HF_NAME = "phaze_fused"
"""The name of our FlashAttention function in Hugging Face's AttentionInterface. Not "phaze_flash":
transformers treats any name containing "flash" as a request for the flash-attn package or a Hub
kernel (utils.generic.is_flash_attention_requested) and fails to import one at model build."""
HF_EAGER_NAME = "phaze_eager"
"""Our wrapper of each model's own eager attention in the AttentionInterface (it marks the core)."""
CORE_MARKER = "phaze.attention_core"
"""Traced name of the marker operator that brackets the attention core."""

FLASH_FORWARD = "phaze.flash_attention"
FLASH_BACKWARD = "phaze.flash_attention_backward"
FLASH_OPS = (FLASH_FORWARD, FLASH_BACKWARD)
"""Traced operator names (aten_ops.op_name) of the two kernels."""

CAUSAL_WORK_FRACTION = 0.5
"""Share of the s x s score blocks a causal kernel computes: FlashAttention-2 skips every block lying
wholly above the diagonal, about half of them for long sequences (arXiv 2307.08691 §3.1.1, causal
masking), so its s^2 matmuls and vector passes do half the non-causal work (the diagonal blocks'
extra share, one block row in s / block size, is left out)."""

LSE_DTYPE = torch.float32
"""FlashAttention keeps the softmax statistics (log-sum-exp per query row) in fp32."""


def _check_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] or k.shape[1] % q.shape[1]:
        raise ValueError(f"flash attention expects q [b, s, h, d], k [b, s_kv, h_kv, d] and v [b, s_kv, h_kv, d_v] (s_kv a multiple "
                         f"of s); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"query heads ({q.shape[2]}) must be a multiple of key/value heads ({k.shape[2]})")


def _accumulate(x: torch.Tensor) -> torch.Tensor:
    """x in the kernel's accumulation precision: fp32, or the input's own when wider."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _reference_probs(q, k, scale: float, causal: bool, dropout_p: float):
    """Heads-first q, k repeated over the GQA groups, and the scores S (masked when causal): the math the kernel fuses."""
    if dropout_p:
        raise ValueError("the reference flash kernel has no dropout RNG: evaluate it with dropout_p=0 (tracing on meta accepts any)")
    group = q.shape[2] // k.shape[2]
    qh = _accumulate(q.transpose(1, 2))
    kh = _accumulate(k.transpose(1, 2)).repeat_interleave(group, dim=1)
    scores = qh @ kh.transpose(-1, -2) * scale
    if causal:
        s_q, s_kv = q.shape[1], k.shape[1]
        scores = scores.masked_fill(torch.ones(s_q, s_kv, dtype=torch.bool, device=q.device).triu(1 + s_kv - s_q), -math.inf)
    return qh, kh, scores, group


@torch.library.custom_op("phaze::flash_attention", mutates_args=())
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool, dropout_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale * q k^T [causal mask]) v per head, and the log-sum-exp of each score row."""
    _check_layout(q, k, v)
    _, _, scores, group = _reference_probs(q, k, scale, causal, dropout_p)
    lse = torch.logsumexp(scores, dim=-1)
    vh = _accumulate(v.transpose(1, 2)).repeat_interleave(group, dim=1)
    out = torch.exp(scores - lse[..., None]) @ vh
    return out.transpose(1, 2).to(q.dtype).contiguous(), lse.to(LSE_DTYPE)


@flash_attention.register_fake
def _flash_attention_fake(q, k, v, scale, causal, dropout_p):
    _check_layout(q, k, v)
    b, s, h, _ = q.shape
    return q.new_empty(b, s, h, v.shape[3]), q.new_empty(b, h, s, dtype=LSE_DTYPE)


@torch.library.custom_op("phaze::flash_attention_backward", mutates_args=())
def flash_attention_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    scale: float, causal: bool, dropout_p: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) from the recomputed P = exp(S - lse): FlashAttention-2's backward (arXiv 2307.08691 Alg. 2)."""
    _check_layout(q, k, v)
    qh, kh, scores, group = _reference_probs(q, k, scale, causal, dropout_p)
    b, s_kv, h_kv, _ = k.shape
    probs = torch.exp(scores - _accumulate(lse)[..., None])
    vh = _accumulate(v.transpose(1, 2)).repeat_interleave(group, dim=1)
    do = _accumulate(grad_out.transpose(1, 2))
    dv = probs.transpose(-1, -2) @ do
    dp = do @ vh.transpose(-1, -2)
    delta = (do * _accumulate(out.transpose(1, 2))).sum(-1, keepdim=True)
    ds = probs * (dp - delta) * scale
    dq = ds @ kh
    dk = ds.transpose(-1, -2) @ qh

    def per_kv_head(x):
        return x.view(b, h_kv, group, s_kv, x.shape[-1]).sum(2).transpose(1, 2).to(k.dtype).contiguous()

    return dq.transpose(1, 2).to(q.dtype).contiguous(), per_kv_head(dk), per_kv_head(dv)


@flash_attention_backward.register_fake
def _flash_attention_backward_fake(grad_out, q, k, v, out, lse, scale, causal, dropout_p):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, scale, causal, dropout_p = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.args = (scale, causal, dropout_p)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward(grad_out, q, k, v, out, lse, *ctx.args)
    return dq, dk, dv, None, None, None


flash_attention.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("phaze::attention_core", mutates_args=())
def attention_core(x: torch.Tensor, end: bool) -> torch.Tensor:
    """Marks where the attention core (scores, softmax, dropout, weighted values: what selective recompute
    runs again, Korthikanti et al. 2022 §5) starts (on q, k, v) or ends (on its output); costs nothing."""
    return x.clone()


@attention_core.register_fake
def _attention_core_fake(x: torch.Tensor, end: bool) -> torch.Tensor:
    return torch.empty_like(x)


attention_core.register_autograd(lambda ctx, grad: (grad, None))


def core_region(fn, query, key, value):
    """fn(query, key, value) -> (output, weights), with its inputs and output marked as the attention core's edges."""
    out, weights = fn(attention_core(query, False), attention_core(key, False), attention_core(value, False))
    return attention_core(out, True), weights


CONTEXT_PARALLEL_ATTR = "phaze_context_parallel"
"""Attribute of an attention module holding (cp, stride) when its sequence is split over cp ranks."""


def hf_flash_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Hugging Face attention function: heads-first [b, h, s, d] in, ([b, s, h, d], no weights) out.

    Causal when the module is (decoders: Llama, GPT-2, OPT; not BERT's encoder). The additive mask is
    not read: causality is the kernel's flag and the traced sequences are full, unpadded ones.
    Under context parallelism (the module's CONTEXT_PARALLEL_ATTR) the local queries attend to the
    keys and values of the whole sequence, all-gathered over the cp ranks (the volume a ring
    exchange moves); gathered tensors are not kept for backward (phaze.workload.trace re-gathers them).
    """
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    causal = bool(kwargs.get("is_causal", module.is_causal))
    cp = getattr(module, CONTEXT_PARALLEL_ATTR, None)

    def core(q, k, v):
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if cp is not None and cp[0] > 1:
            from phaze.workload.tensor_parallel import gather_sequence

            k, v = gather_sequence(k, *cp, context=True), gather_sequence(v, *cp, context=True)
        return flash_attention(q.transpose(1, 2), k, v, scale, causal, float(dropout))[0], None

    return core_region(core, query, key, value)


def hf_eager_attention(module, query, key, value, attention_mask, **kwargs):
    """The module's own Hugging Face eager attention (its modeling file's eager_attention_forward), with the core marked."""
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return core_region(lambda q, k, v: eager(module, q, k, v, attention_mask, **kwargs), query, key, value)


def register_with_transformers() -> None:
    """Make `hf_config._attn_implementation` HF_NAME select hf_flash_attention and HF_EAGER_NAME hf_eager_attention (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(HF_NAME, hf_flash_attention)
    AttentionInterface.register(HF_EAGER_NAME, hf_eager_attention)


@dataclass(frozen=True)
class KernelStep:
    """One on-chip step of the fused kernel: a matmul C[b, m, n] = A[b, m, k] @ B[b, k, n] (`dims`), or a
    vector pass; shapes are the work actually done (the causally skipped blocks left out)."""

    step: str
    kind: str
    target: str
    """The aten operator whose arithmetic the step performs (its vector cycles per element in the cost stage)."""
    in_shapes: tuple[tuple[int, ...], ...]
    out_shape: tuple[int, ...]
    dims: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def numel(self) -> int:
        return math.prod(self.out_shape)


def kernel_steps(forward: bool, q_shape: tuple[int, ...], causal: bool, kv_len: int | None = None, v_dim: int | None = None) -> list[KernelStep]:
    """The matmuls and vector passes of one FlashAttention kernel on q of shape [b, s, heads, d] against
    `kv_len` keys (default s) and values of head width `v_dim` (default d), in order.

    Every query head does its own matmuls (GQA shares K/V tiles, not work), so the batch is b * heads.
    Causal: the key length seen per query row is kv_len * CAUSAL_WORK_FRACTION (n of S = QK^T, k of PV, ...);
    with context parallelism each rank holds two mirrored chunks of the sequence (Megatron-Core's load
    balancing), so its queries too see half the keys on average.
    Forward: S = Q K^T, P = softmax(S) (online; dropout fused, its mask regenerated from the RNG state
    in backward, never stored), O = P V. Backward recomputes S and P, then dV = P^T dO, dP = dO V^T,
    dS = P * (dP - rowsum(dO * O)), dQ = dS K, dK = dS^T Q.
    """
    b, s, h, d = q_shape
    bh = b * h
    kv_len = s if kv_len is None else kv_len
    dv = d if v_dim is None else v_dim
    keys = math.ceil(kv_len * CAUSAL_WORK_FRACTION) if causal else kv_len
    scores = (bh, s, keys)

    def mm(step, m, k, n):
        return KernelStep(step, "matmul", "bmm", ((bh, m, k), (bh, k, n)), (bh, m, n), (bh, m, k, n))

    recompute = [mm("s", s, d, keys), KernelStep("p", "softmax", "_softmax", (scores,), scores)]
    if forward:
        return [*recompute, mm("o", s, keys, dv)]
    return [
        *recompute,
        mm("dv", s, keys, dv),  # P^T [keys x queries] @ dO [queries x d_v]: the query length is the reduction
        mm("dp", s, dv, keys),
        KernelStep("ds", "elementwise", "_softmax_backward_data", (scores, scores), scores),
        mm("dq", s, keys, d),
        mm("dk", s, keys, d),  # dS^T [keys x queries] @ Q [queries x d]
    ]
