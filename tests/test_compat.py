"""The compat switches (PHAZE-code conventions, docs/phaze-reference.md §9): each one's hand-checkable effect,
and compat=none reproducing the default numbers exactly."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from phaze.compat import PHAZE_COMPUTE_PER_COMM_UNIT, expert_run_spaces
from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.hardware import enumerate_space
from phaze.pipeline import evaluate_point, load_workloads, placement_input
from phaze.plan_space import placement_space
from phaze.schedule.cache import problem_key
from phaze.schedule.instance import LayerProblem

from phaze.search.evaluator import optimum_run
from phaze.search.study import run_study
from phaze.workload.phaze_conventions import linear_gemms, weight_grad_gemms, with_phaze_conventions
from phaze.config import model_job, study_spec, typed_config
from tests.conftest import compose_cfg
from tests.test_search_study import TINY_MODEL

H, FFN, SEQ, HEADS = 256, 512, 128, 4
TINY_LLAMA = [
    "model=llama2", "model.num_layers=2", f"model.hidden_size={H}", f"model.num_heads={HEADS}", f"model.num_kv_heads={HEADS}",
    f"model.ffn_hidden_size={FFN}", f"model.seq_len={SEQ}", f"model.max_position_embeddings={SEQ}", "model.vocab_size=1000",
    "model.max_tp=2", "train.mbs=[1,2]", "train.tp_widths=[1,2]", "train.global_batch=64", "cluster.devices=16",
]
"""A two-block Llama (nn.Linear everywhere, no biases): q, k, v, o are h x h, gate, up, down h x ffn."""
LINEAR_MACS_PER_TOKEN = 4 * H * H + 3 * H * FFN


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("compat-cache")


def workloads(cache, *overrides):
    return load_workloads(model_job(compose_cfg(*TINY_LLAMA, f"cache_dir={cache}", *overrides)))


def layer(ws, mbs, part="layer"):
    return ws[mbs].part(1, part)


def linear_flops(ops: pd.DataFrame) -> float:
    return float(ops.flops[linear_gemms(ops)].sum())


def test_without_weight_gradients_a_linear_backward_is_half_the_default(cache):
    default, compat = workloads(cache), workloads(cache, "compat.no_weight_grad=true")
    tokens = 2 * SEQ
    assert linear_flops(layer(default, 2).bwd.ops) == 2 * 2 * tokens * LINEAR_MACS_PER_TOKEN  # data + weight gradient
    assert linear_flops(layer(compat, 2).bwd.ops) == 2 * tokens * LINEAR_MACS_PER_TOKEN  # data gradient only: exactly half
    assert layer(compat, 2).fwd.ops.equals(layer(default, 2).fwd.ops)
    bwd = layer(compat, 2).bwd.ops
    assert int(weight_grad_gemms(layer(default, 2).bwd.ops).sum()) == 7 and int(weight_grad_gemms(bwd).sum()) == 0
    assert float(bwd.flops[bwd.target == "bmm"].sum()) == float(layer(default, 2).bwd.ops.flops[bwd.target == "bmm"].sum())


def test_linear_gemms_at_microbatch_1_are_the_mbs1_problems(cache):
    default, compat = workloads(cache), workloads(cache, "compat.linear_mbs1=true")
    cols = ["mm_b", "mm_m", "mm_k", "mm_n", "flops", "bytes_read", "bytes_written"]
    for direction in ("fwd", "bwd"):
        at2 = getattr(layer(compat, 2), direction).ops
        at1 = getattr(layer(default, 1), direction).ops
        lin2, lin1 = linear_gemms(at2), linear_gemms(at1)
        assert lin2.sum() == (7 if direction == "fwd" else 14)
        assert np.array_equal(at2.loc[lin2, cols].to_numpy(), at1.loc[lin1, cols].to_numpy())
    fwd2 = layer(compat, 2).fwd.ops
    assert linear_flops(fwd2) == 2 * SEQ * LINEAR_MACS_PER_TOKEN  # seq x in x out, the microbatch dropped
    attention = (fwd2.target == "bmm").to_numpy()
    assert np.array_equal(fwd2.flops[attention], layer(default, 2).fwd.ops.flops[attention])  # attention keeps mbs
    assert layer(compat, 1).fwd.ops.equals(layer(default, 1).fwd.ops)  # at mbs 1 nothing changes


def test_gpt2_conv1d_blocks_keep_their_microbatch():
    """PHAZE costs GPT-2's Conv1D (2-D addmm over mbs x seq) right; only its nn.Linear LM head drops mbs."""
    cfg = compose_cfg(*TINY_MODEL, "compat.linear_mbs1=true")
    compat, default = load_workloads(model_job(cfg)), load_workloads(model_job(compose_cfg(*TINY_MODEL)))
    assert compat[2].part(1, "layer").fwd.ops.equals(default[2].part(1, "layer").fwd.ops)
    assert compat[2].part(1, "post").matmul_flops() == default[1].part(1, "post").matmul_flops()


def test_compute_ms_makes_communication_1000x_lighter_against_compute():
    cfg = compose_cfg("compat.compute_ms=true")
    default_net, compat_net = Network.from_cfg(cfg.cluster), model_job(cfg).network
    nbytes, n = 1e9, 8
    ring_s = 2 * (n - 1) / n * nbytes / (4 * 1024**3)  # PHAZE's 4 GiB/s link
    assert default_net.allreduce_s(nbytes, n) == pytest.approx(ring_s, rel=1e-12)
    assert compat_net.allreduce_s(nbytes, n) == pytest.approx(ring_s / PHAZE_COMPUTE_PER_COMM_UNIT, rel=1e-12)
    assert compat_net.p2p_s(nbytes, False) == pytest.approx(default_net.p2p_s(nbytes, False) / PHAZE_COMPUTE_PER_COMM_UNIT, rel=1e-12)
    ops = layer(load_workloads(model_job(compose_cfg(*TINY_LLAMA, "train.mbs=[1]"))), 1).fwd.without_views().ops
    point = enumerate_space(cfg.hw).head(1)
    compute = (ops.kind != "collective").to_numpy()
    a = op_latencies(ops, point, default_net, 1).parallel_s[:, 0]
    b = op_latencies(ops, point, compat_net, 1).parallel_s[:, 0]
    assert np.array_equal(a[compute], b[compute])  # compute times untouched: their weight against communication x1000


def test_post_layers_lost_cost_and_hold_nothing(cache):
    default, compat = workloads(cache), workloads(cache, "compat.post_layers_lost=true")
    post = layer(compat, 1, "post")
    assert layer(default, 1, "post").matmul_flops() == 3 * 2 * SEQ * H * 1000  # LM head h x vocab: fwd, data and weight gradient
    assert post.matmul_flops() == 0 and post.param_bytes == 0 and post.saved_bytes == 0
    assert set(post.fwd.ops.kind) == {"view"} and len(post.fwd.without_views()) == 0
    assert layer(compat, 1).fwd.ops.equals(layer(default, 1).fwd.ops)


def test_vector_ops_without_memory_take_their_lane_time(cache):
    cfg = compose_cfg(*TINY_LLAMA, "hw=tpuv4")
    point = enumerate_space(cfg.hw)
    ops = layer(workloads(cache, "compat.vector_no_memory=true"), 1).fwd.without_views().ops
    adds = ops[(ops.target == "add") & (ops.numel_out == SEQ * H)].head(1)
    assert float(adds.bytes_read.iloc[0]) == 0.0 and float(adds.bytes_written.iloc[0]) == 0.0
    t = op_latencies(adds, point, Network.from_cfg(cfg.cluster), 1).parallel_s[0, 0]
    row = point.iloc[0]
    lanes = row.n_vc * row.vc_width  # 2 x 128 on the TPUv4-like chip; an add is one cycle per element
    assert t == pytest.approx(math.ceil(SEQ * H / lanes) / (row.freq_ghz * 1e9), rel=1e-12)


def test_baseline_in_the_optimum_run_takes_its_hbm_mbs_and_recompute():
    class Strategy:
        mbs, recompute = 4, "none"

    class Result:
        feasible, strategy = True, Strategy()

    reference = pd.DataFrame([{"n_tc": 8, "hbm_gib": 32}])
    point, run = optimum_run(reference, pd.DataFrame([{"n_tc": 4, "hbm_gib": 80}]), Result())
    assert run == (4, "none") and float(point.hbm_gib.iloc[0]) == 80 and int(point.n_tc.iloc[0]) == 8
    assert optimum_run(reference, reference, None) == (reference, None)


def test_baseline_in_the_optimum_run_in_a_study(tmp_path):
    base = [*TINY_MODEL, "hw=tiny_grid", "model.expert.pp=2", "model.expert.dp=8", "search.storage=memory",
            "tracking.enabled=false", f"cache_dir={tmp_path}", f"schedule.cache_dir={tmp_path}/schedule"]
    default = run_study(study_spec(compose_cfg(*base)), None, progress=False)
    compat = run_study(study_spec(compose_cfg(*base, "compat.baseline_in_optimum_run=true")), None, progress=False)
    assert compat.best.throughput_seq_s == default.best.throughput_seq_s  # the search is untouched
    best, base_plan = compat.best.result.strategy, compat.baseline.result.strategy
    assert (base_plan.mbs, base_plan.recompute) == (best.mbs, best.recompute)
    assert (base_plan.pp, base_plan.dp) == (2, 8)
    assert default.baseline.throughput_seq_s >= compat.baseline.throughput_seq_s > 0  # its best run at least as fast


def test_compat_none_reproduces_the_default_numbers(tmp_path):
    base = [*TINY_MODEL, "hw=tiny_grid", f"cache_dir={tmp_path}", "schedule.cache=false"]
    default, none = compose_cfg(*base), compose_cfg(*base, "compat=none")
    assert default.compat == none.compat and not any(default.compat[s] for s in ("compute_ms", "no_weight_grad"))
    assert study_spec(default).name == study_spec(none).name != study_spec(compose_cfg(*base, "compat=phaze")).name
    assert model_job(none).network == Network.from_cfg(none.cluster)
    w_default, w_none = load_workloads(model_job(default)), load_workloads(model_job(none))
    for mbs, w in w_default.items():
        assert with_phaze_conventions(w, none.compat, "gpt2") is w  # the very same tables
        for shard, parts in w.graphs.items():
            for name, graph in parts.items():
                other = w_none[mbs].graphs[shard][name]
                assert graph.fwd.ops.equals(other.fwd.ops) and graph.bwd.ops.equals(other.bwd.ops)
                assert graph.param_bytes == other.param_bytes and graph.saved_bytes == other.saved_bytes
    point = enumerate_space(default.hw).head(1)
    assert evaluate_point(model_job(none), point).throughput_seq_s == evaluate_point(model_job(default), point).throughput_seq_s


def test_a_compat_layer_is_a_different_schedule_cache_entry(cache):
    """The schedule cache keys on the layer's operators and latencies, so switched tables never hit default entries."""
    cfg = compose_cfg(*TINY_LLAMA)
    point = enumerate_space(cfg.hw).head(1)
    net = Network.from_cfg(cfg.cluster)
    keys = []
    for ws in (workloads(cache), workloads(cache, "compat.no_weight_grad=true")):
        graph = layer(ws, 1).bwd.without_views()
        lat = op_latencies(graph.ops, point, net, 1)
        problem = LayerProblem.build(graph, lat.unit, lat.single_s[:, 0], lat.parallel_s[:, 0], int(point.n_tc[0]), int(point.n_vc[0]))
        keys.append(problem_key(problem, 0.01))
    assert keys[0] != keys[1]


def test_the_search_keeps_only_runs_whose_expert_plan_fits(tmp_path):
    """PHAZE drops an (mbs, HBM, recompute) run whose fixed plan does not fit (§6.7): no fit, no space; room, all."""
    cfg = compose_cfg(*TINY_MODEL, "hw=tiny_grid", "model.expert.pp=2", "model.expert.dp=8", "compat.baseline_in_optimum_run=true",
                      f"cache_dir={tmp_path}", "schedule.cache=false")
    ws = load_workloads(model_job(cfg))
    point = enumerate_space(cfg.hw).head(1)
    net = model_job(cfg).network
    space = placement_space(typed_config(cfg))
    roomy = expert_run_spaces(cfg.compat, cfg.model.expert, placement_input(model_job(cfg), point.assign(hbm_gib=1024), ws, net), space)
    assert [(s.recompute, s.mbs) for s in roomy] == [(("none",), (1, 2)), (("full",), (1, 2))]
    tiny_hbm = point.assign(hbm_gib=1e-6)
    assert expert_run_spaces(cfg.compat, cfg.model.expert, placement_input(model_job(cfg), tiny_hbm, ws, net), space) == []
    assert evaluate_point(model_job(cfg), tiny_hbm, ws) is None
    default = compose_cfg(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={tmp_path}")
    assert expert_run_spaces(default.compat, default.model.expert, placement_input(model_job(default), tiny_hbm, ws, net), space) == [space]
