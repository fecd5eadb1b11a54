"""The placement cost model on hand-computed cases: loads, 1F1B batch time, memory, all-reduce, fixed plans."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from phaze.cost.network import Network
from phaze.placement.breakdown import GIB, busiest_memory, busiest_time, memory_table, time_table
from phaze.placement.plan import evaluate_plan
from phaze.placement import (
    PartCosts,
    PlacementCheckError,
    PlacementInput,
    check_result,
    evaluate_fixed,
    megatron_stage_bounds,
)
from phaze.placement import dp as dp_kernels
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.schema import TrainCfg

# Four parts: pre, two layers, post; widths 1 and 2; one microbatch size. On a 1 B/s flat
# network a p2p of x bytes takes x s and an all-reduce over d takes 2 (d - 1) / d x s.
FWD_T1 = [1.0, 2.0, 1.0, 1.0]
BWD_T1 = [2.0, 4.0, 2.0, 2.0]
PARAMS_T1 = [10.0, 20.0, 20.0, 30.0]
SAVED_T1 = [1.0, 3.0, 3.0, 2.0]
INPUT = [0.5, 1.0, 1.0, 1.0]
OUTPUT = [1.0, 2.0, 1.0, 0.1]


def chain(global_batch=8, hbm=1000.0, optimizer="sgd", network=None, granularity="layer") -> PlacementInput:
    """Width 2 halves compute, weights and saved activations and adds 0.25 s of TP all-reduce per part and pass."""
    t1 = np.array([FWD_T1, BWD_T1, PARAMS_T1, SAVED_T1])
    t2 = t1 / 2
    tp_comm = np.array([[0.0] * 4, [0.25] * 4])[None]  # [mbs, tp, part]
    fwd = np.stack([t1[0], t2[0] + 0.25])[None]
    bwd = np.stack([t1[1], t2[1] + 0.25])[None]
    return PlacementInput(
        mbs_values=[1], tp_values=[1, 2], fwd_s=fwd, bwd_s=bwd, tp_comm_fwd_s=tp_comm, tp_comm_bwd_s=tp_comm,
        param_bytes=np.stack([t1[2], t2[2]])[None], saved_bytes=np.stack([t1[3], t2[3]])[None],
        input_bytes=np.array([[INPUT, INPUT]]), output_bytes=np.array([[OUTPUT, OUTPUT]]),
        num_pre=1, num_layers=2, devices=8, global_batch=global_batch, seq_len=16, hbm_bytes=hbm,
        network=network or Network(8, 8, 1.0, 1.0), optimizer=optimizer,
        model_flops_per_seq=100.0, peak_flops_s=10.0, recompute_granularity=granularity,
    )


def test_two_stage_plan_time_memory_and_breakdown():
    # stage 0 = parts 0-1: 3 + 6 compute + send 2 = 11; stage 1 = parts 2-3: 2 + 4 + recv 1 = 7.
    # m = 8 / (2 x 1) = 4; slowest all-reduce is stage 1's 50 B (not the first stage's 30 B): 50 s.
    r = evaluate_fixed(chain(), dp=2, pp=2, tp=1, mbs=1, recompute=False)
    assert r.feasible and r.reason == ""
    assert r.strategy.stage_bounds == ((0, 1), (2, 3))
    assert r.stage_load_s == (11.0, 7.0)
    assert r.time_per_batch_s == 11.0 * (4 + 2 - 1) + 50.0
    # stage 0 holds 2 microbatches: 2 x 30 + 2 x 4; stage 1 holds 1: 2 x 50 + 5.
    assert r.memory_per_stage_bytes == (68.0, 105.0)
    assert r.memory_per_device_bytes == 105.0
    assert r.breakdown == {"compute_s": 36.0, "recompute_s": 0.0, "tp_comm_s": 0.0, "p2p_s": 8.0, "zero_comm_s": 0.0,
                           "bubble_s": 11.0, "dp_allreduce_s": 50.0}
    assert r.throughput_seq_s == 8 / 105.0
    assert r.tokens_per_s == 16 * 8 / 105.0
    assert r.tokens_per_s_per_device == pytest.approx(16 * 8 / 105.0 / 4)
    assert r.mfu == pytest.approx(100.0 * 8 / 105.0 / 4 / 10.0)
    check_result(chain(), r)


def test_stage_checkpoints_cost_a_forward_keep_the_stage_input_and_spare_the_last_stage():
    # PHAZE's model, numbers as before per-layer checkpoints existed.
    r = evaluate_fixed(chain(granularity="stage"), dp=2, pp=2, tp=1, mbs=1, recompute=True)
    # stage 0: 3 + 6 + 3 (recomputed forward) + send 2 = 14; stash: saved 4 + 1 x input 0.5.
    # The last stage does not recompute: load 7, memory unchanged.
    assert r.stage_load_s == (14.0, 7.0)
    assert r.memory_per_stage_bytes == (64.5, 105.0)
    # 4 microbatches of 9 s computed and 3 s recomputed, 2 s sent; 14 s of bubble, stage 0's 30 B all-reduced
    # (stage 1's 50 B: 50 s) after the flush.
    assert r.breakdown == {"compute_s": 36.0, "recompute_s": 12.0, "tp_comm_s": 0.0, "p2p_s": 8.0, "zero_comm_s": 0.0,
                           "bubble_s": 14.0, "dp_allreduce_s": 50.0}
    assert r.time_per_batch_s == 14.0 * 5 + 50.0


def test_layer_checkpoints_keep_every_part_input_and_recompute_the_last_stage():
    r = evaluate_fixed(chain(), dp=2, pp=2, tp=1, mbs=1, recompute=True)
    # stage 0 (2 in flight): 60 + 2 x (0.5 + 1) inputs + max(1 - 0.5, 3 - 1) rebuilt = 65.
    # stage 1 (last, 1 in flight) recomputes too: load 2 + 4 + 2 + recv 1 = 9;
    # memory 100 + (1 + 1) + max(3 - 1, 2 - 1) = 104 instead of 105.
    assert r.stage_load_s == (14.0, 9.0)
    assert r.memory_per_stage_bytes == (65.0, 104.0)
    assert r.time_per_batch_s == 14.0 * 5 + 50.0
    check_result(chain(), r)


def test_one_stage_pipeline_recomputes_only_with_layer_checkpoints():
    # pp = 1, d = 2, m = 4: weights 80 B (x2 SGD), all-reduce 2 x 1/2 x 80 B = 80 s.
    stage = evaluate_fixed(chain(granularity="stage"), dp=2, pp=1, tp=1, mbs=1, recompute=True)
    assert stage.stage_load_s == (15.0,) and stage.memory_per_stage_bytes == (160.0 + 9.0,)
    assert stage.time_per_batch_s == 15.0 * 4 + 80.0
    layer = evaluate_fixed(chain(), dp=2, pp=1, tp=1, mbs=1, recompute=True)
    # inputs 0.5 + 1 + 1 + 1 = 3.5, largest rebuild 3 - 1 = 2; load 5 + 10 + 5.
    assert layer.stage_load_s == (20.0,) and layer.memory_per_stage_bytes == (160.0 + 5.5,)
    assert layer.time_per_batch_s == 20.0 * 4 + 80.0


def _three_layer_stage(granularity: str, global_batch: int) -> PlacementInput:
    """Layers with inputs 1, 2, 1 B and saved 4, 7, 5 B (10 B of weights each) then a one-part last stage."""
    ones = np.ones((1, 1, 4))
    return PlacementInput(
        mbs_values=[1], tp_values=[1], fwd_s=ones, bwd_s=2 * ones, tp_comm_fwd_s=0 * ones, tp_comm_bwd_s=0 * ones,
        param_bytes=10 * ones, saved_bytes=np.array([[[4.0, 7.0, 5.0, 3.0]]]), input_bytes=np.array([[[1.0, 2.0, 1.0, 1.0]]]),
        output_bytes=ones, num_pre=0, num_layers=4, devices=2, global_batch=global_batch, seq_len=1, hbm_bytes=1e3,
        network=Network(2, 2, 1.0, 1.0), recompute_granularity=granularity,
    )


def test_three_layer_stage_memory_by_hand():
    bounds = ((0, 2), (3, 3))
    mem = {g: evaluate_fixed(_three_layer_stage(g, 8), 1, 2, 1, 1, True, bounds).memory_per_stage_bytes for g in ("layer", "stage")}
    # Stage 0 holds 2 microbatches, weights 3 x 10 x 2 (SGD) = 60 B.
    # layer: 2 x (1 + 2 + 1) inputs + max(4 - 1, 7 - 2, 5 - 1) = 8 + 5 = 13; stage: 16 saved + 1 x 1 input = 17.
    # Last stage (one part, 1 in flight): 1 + (3 - 1) = 3 = saved; 20 B of weights.
    assert mem["layer"] == (73.0, 23.0)
    assert mem["stage"] == (77.0, 23.0)
    no_rc = evaluate_fixed(_three_layer_stage("layer", 8), 1, 2, 1, 1, False, bounds)
    assert no_rc.memory_per_stage_bytes == (60.0 + 2 * 16.0, 23.0)


def test_per_layer_checkpoints_cost_more_than_a_stage_input_with_many_microbatches_in_flight():
    # inflight 8 (8 stages to the end): layer 8 x 4 + 5 = 37 B, stage 16 + 7 x 1 = 23 B, no recompute 8 x 16 = 128 B.
    args = (0.0, 16.0, 1.0, 4.0, 5.0, 8)
    assert dp_kernels.stage_memory_bytes(*args, True, True, 2.0) == 37.0
    assert dp_kernels.stage_memory_bytes(*args, True, False, 2.0) == 23.0
    assert dp_kernels.stage_memory_bytes(*args, False, True, 2.0) == 128.0


A100_HBM_BYTES = 80 * 2**30
"""A100 80GB SXM (NVIDIA A100 datasheet)."""


def test_published_18b_run_fits_only_with_layer_checkpoints():
    # GPT 18.4B (Narayanan et al. 2021 Table 1): 40 layers, h 6144, 48 heads, s 2048, V 51200, TP 8,
    # pp 1, microbatch 8, full recompute, Adam in fp16 (16 B per parameter: 8 x the fp16 weights).
    # Per layer and TP rank (Korthikanti et al. 2022 eq. 2, no sequence parallelism): saved
    # s b h (10 + 24/t + 5 a s / (h t)) bytes, input 2 s b h bytes, weights 2 x 12 h^2 / t bytes.
    h, heads, s, vocab, t, b, n = 6144, 48, 2048, 51200, 8, 8, 40
    sbh = s * b * h
    layer_saved, layer_in = sbh * (10 + 24 / t + 5 * heads * s / (h * t)), 2.0 * sbh
    emb = 2.0 * vocab * h / t
    tokens, logits = 4.0 * s * b, 4.0 * s * b * vocab / t
    layer = PartCosts(fwd_s=np.ones((1, 1)), bwd_s=2 * np.ones((1, 1)), param_bytes=np.full((1, 1), 24.0 * h * h / t),
                      saved_bytes=np.full((1, 1), layer_saved), input_bytes=np.full((1, 1), layer_in), output_bytes=np.full((1, 1), layer_in))
    pre = dataclasses.replace(layer, param_bytes=np.full((1, 1), emb), saved_bytes=np.full((1, 1), tokens), input_bytes=np.full((1, 1), tokens))
    post = dataclasses.replace(layer, param_bytes=np.full((1, 1), emb), saved_bytes=np.full((1, 1), layer_in + logits))
    weights_state = 8.0 * (n * 24.0 * h * h / t + 2 * emb)

    def run(granularity):
        inp = PlacementInput.from_parts(
            pre, layer, post, n, mbs_values=[b], tp_values=[t], devices=256, global_batch=1024, seq_len=s,
            hbm_bytes=A100_HBM_BYTES, network=Network(256, 8, 300e9, 25e9), optimizer="adam", recompute_granularity=granularity,
        )
        return evaluate_fixed(inp, dp=32, pp=1, tp=t, mbs=b, recompute=True)

    stage, layer_rc = run("stage"), run("layer")
    # Stage checkpoints: the only stage is the last, so it keeps every layer's activations: 121 GiB.
    assert stage.memory_per_device_bytes == pytest.approx(weights_state + tokens + n * layer_saved + layer_in + logits, rel=1e-12)
    assert not stage.feasible and stage.memory_per_device_bytes > 1.5 * A100_HBM_BYTES
    # Per-layer checkpoints: every part's input plus one layer rebuilt: 44 GiB.
    expected = weights_state + tokens + (n + 1) * layer_in + (layer_saved - layer_in)
    assert layer_rc.memory_per_device_bytes == pytest.approx(expected, rel=1e-12)
    assert layer_rc.feasible and layer_rc.memory_per_device_bytes < 0.6 * A100_HBM_BYTES


def test_inflight_microbatches_are_capped_by_m():
    # Global batch 2, dp 2: m = 1, so stage 0 holds one microbatch, not two.
    r = evaluate_fixed(chain(global_batch=2), dp=2, pp=2, tp=1, mbs=1, recompute=False)
    assert r.memory_per_stage_bytes == (64.0, 105.0)
    assert r.time_per_batch_s == 11.0 * (1 + 1) + 50.0


def test_adam_mixed_precision_is_16_bytes_per_parameter():
    assert state_bytes_per_param_byte("adam", 2) == 8.0  # 16 B per fp16 parameter (ZeRO)
    assert state_bytes_per_param_byte("adam", 4) == 4.0  # fp32: weights, gradients, two moments
    assert state_bytes_per_param_byte("sgd", 2) == 2.0
    r = evaluate_fixed(chain(optimizer="adam"), dp=2, pp=2, tp=1, mbs=1, recompute=False)
    assert r.memory_per_stage_bytes == (30 * 8 + 8.0, 50 * 8 + 5.0)


def test_per_stage_tp_widths_and_tp_breakdown():
    # Stage 0 at width 2: fwd 1.5 + 0.5, bwd 3 + 0.5 -> 5.5, + send 2 = 7.5; stage 1 at width 1: 7.
    r = evaluate_fixed(chain(), dp=2, pp=2, tp=(2, 1), mbs=1, recompute=False)
    assert r.strategy.tp == (2, 1) and r.strategy.devices_used == 6
    assert r.stage_load_s == (7.5, 7.0)
    # TP share of the bottleneck: 0.25 s per part and pass on 2 parts = 1 s per microbatch.
    assert r.breakdown["tp_comm_s"] == 4 * 1.0
    assert r.breakdown["compute_s"] == 4 * (5.5 - 1.0)
    # Stage 0 all-reduces 15 B, stage 1 50 B: the batch waits for 50 s.
    assert r.time_per_batch_s == 7.5 * 5 + 50.0
    assert sum(r.breakdown.values()) == pytest.approx(r.time_per_batch_s)


def test_hierarchical_links_for_pipelines_inside_and_across_nodes():
    net = Network(8, 2, intra_bytes_s=10.0, inter_bytes_s=1.0)
    # 2 devices per pipeline fill a node: p2p inside it (2 B in 0.2 s); d = 4 replicas 2 apart
    # all-reduce across 4 nodes: 2 x 3 / 4 x 50 B at 1 B/s.
    inside = evaluate_fixed(chain(network=net), dp=4, pp=2, tp=1, mbs=1, recompute=False)
    assert inside.stage_load_s == (9.0 + 0.2, 6.0 + 0.1)
    assert inside.breakdown["dp_allreduce_s"] == 2 * 3 / 4 * 50.0
    # 3 devices per pipeline (widths 2 + 1) do not divide the node: boundaries at inter-node speed.
    across = evaluate_fixed(chain(network=net), dp=2, pp=2, tp=(2, 1), mbs=1, recompute=False)
    assert across.stage_load_s == (5.5 + 2.0, 6.0 + 1.0)


def test_megatron_split_spreads_layers_and_attaches_pre_and_post():
    inp = chain()
    assert megatron_stage_bounds(inp, 1) == ((0, 3),)
    assert megatron_stage_bounds(inp, 2) == ((0, 1), (2, 3))
    seven = PlacementInput.from_parts(*(part_costs(),) * 3, num_layers=5, **setup())
    assert seven.num_parts == 7 and seven.part_names[0] == "pre" and seven.part_names[-1] == "post"
    assert megatron_stage_bounds(seven, 2) == ((0, 3), (4, 6))
    assert megatron_stage_bounds(seven, 3) == ((0, 2), (3, 4), (5, 6))
    assert isinstance(megatron_stage_bounds(seven, 6), str)


def part_costs() -> PartCosts:
    one = np.ones((1, 1))
    return PartCosts(fwd_s=one, bwd_s=2 * one, param_bytes=one, saved_bytes=one, input_bytes=one, output_bytes=one)


def setup() -> dict:
    return dict(mbs_values=[1], tp_values=[1], devices=4, global_batch=4, seq_len=8, hbm_bytes=100.0,
                network=Network(4, 4, 1.0, 1.0))


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        (dict(dp=2, pp=2, tp=1, mbs=1, recompute=False, hbm=60.0), "exceed HBM"),
        (dict(dp=4, pp=2, tp=2, mbs=1, recompute=False), "> 8 devices"),
        (dict(dp=5, pp=1, tp=1, mbs=1, recompute=False, batch=4), "smaller than dp x mbs"),
        (dict(dp=1, pp=3, tp=1, mbs=1, recompute=False), "exceeds the 2 transformer layers"),
        (dict(dp=1, pp=2, tp=4, mbs=1, recompute=False), "TP width 4"),
        (dict(dp=1, pp=2, tp=1, mbs=2, recompute=False), "microbatch size 2"),
    ],
)
def test_infeasible_fixed_plans_come_back_flagged(kwargs, reason):
    hbm = kwargs.pop("hbm", 1000.0)
    r = evaluate_fixed(chain(global_batch=kwargs.pop("batch", 8), hbm=hbm), **kwargs)
    assert not r.feasible and reason in r.reason
    assert r.time_per_batch_s == float("inf") and r.throughput_seq_s == 0.0


def test_bad_stage_bounds_are_reported_not_raised():
    r = evaluate_fixed(chain(), dp=1, pp=2, tp=1, mbs=1, recompute=False, stage_bounds=((0, 0), (2, 3)))
    assert not r.feasible and "contiguous" in r.reason


def test_checker_rejects_tampered_results():
    inp = chain()
    good = evaluate_fixed(inp, dp=2, pp=2, tp=1, mbs=1, recompute=False)
    check_result(inp, good)
    with pytest.raises(PlacementCheckError, match="time per batch"):
        check_result(inp, dataclasses.replace(good, time_per_batch_s=good.time_per_batch_s * 1.001))
    with pytest.raises(PlacementCheckError, match="memory per stage"):
        check_result(inp, dataclasses.replace(good, memory_per_stage_bytes=(1.0, 1.0)))
    with pytest.raises(PlacementCheckError, match="infeasible"):
        check_result(dataclasses.replace(inp, hbm_bytes=100.0), good)
    strategy = dataclasses.replace(good.strategy, devices_used=3)
    with pytest.raises(PlacementCheckError, match="devices used"):
        check_result(inp, dataclasses.replace(good, strategy=strategy))


def test_input_validation():
    with pytest.raises(ValueError, match="shape"):
        dataclasses.replace(chain(), fwd_s=np.ones((1, 2, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        dataclasses.replace(chain(), bwd_s=-np.ones((1, 2, 4)))
    # The step's choices are the config's, checked once where the config is built (phaze.schema.training.TrainCfg).
    with pytest.raises(ValueError, match="train.optimizer='lamb': allowed values are sgd, adam"):
        TrainCfg(optimizer="lamb")
    with pytest.raises(ValueError, match="train.recompute_granularity='full': allowed values are layer, stage"):
        TrainCfg(recompute_granularity="full")


def test_config_and_placement_input_default_to_layer_checkpoints():
    assert TrainCfg().recompute_granularity == "layer"
    assert PlacementInput.__dataclass_fields__["recompute_granularity"].default == "layer"


def test_uneven_data_parallelism_waits_for_the_busiest_replica():
    """dp = 3 on a batch of 4 (as PHAZE's OPT baseline, dp = 85 on 4096): the busiest replica runs
    ceil(4 / 3) = 2 microbatches, so the step takes as long as with dp = 2 apart from the all-reduce."""
    from phaze.placement.plan import Plan, evaluate_plan

    inp = chain(global_batch=4)
    three = evaluate_plan(inp, Plan(1, False, 3, ((0, inp.num_parts - 1, 1),)))
    two = evaluate_plan(inp, Plan(1, False, 2, ((0, inp.num_parts - 1, 1),)))
    assert three.feasible and three.microbatches == 2 == two.microbatches
    fixed = evaluate_fixed(inp, dp=3, pp=1, tp=1, mbs=1, recompute=False)
    assert fixed.feasible and fixed.throughput_seq_s == pytest.approx(4 / fixed.time_per_batch_s)


def test_every_stage_row_sums_to_the_step_and_its_memory():
    """The per-stage tables (phaze.placement.breakdown): stage 0 is the bottleneck (11 s a microbatch), stage 1 (7 s)
    waits 4 x (11 - 7) = 16 s; each row sums to the time per batch; memory rows split stage_memory_bytes into
    weights, gradients (SGD: no optimizer state), the microbatch in progress and the stash of the one in flight."""
    r = evaluate_fixed(chain(), dp=2, pp=2, tp=1, mbs=1, recompute=False)
    cost = evaluate_plan(chain(), r.strategy.to_plan())
    times = time_table(cost, tc_shares=[0.75, 0.5])
    assert times.sum(axis=1).tolist() == pytest.approx([r.time_per_batch_s] * 2, rel=1e-12)
    assert times.loc[0, "idle_s"] == 0.0 and times.loc[1, "idle_s"] == pytest.approx(4 * (11.0 - 7.0))
    assert times.loc[0, "compute_tc_s"] == pytest.approx(0.75 * 36.0) and times.loc[1, "compute_vc_s"] == pytest.approx(0.5 * 24.0)
    assert busiest_time(times) == pytest.approx({k: v for k, v in times.loc[0].items() if k != "idle_s"})
    memory = memory_table(cost) * GIB
    assert memory.sum(axis=1).tolist() == pytest.approx([68.0, 105.0], rel=1e-12)
    # stage 0: 30 B of weights, 30 of gradients, 4 saved for the microbatch in progress and 4 for the other in flight
    assert memory.loc[0].to_dict() == pytest.approx({"weights_gib": 30.0, "weight_cache_gib": 0.0, "gradients_gib": 30.0,
                                                     "optimizer_state_gib": 0.0, "activations_gib": 4.0, "stash_gib": 4.0,
                                                     "zero_buffers_gib": 0.0})
    assert sum(busiest_memory(memory_table(cost)).values()) == pytest.approx(105.0 / GIB)


def test_inference_keeps_the_weights_alone_and_reduces_nothing():
    """optimizer none (train=inference): no gradients or optimizer state, and PHAZE's step without its all-reduce:
    the two-stage plan of test_two_stage_plan_time_memory_and_breakdown takes 11 x (4 + 2 - 1) s, not + 50."""
    assert state_bytes_per_param_byte("none", 2) == 1.0
    r = evaluate_fixed(chain(optimizer="none"), dp=2, pp=2, tp=1, mbs=1, recompute=False)
    assert r.time_per_batch_s == 11.0 * (4 + 2 - 1)
    assert r.breakdown["dp_allreduce_s"] == 0.0
    assert r.memory_per_stage_bytes == (30.0 + 8.0, 50.0 + 5.0)  # weights + the activations of the in-flight microbatches
