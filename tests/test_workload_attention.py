"""`model.attention=flash`: one fused FlashAttention kernel per direction, expanded into the matmuls and
on-chip vector passes it runs; no s x s tensor in HBM or saved for backward."""

import math

import pytest
import torch

from phaze.config import typed_config
from phaze.workload.attention import flash_attention, flash_attention_backward
from phaze.workload.extract import cache_key
from phaze.workload.families import build_parts
from phaze.workload.trace import part_graph
from tests.conftest import compose_cfg

# Llama-2-7B (conf/model/llama2.yaml): 32 heads of d = 4096 / 32 = 128, s = 4096; mbs b = 1; bf16.
B, H, S, D = 1, 32, 4096, 128
BF16, FP32 = 2, 4


def layer(model: str, attention: str, t: int, *overrides: str):
    cfg = compose_cfg(f"model={model}", f"model.attention={attention}", *overrides).model
    return part_graph("layer", build_parts(cfg, 1, t)["layer"], t, 1, cfg.seq_len)


@pytest.fixture(scope="module")
def llama():
    """Llama-2-7B layer graphs at mbs=1: (attention, t) -> LayerGraph."""
    return {(a, t): layer("llama2", a, t) for a in ("eager", "flash") for t in (1, 8)}


def attention_matmul_flops(ops) -> float:
    """FLOPs of the attention matmuls: the batched ones (bmm), the linears being 2-D mm/addmm."""
    return float(ops[(ops.kind == "matmul") & (ops.target == "bmm")].flops.sum())


def linear_matmul_flops(ops) -> float:
    return float(ops[(ops.kind == "matmul") & (ops.target != "bmm")].flops.sum())


def kernel_rows(ops):
    return ops[ops.name.str.startswith("flash_attention")]


def test_eager_is_the_default():
    assert compose_cfg("model=llama2").model.attention == "eager"
    eager, flash = compose_cfg("model=llama2").model, compose_cfg("model=llama2", "model.attention=flash").model
    assert cache_key(eager, 1, 2, (1,)) != cache_key(flash, 1, 2, (1,))


@pytest.mark.parametrize("t", [1, 8])
def test_non_attention_matmuls_unchanged(llama, t):
    eager, flash = llama["eager", t], llama["flash", t]
    for direction in ("fwd", "bwd"):
        e, f = getattr(eager, direction).ops, getattr(flash, direction).ops
        assert linear_matmul_flops(f) == linear_matmul_flops(e) > 0


@pytest.mark.parametrize("t", [1, 8])
def test_causal_attention_matmul_flops(llama, t):
    """Each s^2 matmul (S = QK^T, O = PV, ...) is b*h [s x d]@[d x s]-sized: 2*b*h*s*s*d FLOPs; causal
    FlashAttention-2 skips the blocks above the diagonal, so half of that. Forward runs 2 of them
    (S, O); backward 5 (recompute S, dV, dP, dQ, dK): 2.5x forward. Eager counts the full s^2 work."""
    h = H // t
    full = 2 * B * h * S * S * D
    g = llama["flash", t]
    assert attention_matmul_flops(g.fwd.ops) == 2 * full / 2
    assert attention_matmul_flops(g.bwd.ops) == 5 * full / 2 == 2.5 * attention_matmul_flops(g.fwd.ops)
    eager = llama["eager", t]
    assert attention_matmul_flops(eager.fwd.ops) == 2 * full
    assert attention_matmul_flops(eager.bwd.ops) == 4 * full


@pytest.mark.parametrize("t", [1, 8])
def test_saved_activations_drop_the_score_matrices(llama, t):
    """Eager saves the fp32 softmax output (for its backward) and a bf16 copy of it (for P V's
    backward), b*h*s*s*(4 + 2) bytes; FlashAttention saves instead the fp32 log-sum-exp, b*h*s*4.
    Everything else saved (q, k, v, the attention output, the MLP's tensors) is the same."""
    h = H // t
    eager, flash = llama["eager", t], llama["flash", t]
    assert eager.saved_bytes - flash.saved_bytes == B * h * S * S * (FP32 + BF16) - B * h * S * FP32
    scores = (B, h, S, S)
    assert scores in set(eager.fwd.ops[eager.fwd.ops.saved_bytes > 0].out_shape)
    assert flash.fwd.ops[flash.fwd.ops.saved_bytes > 0].numel_out.max() < math.prod(scores)


def test_no_score_matrix_goes_through_hbm(llama):
    score_bytes = B * H * S * S * BF16
    g = llama["flash", 1]
    assert max(g.fwd.ops.bytes_written.max(), g.bwd.ops.bytes_written.max()) < score_bytes
    eager = llama["eager", 1]
    assert eager.fwd.ops.bytes_written.max() >= score_bytes


def test_kernel_rows_layout(llama):
    """Forward: S, P, O; backward: S, P, dV, dP, dS, dQ, dK, with the kernel's HBM reads on the first
    row, its writes on the last, nothing in between, chained by 0-byte edges."""
    g = llama["flash", 1]
    half = S // 2
    qkv_bytes = B * S * H * D * BF16
    lse_bytes = B * H * S * FP32
    cases = (
        (g.fwd, ["s", "p", "o"], 3 * qkv_bytes, qkv_bytes + lse_bytes,
         [(H, S, D, half), (0, 0, 0, 0), (H, S, half, D)]),
        (g.bwd, ["s", "p", "dv", "dp", "ds", "dq", "dk"], 5 * qkv_bytes + lse_bytes, 3 * qkv_bytes,
         [(H, S, D, half), (0, 0, 0, 0), (H, S, half, D), (H, S, D, half), (0, 0, 0, 0), (H, S, half, D), (H, S, half, D)]),
    )
    for graph, steps, read, written, dims in cases:
        rows = kernel_rows(graph.ops)
        assert [n.rsplit(".", 1)[1] for n in rows.name] == steps
        assert [tuple(r) for r in rows[["mm_b", "mm_m", "mm_k", "mm_n"]].to_numpy()] == dims
        vector = rows[rows.kind != "matmul"]
        assert (vector.numel_out == B * H * S * half).all() and set(vector.kind) == {"softmax"} | ({"elementwise"} if len(steps) > 3 else set())
        assert rows.bytes_read.tolist() == [read] + [0.0] * (len(steps) - 1)
        assert rows.bytes_written.tolist() == [0.0] * (len(steps) - 1) + [written]
        ids = rows.op_id.tolist()
        assert ids == list(range(ids[0], ids[0] + len(steps)))
        edges = graph.edges
        inner = edges[edges.src.isin(ids) & edges.dst.isin(ids)]
        assert sorted(zip(inner.src, inner.dst)) == list(zip(ids, ids[1:])) and (inner.bytes == 0).all()
        assert edges[edges.dst.isin(ids[1:]) & ~edges.src.isin(ids)].empty  # producers feed the first row
        assert edges[edges.src.isin(ids[:-1]) & ~edges.dst.isin(ids)].empty  # consumers read the last row
        assert len(edges[edges.src == ids[-1]]) > 0 and len(edges[edges.dst == ids[0]]) > 0


def test_grouped_query_attention_reads_unrepeated_kv():
    """8 KV heads for 32 query heads: the kernel reads K and V at 8 heads and writes dK, dV at 8 heads;
    the matmul work is per query head, as for 32 KV heads."""
    kv = 8
    g = layer("llama2", "flash", 1, f"model.num_kv_heads={kv}")
    fwd, bwd = kernel_rows(g.fwd.ops), kernel_rows(g.bwd.ops)
    assert fwd.bytes_read.iloc[0] == B * S * D * BF16 * (H + 2 * kv)
    assert bwd.bytes_written.iloc[-1] == B * S * D * BF16 * (H + 2 * kv)
    assert attention_matmul_flops(g.fwd.ops) == 2 * B * H * S * S * D


def test_bert_counts_the_full_square():
    """BERT-large's encoder is not causal: 16 heads of 64, s = 512, the whole s x s in every matmul."""
    h, s, d = 16, 512, 64
    g = layer("bertlarge", "flash", 1)
    full = 2 * B * h * s * s * d
    assert attention_matmul_flops(g.fwd.ops) == 2 * full
    assert attention_matmul_flops(g.bwd.ops) == 5 * full
    assert (kernel_rows(g.fwd.ops).query("kind != 'matmul'").numel_out == B * h * s * s).all()


def test_tensor_parallel_split_with_flash(llama):
    one, split = llama["flash", 1], llama["flash", 8]
    assert split.matmul_flops() == pytest.approx(one.matmul_flops() / 8, rel=1e-12)
    assert split.n_collectives() == (2, 2)
    assert one.n_collectives() == (0, 0)


def test_megatron_gpt3_traces_with_flash():
    """GPT-3 175B at its expert TP width 4: 96 / 4 heads of 128, s = 2048, causal."""
    t, h, s, d = 4, 96 // 4, 2048, 128
    g = layer("megatron_gpt3_175b", "flash", t)
    assert attention_matmul_flops(g.fwd.ops) == 2 * B * h * s * s * d
    assert attention_matmul_flops(g.bwd.ops) == 5 * B * h * s * s * d
    assert g.n_collectives() == (2, 2)
    assert g.fwd.ops[g.fwd.ops.saved_bytes > 0].numel_out.max() < B * h * s * s


def test_unknown_attention_rejected():
    with pytest.raises(ValueError, match=r"model\.attention='nope': allowed values are eager, flash"):
        typed_config(compose_cfg("model=gpt2", "model.attention=nope"))


@pytest.mark.parametrize("causal,dv", [(True, 16), (False, 16), (True, 12)])
def test_reference_kernel_matches_sdpa(causal, dv):
    """The operator's CPU implementation (outputs and gradients) against PyTorch's own attention, with GQA, and with
    values narrower than queries and keys (dv = 12 < d = 16: multi-head latent attention's 128 against 192)."""
    b, s, hq, hkv, d, scale = 2, 8, 4, 2, 16, 0.3
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, w, generator=gen, dtype=torch.float64, requires_grad=True) for n, w in ((hq, d), (hkv, d), (hkv, dv)))
    out, lse = flash_attention(q, k, v, scale, causal, 0.0)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, scale=scale, enable_gqa=True,
    ).transpose(1, 2)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    scores = q.transpose(1, 2) @ k.transpose(1, 2).repeat_interleave(hq // hkv, 1).transpose(-1, -2) * scale
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-5)
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(ref, (q, k, v), grad)
    for a, r in zip(ours, theirs):
        torch.testing.assert_close(a.double(), r, rtol=1e-5, atol=1e-5)


def test_operators_pass_opcheck():
    """Schema, fake (meta) implementation, autograd registration and AOT dispatch of both custom ops."""
    gen = torch.Generator().manual_seed(1)
    for dv in (16, 8):
        q, k, v = (torch.randn(1, 8, n, w, generator=gen, requires_grad=True) for n, w in ((4, 16), (2, 16), (2, dv)))
        torch.library.opcheck(flash_attention, (q, k, v, 0.25, True, 0.0))
        out, lse = flash_attention(q, k, v, 0.25, True, 0.0)
        assert out.shape == (1, 8, 4, dv)
        args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), 0.25, True, 0.0)
        torch.library.opcheck(flash_attention_backward, args)
