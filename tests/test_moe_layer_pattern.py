"""Mixtures of experts with dense blocks (DeepSeek-V2-Lite's first block, Megatron-Core's --moe-layer-freq) and
multi-head latent attention: the layer pattern, hand-computed parameter counts and FLOPs, and the dense block's
place in the placement chain."""

import numpy as np
import pytest

from phaze.hardware.space import enumerate_space
from phaze.placement.fixed import stage_bounds_of_layers
from phaze.placement.plan import Plan, evaluate_plan
from phaze.workload.extract import extract_uncached
from phaze.workload.families import build_model, count_params
from phaze.workload.model_rules import block_parts
from phaze.workload.graph import DENSE
from phaze.config import model_job
from tests.conftest import compose_cfg

# A tiny DeepSeek-V2: hidden H, N heads of MLA (non-rotary query/key width D, rotary R, value width DV, key/value
# latent RKV, queries from a full projection), dense MLP FD, E routed experts of width F (K per token), one shared.
H, N, D, R, DV, RKV, FD, E, K, F, SHARED, VOCAB, SEQ, MBS = 64, 4, 16, 8, 16, 32, 96, 4, 2, 32, 1, 256, 32, 2
TINY_DEEPSEEK = [
    "model=deepseek_v2_lite", "model.num_layers=3", f"model.hidden_size={H}", f"model.num_heads={N}", f"model.num_kv_heads={N}",
    f"model.head_dim={D}", f"model.rope_head_dim={R}", f"model.v_head_dim={DV}", f"model.kv_lora_rank={RKV}",
    f"model.ffn_hidden_size={FD}", f"model.num_experts={E}", f"model.experts_per_token={K}", f"model.expert_ffn_hidden_size={F}",
    f"model.num_shared_experts={SHARED}", f"model.vocab_size={VOCAB}", f"model.seq_len={SEQ}", "model.max_position_embeddings=64",
    "model.max_tp=2",
]
TOKENS = MBS * SEQ
BYTES = 2


def test_layer_pattern_matches_the_classes_blocks():
    """first_dense_layers then one MoE block in moe_layer_freq (the first of each): the blocks Hugging Face builds
    from the same fields are dense and MoE at exactly those places."""
    qwen = compose_cfg("model=qwen_moe_a2.7b", "model.num_layers=9", "model.first_dense_layers=2", "model.moe_layer_freq=3").model
    pattern = ("dense", "dense", "layer", "dense", "dense", "layer", "dense", "dense", "layer")
    assert block_parts(qwen) == pattern
    model = build_model(qwen, qwen.num_layers)
    assert tuple(DENSE if type(b.mlp).__name__ == "Qwen2MoeMLP" else "layer" for b in model.model.layers) == pattern
    deepseek = compose_cfg("model=deepseek_v2_lite").model
    assert block_parts(deepseek) == (DENSE,) + ("layer",) * 26
    assert block_parts(compose_cfg("model=mixtral_8x7b").model) == ("layer",) * 32
    assert block_parts(compose_cfg("model=llama2").model) == ("layer",) * 32


def test_deepseek_v2_lite_exact_parameter_count():
    """MLA (q, latent-kv down, latent norm, kv up, out), two norms per block, one dense SwiGLU MLP, 26 MoE blocks
    (router, 64 experts, 2 shared experts as one MLP of twice an expert's width), untied embedding and head."""
    h, n, d, r, dv, rkv, fd, e, k, f, shared, v, layers = 2048, 16, 128, 64, 128, 512, 10944, 64, 6, 1408, 2, 102400, 27
    attention = h * n * (d + r) + h * (rkv + r) + rkv + rkv * n * (d + dv) + n * dv * h
    moe = e * h + e * 3 * h * f + 3 * h * shared * f
    total = layers * (attention + 2 * h) + 3 * h * fd + (layers - 1) * moe + 2 * v * h + h
    counted, active = count_params(compose_cfg("model=deepseek_v2_lite").model)
    assert counted == total
    assert active == total - (layers - 1) * (e - k) * 3 * h * f


@pytest.fixture(scope="module")
def tiny():
    return extract_uncached(compose_cfg(*TINY_DEEPSEEK).model, MBS, BYTES, (1, 2), (False,), (1,), (1, 2))


def forward_matmul_flops(graph) -> float:
    ops = graph.fwd.ops
    return float(ops[ops.kind == "matmul"].flops.sum())


@pytest.mark.parametrize("tp", [1, 2])
def test_mla_dense_and_moe_block_flops(tiny, tp):
    """Forward matmul FLOPs by hand. Split by heads over t: the query projection, the key/value up-projection,
    the output projection and the attention kernel (causal: half the keys); replicated: the key/value
    down-projection to the latent (and the router). The dense block adds its SwiGLU MLP split over t, the MoE
    block its router, the k routed experts of every token and the shared expert."""
    t = tp
    keys = SEQ // 2
    attention = 2 * TOKENS * (H * N * (D + R) / t + H * (RKV + R) + RKV * N * (D + DV) / t + N * DV * H / t)
    attention += 2 * MBS * (N / t) * SEQ * keys * ((D + R) + DV)  # S = Q K^T, O = P V
    dense = 2 * TOKENS * 3 * H * FD / t
    moe = 2 * TOKENS * H * E + 2 * TOKENS * K * 3 * H * F / t + 2 * TOKENS * 3 * H * SHARED * F / t
    assert forward_matmul_flops(tiny.part(t, DENSE)) == pytest.approx(attention + dense, rel=1e-12)
    assert forward_matmul_flops(tiny.part(t, "layer")) == pytest.approx(attention + moe, rel=1e-12)
    assert tiny.part(t, DENSE).expert_param_bytes == 0
    assert tiny.part(t, "layer").expert_param_bytes == E * 3 * H * F / t * BYTES


def test_dense_block_is_shared_across_expert_parallel_widths(tiny):
    """The dense block holds no expert: a shard with ep = 2 takes its ep = 1 graphs (as it does the embedding's)."""
    assert tiny.part(1, DENSE, ep=2) is tiny.part(1, DENSE, ep=1)
    assert tiny.part(1, "layer", ep=2) is not tiny.part(1, "layer", ep=1)


def test_chain_places_the_dense_block_first(tiny):
    """The workload's chain is pre, the dense block, the MoE blocks, post; the training FLOPs sum it part by part;
    the placement input repeats each block part's costs where the chain names it, so a stage holding the dense
    block holds its weights, not an MoE block's."""

    from phaze.pipeline import PlacementSetup, part_latencies, placement_inputs, tp_values_of, variants_of

    assert tiny.chain == ("pre", DENSE, "layer", "layer", "post")
    g = tiny.graphs[next(iter(tiny.graphs))]
    per_mb = sum(g[p].matmul_flops() for p in ("pre", DENSE, "layer", "layer", "post"))
    assert tiny.train_matmul_flops_per_seq(1) == pytest.approx(per_mb / MBS, rel=1e-12)
    cfg = compose_cfg(*TINY_DEEPSEEK, "hw=h100", "cluster=dgx_h100", "cluster.devices=8", "train=megatron", "train.global_batch=8",
                      f"train.mbs=[{MBS}]", "train.tp_widths=[1]", "train.sp=[false]", "train.cp=[1]", "train.vp=[1]",
                      "train.tp_comm_overlap=[false]", "train.zero=[0]", "train.recompute=none")
    workloads = {MBS: tiny}
    point = enumerate_space(cfg.hw)
    network = model_job(cfg).network
    latencies = part_latencies(workloads, point, network, model_job(cfg).execution.schedule, tp_values_of(workloads), variants_of(model_job(cfg)), False)
    inp = placement_inputs(model_job(cfg), point, workloads, network, PlacementSetup.of(model_job(cfg), workloads))(latencies)
    vi, ti = inp.variant_index(MBS), inp.tp_index(1)
    dense, layer = tiny.part(1, DENSE), tiny.part(1, "layer")
    assert inp.param_bytes[vi, ti, 1] == dense.param_bytes and np.all(inp.param_bytes[vi, ti, 2:4] == layer.param_bytes)
    assert inp.fwd_s[vi, ti, 1] == latencies[DENSE]["fwd_s"][vi, ti] != inp.fwd_s[vi, ti, 2]
    pre, post = tiny.part(1, "pre").param_bytes, tiny.part(1, "post").param_bytes
    for split, stage, weights in (([1, 2], 0, pre + dense.param_bytes), ([2, 1], 1, layer.param_bytes + post)):
        cost = evaluate_plan(inp, Plan(MBS, "none", 4, tuple((a, b, 1) for a, b in stage_bounds_of_layers(inp, split))))
        assert cost.feasible and cost.stage_param_bytes[stage] == pytest.approx(weights, rel=1e-12)


def test_interleaved_dense_blocks_trace_as_their_own_part():
    """Qwen2-MoE with one MoE block in two: the chain alternates MoE and dense blocks; the dense block runs the same
    attention as the MoE block and a SwiGLU MLP of ffn_hidden_size in place of the router and experts."""
    h, heads, f_dense, f_expert, e, k, seq = 64, 4, 96, 32, 4, 2, 32
    cfg = compose_cfg("model=qwen_moe_a2.7b", "model.num_layers=4", "model.moe_layer_freq=2", f"model.hidden_size={h}",
                      f"model.num_heads={heads}", f"model.num_kv_heads={heads}", f"model.ffn_hidden_size={f_dense}",
                      f"model.expert_ffn_hidden_size={f_expert}", f"model.num_experts={e}", f"model.experts_per_token={k}",
                      "model.num_shared_experts=1", "model.vocab_size=256", f"model.seq_len={seq}", "model.max_position_embeddings=64",
                      "model.max_tp=1").model
    w = extract_uncached(cfg, 1, BYTES, (1,))
    assert w.chain == ("pre", "layer", DENSE, "layer", DENSE, "post")
    tokens = seq
    mlp = 2 * tokens * 3 * h * f_dense
    moe = 2 * tokens * h * e + 2 * tokens * k * 3 * h * f_expert + 2 * tokens * 3 * h * f_expert + 2 * tokens * h  # + shared gate
    assert forward_matmul_flops(w.part(1, DENSE)) - forward_matmul_flops(w.part(1, "layer")) == pytest.approx(mlp - moe, rel=1e-12)
    total, active = count_params(cfg)
    assert total - active == 2 * (e - k) * 3 * h * f_expert  # two MoE blocks
