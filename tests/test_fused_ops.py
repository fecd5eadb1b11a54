"""Fused kernels (phaze.workload.fused_ops): their results and gradients against the eager chains they replace,
and what a traced Llama layer holds with `model.fused_kernels` on."""

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama import modeling_llama

from phaze.workload.extract import extract_uncached
from phaze.workload.fused_ops import FUSED_OPS, GEGLU, fused_apply_rotary_pos_emb, geglu, rms_norm, swiglu
from tests.conftest import compose_cfg

T, H, HEADS, KV, FFN, SEQ = 2 * 16, 64, 4, 2, 96, 16
TINY_LLAMA = ["model=llama2", "model.num_layers=2", f"model.hidden_size={H}", f"model.num_heads={HEADS}", f"model.num_kv_heads={KV}",
              f"model.ffn_hidden_size={FFN}", "model.vocab_size=256", f"model.seq_len={SEQ}", "model.max_position_embeddings=64",
              "model.attention=flash"]
BF16 = 2


def _grads(fn, *inputs):
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    torch.manual_seed(1)
    out.backward(torch.randn_like(out))
    return out.detach(), [x.grad for x in leaves]


def test_fused_kernels_compute_what_the_eager_chains_compute():
    torch.manual_seed(0)
    x, w = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    eager = modeling_llama.LlamaRMSNorm(8, eps=1e-5).double()
    eager.weight.data = w.clone()
    out, (dx, dw) = _grads(lambda a, b: rms_norm(a, b, 1e-5)[0], x, w)
    ref, (rdx,) = _grads(eager, x)
    assert torch.allclose(out, ref) and torch.allclose(dx, rdx) and torch.allclose(dw, eager.weight.grad)

    q, k = torch.randn(2, 4, 6, 8, dtype=torch.float64), torch.randn(2, 2, 6, 8, dtype=torch.float64)
    cos, sin = torch.randn(2, 6, 8, dtype=torch.float64), torch.randn(2, 6, 8, dtype=torch.float64)
    fused, fused_grads = _grads(lambda a, b: torch.cat([t.flatten() for t in fused_apply_rotary_pos_emb(a, b, cos, sin)]), q, k)
    ref, ref_grads = _grads(lambda a, b: torch.cat([t.flatten() for t in modeling_llama.apply_rotary_pos_emb(a, b, cos, sin)]), q, k)
    assert torch.allclose(fused, ref) and all(torch.allclose(a, b) for a, b in zip(fused_grads, ref_grads))

    gate, up = torch.randn(4, 7, dtype=torch.float64), torch.randn(4, 7, dtype=torch.float64)
    fused, fused_grads = _grads(swiglu, gate, up)
    ref, ref_grads = _grads(lambda g, u: F.silu(g) * u, gate, up)
    assert torch.allclose(fused, ref) and all(torch.allclose(a, b) for a, b in zip(fused_grads, ref_grads))
    fused, fused_grads = _grads(geglu, gate, up)
    ref, ref_grads = _grads(lambda g, u: F.gelu(g, approximate="tanh") * u, gate, up)
    assert torch.allclose(fused, ref) and all(torch.allclose(a, b) for a, b in zip(fused_grads, ref_grads))


@pytest.fixture(scope="module")
def layers():
    eager = extract_uncached(compose_cfg(*TINY_LLAMA).model, 2, BF16, (1,)).part(1, "layer")
    fused = extract_uncached(compose_cfg(*TINY_LLAMA, "model.fused_kernels=true").model, 2, BF16, (1,)).part(1, "layer")
    return eager, fused


def test_a_fused_llama_layer_runs_one_kernel_per_norm_rotary_and_gate(layers):
    """Two RMSNorms, the query's and the key's rotary embeddings and the SwiGLU gate: one operator each way, with
    their own bytes (an RMSNorm reads x and its weight, writes y and the fp32 per-row reciprocal; its backward reads
    the gradient, x, the weight and the reciprocal, writes dx and dweight); the eager chains' operators are gone."""
    eager, fused = layers
    fwd, bwd = fused.fwd.ops, fused.bwd.ops
    assert fwd.target.value_counts()[["phaze.rms_norm", "phaze.rotary", "phaze.swiglu"]].tolist() == [2, 2, 1]
    assert bwd.target.value_counts()[["phaze.rms_norm_backward", "phaze.rotary_backward", "phaze.swiglu_backward"]].tolist() == [2, 2, 1]
    for eager_only in ("pow", "rsqrt", "silu", "neg", "silu_backward"):
        assert eager_only in set(eager.fwd.ops.target) | set(eager.bwd.ops.target)
        assert eager_only not in set(fwd.target) | set(bwd.target)
    norm = fwd[fwd.target == "phaze.rms_norm"].iloc[0]
    assert (norm.bytes_read, norm.bytes_written, norm.kind) == (T * H * BF16 + H * BF16, T * H * BF16 + T * 4, "norm")
    back = bwd[bwd.target == "phaze.rms_norm_backward"].iloc[0]
    assert (back.bytes_read, back.bytes_written) == (2 * T * H * BF16 + H * BF16 + T * 4, T * H * BF16 + H * BF16)
    gate = fwd[fwd.target == "phaze.swiglu"].iloc[0]
    assert (gate.bytes_read, gate.bytes_written) == (2 * T * FFN * BF16, T * FFN * BF16)
    assert len(fwd) < len(eager.fwd.ops) and len(bwd) < len(eager.bwd.ops)
    assert set(FUSED_OPS) - {GEGLU, f"{GEGLU}_backward"} == \
        set(fwd.target[fwd.target.str.startswith("phaze.") & ~fwd.target.str.contains("flash|attention")]) | \
        set(bwd.target[bwd.target.str.startswith("phaze.") & ~bwd.target.str.contains("flash|attention")])


def test_tracing_with_fused_kernels_leaves_the_modeling_files_as_they_were(layers):
    assert modeling_llama.apply_rotary_pos_emb is not fused_apply_rotary_pos_emb
    assert modeling_llama.LlamaRMSNorm.forward.__qualname__ == "LlamaRMSNorm.forward"


TINY_GROK = ["model=mixtral_8x7b", "model.num_layers=2", f"model.hidden_size={H}", f"model.num_heads={HEADS}", f"model.num_kv_heads={KV}",
             f"model.ffn_hidden_size={FFN}", f"model.expert_ffn_hidden_size={FFN}", "model.num_experts=4", "model.experts_per_token=2",
             "model.vocab_size=256", f"model.seq_len={SEQ}", "model.max_position_embeddings=64", "model.attention=flash",
             "model.activation=gelu_pytorch_tanh"]
"""A two-layer mixture of experts gated with the tanh GeLU, as Grok-1 (`activation: fast-geglu` in NeMo's recipe)."""


def test_tanh_gelu_gated_experts_run_one_geglu_kernel_each_way():
    """With fused kernels the experts' gate is one GeGLU kernel forward and one backward (Megatron-Core's bias_geglu_impl),
    reading the gate and up halves and writing their product; eager, it is a GeLU and a product."""
    eager = extract_uncached(compose_cfg(*TINY_GROK).model, 2, BF16, (1,)).part(1, "layer")
    fused = extract_uncached(compose_cfg(*TINY_GROK, "model.fused_kernels=true").model, 2, BF16, (1,)).part(1, "layer")
    assert "gelu" in set(eager.fwd.ops.target) and "gelu_backward" in set(eager.bwd.ops.target)
    assert "gelu" not in set(fused.fwd.ops.target) and "gelu_backward" not in set(fused.bwd.ops.target)
    gates = fused.fwd.ops[fused.fwd.ops.target == GEGLU]
    assert len(gates) >= 1 and (fused.bwd.ops.target == f"{GEGLU}_backward").sum() == len(gates)
    assert (gates.bytes_read == 2 * gates.bytes_written).all()
