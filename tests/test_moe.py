"""Mixtures of experts: published parameter counts, the expert GEMMs and all-to-alls of a hand-computed
balanced routing, memory with and without expert parallelism, and the search over `ep`."""

import dataclasses
import math

import pandas as pd
import pytest
import torch

from phaze.cost.network import Network
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.workload.experts import Routing, expert_param_bytes, expert_rows
from phaze.workload.extract import EXPERT_FREE_PARTS, extract_uncached
from phaze.workload.families import build_parts, count_params
from phaze.workload.trace import part_graph
from phaze.config import model_job
from tests.conftest import compose_cfg

H, F, E, K, VOCAB, SEQ, MBS = 64, 96, 4, 2, 256, 32, 2
TINY_MOE = [
    "model=mixtral_8x7b", "model.num_layers=2", f"model.hidden_size={H}", "model.num_heads=4", "model.num_kv_heads=2",
    f"model.ffn_hidden_size={F}", f"model.expert_ffn_hidden_size={F}", f"model.num_experts={E}", f"model.experts_per_token={K}",
    f"model.vocab_size={VOCAB}", f"model.seq_len={SEQ}", "model.max_position_embeddings=64", "model.max_tp=2", "model.attention=flash",
]
BYTES = 2
TOKENS = MBS * SEQ


ACTIVE_WITHOUT_INPUT_EMBEDDING = {"deepseek_v2_lite"}
"""Sources that count active parameters without the input embedding table (a token reads one row of it): DeepSeek
(V2's 21 B and V2-Lite's 2.4 B fit only that way; conf/model/deepseek_v2_lite.yaml)."""
LAST_DIGIT = {"deepseek_v2_lite"}
"""Figures matched to one unit of their last published digit rather than half of it: V2-Lite's 2.4 B active,
which DeepSeek's count (2.451 B by ours) rounds down."""


@pytest.mark.parametrize("model", ["mixtral_8x7b", "qwen_moe_a2.7b", "olmoe_1b_7b", "deepseek_v2_lite"])
def test_parameter_counts_match_the_published_ones(model):
    """Total and active (k of E routed experts) parameters against the source's figures, within 0.5% or, for a
    figure published to two significant digits (OLMoE's 1.3 B active), within its rounding."""
    cfg = compose_cfg(f"model={model}").model
    total, active = count_params(cfg)
    if model in ACTIVE_WITHOUT_INPUT_EMBEDDING:
        active -= cfg.vocab_size * cfg.hidden_size
    for counted, published in ((total, cfg.published_params), (active, cfg.published_active_params)):
        rounding = (1.0 if model in LAST_DIGIT else 0.5) * 10 ** (math.floor(math.log10(published)) - 1)
        assert abs(counted - published) <= max(0.005 * published, rounding), f"{model}: {counted:.4e} vs {published:.4e}"


def test_mixtral_exact_parameter_count():
    h, f, n, e, v, kv = 4096, 14336, 32, 8, 32000, 1024
    per_layer = 2 * h * h + 2 * h * kv + e * h + e * 3 * h * f + 2 * h  # attention, router, experts, two RMSNorms
    total, active = count_params(compose_cfg("model=mixtral_8x7b").model)
    assert total == n * per_layer + 2 * v * h + h
    assert active == total - n * (e - 2) * 3 * h * f


@pytest.fixture(scope="module")
def tiny():
    cfg = compose_cfg(*TINY_MOE).model
    return extract_uncached(cfg, MBS, BYTES, (1, 2), (False, True), (1,), (1, 2, 4))


def expert_matmuls(graph):
    ops = graph.ops
    return ops[(ops.kind == "matmul") & (ops.target == "bmm") & ~ops.fused.astype(bool)]


@pytest.mark.parametrize("ep", [2, 4])
def test_shards_with_expert_parallelism_share_the_pre_and_post_traced_at_ep_1(tiny, ep):
    """The pre and post parts hold no experts: a shard with ep > 1 takes its ep = 1 shard's graphs, which equal
    what tracing them at that ep gives (ops, edges and every byte count)."""
    cfg = compose_cfg(*TINY_MOE).model
    parts = build_parts(cfg, MBS, 2, torch.bfloat16, sp=True, ep=ep)
    for p in set(EXPERT_FREE_PARTS) & set(tiny.parts):
        shared = tiny.part(2, p, sp=True, ep=ep)
        assert shared is tiny.part(2, p, sp=True, ep=1)
        fresh = part_graph(p, parts[p], 2, MBS, SEQ, bool(cfg.fused_kernels), expert_param_bytes(parts[p].module))
        for direction in ("fwd", "bwd"):
            for table in ("ops", "edges"):
                pd.testing.assert_frame_equal(getattr(getattr(fresh, direction), table), getattr(getattr(shared, direction), table))
        assert dataclasses.replace(fresh, fwd=shared.fwd, bwd=shared.bwd) == shared
    assert tiny.part(2, "layer", sp=True, ep=ep).expert_param_bytes < tiny.part(2, "layer", sp=True, ep=1).expert_param_bytes


@pytest.mark.parametrize("tp,ep", [(1, 1), (1, 2), (1, 4), (2, 2)])
def test_expert_gemm_flops_of_a_balanced_routing(tiny, tp, ep):
    """Each local expert computes T k ep / E tokens, so a device runs E/ep experts on T k token copies: gate and
    up projections (2f/t wide) and the down projection, 2 T k 3 h f / t FLOPs forward, twice that backward."""
    layer = tiny.part(tp, "layer", ep=ep)
    fwd = expert_matmuls(layer.fwd)
    assert set(fwd.mm_b) == {E // ep} and set(fwd.mm_m) == {TOKENS * K * ep // E}
    assert fwd.flops.sum() == 2 * TOKENS * K * 3 * H * F / tp
    assert expert_matmuls(layer.bwd).flops.sum() == 2 * fwd.flops.sum()
    assert layer.expert_param_bytes == E // ep * 3 * H * F // tp * BYTES


def test_capacity_factor_and_imbalance_pad_every_expert():
    tokens, k, e = 4096, 2, 8
    assert expert_rows(tokens, k, e, Routing()) == 1024
    assert expert_rows(tokens, k, e, Routing(ep=4)) == 4096
    assert expert_rows(tokens, k, e, Routing(capacity_factor=1.25)) == 1280
    assert expert_rows(tokens, k, e, Routing(imbalance=1.5)) == 1536
    assert expert_rows(tokens, k, e, Routing(capacity_factor=1.25, imbalance=3.0)) == 1280  # capacity caps the busiest expert


@pytest.mark.parametrize("tp,ep", [(1, 2), (1, 4), (2, 2)])
def test_all_to_all_bytes_per_device(tiny, tp, ep):
    """Dispatch and combine move each device's T k / t token copies (h wide) in forward and again in backward,
    over the EP group whose members are t devices apart (Megatron-Core's rank order tp, cp, ep, dp)."""
    layer = tiny.part(tp, "layer", ep=ep)
    for graph in (layer.fwd, layer.bwd):
        a2a = graph.ops[graph.ops.target == "phaze.all_to_all"]
        assert len(a2a) == 2
        assert set(a2a.comm_bytes) == {TOKENS * K * H * BYTES / tp}
        assert set(a2a.comm_group) == {ep} and set(a2a.comm_stride) == {tp}


def test_all_to_all_time_inside_and_across_nodes():
    net = Network(devices=64, node_size=8, intra_bytes_s=400.0, inter_bytes_s=50.0)
    nbytes = 800.0
    assert net.all_to_all_s(nbytes, 8, 1) == pytest.approx(7 / 8 * nbytes / 400.0)  # one node
    # 8 members 2 apart: 4 share each node, 4 are in another: the inter-node half is the slower
    assert net.all_to_all_s(nbytes, 8, 2) == pytest.approx(max(3 / 8 * nbytes / 400.0, 4 / 8 * nbytes / 50.0))
    assert net.all_to_all_s(nbytes, 8, 8) == pytest.approx(7 / 8 * nbytes / 50.0)  # one member per node
    assert net.all_to_all_s(nbytes, 1, 1) == 0.0


def test_memory_per_device_with_and_without_expert_parallelism():
    """Same plan at ep 1 and ep 4 (ZeRO 1 over dp 4): the expert weights shrink by ep, and their optimizer state
    is sharded over the expert-data-parallel group (dp / ep = 1) instead of dp; activations are unchanged."""
    from phaze.hardware.space import enumerate_space
    from phaze.pipeline import evaluate_point, load_workloads

    common = [*TINY_MOE, "hw=h100", "cluster=dgx_h100", "cluster.devices=8", "train=megatron", "train.global_batch=8",
              "train.mbs=1", "train.tp_widths=[1]", "train.recompute=none", "placement.dp=4", "placement.pp=1", "placement.tp=1",
              "placement.zero=1", "placement.sp=false", "placement.cp=1", "placement.vp=1", "placement.tp_comm_overlap=false"]
    mems, layers = {}, {}
    for ep in (1, 4):
        cfg = compose_cfg(*common, f"placement.ep={ep}")
        workloads = load_workloads(model_job(cfg))
        result = evaluate_point(model_job(cfg), enumerate_space(cfg.hw), workloads)
        assert result.feasible and result.strategy.ep == ep
        mems[ep] = result.memory_per_device_bytes
        layers[ep] = workloads[1].part(1, "layer", ep=ep)
    t = cfg.train

    def mult(shards):
        return state_bytes_per_param_byte("adam", 2, 1, shards, t.grad_bytes_per_elem, t.master_bytes_per_param)

    expert = layers[1].expert_param_bytes
    assert layers[4].expert_param_bytes == expert / 4
    assert layers[4].param_bytes == layers[1].param_bytes - expert * 3 / 4
    assert layers[4].saved_bytes == layers[1].saved_bytes
    saved_per_layer = 2 * expert * (mult(4) - mult(1) / 4)  # two layers
    assert mems[1] - mems[4] == pytest.approx(saved_per_layer, rel=1e-9)


def test_dense_models_have_only_ep_1():
    from phaze.plan_space import options

    assert options(compose_cfg("model=llama2", "train=megatron"), "ep") == [1]
    assert options(compose_cfg("model=mixtral_8x7b", "train=megatron"), "ep") == [1, 2, 4, 8]
    assert options(compose_cfg("model=qwen_moe_a2.7b", "train=megatron"), "ep") == [1, 2, 4]


def test_search_picks_expert_parallelism_where_memory_needs_it():
    """Mixtral on 64 H100s: sharding the experts (ep > 1) frees memory and optimizer traffic, so the DP's plan
    uses it, and no fixed plan with Megatron's even stages (any ep, pp) beats the DP's optimum."""
    from phaze.hardware.space import enumerate_space
    from phaze.pipeline import evaluate_point, load_workloads

    common = ["model=mixtral_8x7b", "hw=h100", "cluster=dgx_h100", "cluster.devices=64", "train=megatron", "train.global_batch=128",
              "train.mbs=1", "train.tp_widths=[1]", "train.recompute=none", "train.sp=[false]", "train.cp=[1]", "train.vp=[1]",
              "train.zero=[1]", "train.tp_comm_overlap=[false]"]
    cfg = compose_cfg(*common)
    best = evaluate_point(model_job(cfg), enumerate_space(cfg.hw), load_workloads(model_job(cfg)))
    assert best.feasible and best.strategy.ep > 1
    fixed = []
    for ep in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8):
            dp = 64 // pp
            cfg = compose_cfg(*common, f"placement.dp={dp}", f"placement.pp={pp}", "placement.tp=1", f"placement.ep={ep}")
            result = evaluate_point(model_job(cfg), enumerate_space(cfg.hw), load_workloads(model_job(cfg)))
            fixed.append(result.throughput_seq_s if result.feasible else 0.0)
    assert 0 < max(fixed) <= best.throughput_seq_s * (1 + 1e-9)


@pytest.mark.parametrize("family,extra", [("qwen2_moe", ["model.num_shared_experts=2"]), ("olmoe", ["model.max_tp=1"])])
def test_other_families_trace_with_one_reduction_per_block(family, extra):
    """Qwen-MoE's shared expert is split like a dense MLP and reduced together with the routed experts (one
    all-reduce after attention, one after the MoE block); OLMoE (QK-norm, no TP) traces its 64-expert style block."""
    cfg = compose_cfg(*TINY_MOE, f"model.family={family}", *extra).model
    widths = (1, 2) if family == "qwen2_moe" else (1,)
    w = extract_uncached(cfg, MBS, BYTES, widths, (False,), (1,), (1, 2))
    for t in widths:
        layer = w.part(t, "layer", ep=2)
        assert expert_matmuls(layer.fwd).flops.sum() == 2 * TOKENS * K * 3 * H * F / t
        reduces = layer.fwd.ops[layer.fwd.ops.target == "phaze.all_reduce"]
        assert len(reduces) == (2 if t > 1 else 0)
    total, active = count_params(cfg)
    routed = 2 * (E * 3 * H * F)  # two layers
    assert total - active == routed * (E - K) // E


@pytest.mark.parametrize("ep, regroups", [(1, 0), (2, 2), (4, 0)])
def test_received_rows_are_regrouped_by_local_expert_when_a_device_holds_several(tiny, ep, regroups):
    """With ep > 1 and more than one local expert (E/ep = 2 at ep = 2) the T k received rows arrive grouped by
    sending rank: one gather regroups them by expert before the grouped GEMM and one back before the combine. At
    ep = 1 nothing is received; at ep = 4 each device holds one expert, so its rows need no regrouping."""
    layer = tiny.part(1, "layer", ep=ep)
    ops = layer.fwd.ops
    row_gathers = ops[(ops.target == "index_select") & (ops.numel_out == TOKENS * K * H)]
    assert len(row_gathers) == 1 + regroups  # the token permutation, then the regroups
    assert set(row_gathers.bytes_written) == {TOKENS * K * H * BYTES}
