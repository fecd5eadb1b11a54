"""The placement cost model on hand-computed cases: loads, 1F1B batch time, memory, all-reduce, fixed plans."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from phaze.cost.network import Network
from phaze.placement import (
    PartCosts,
    PlacementCheckError,
    PlacementInput,
    check_result,
    evaluate_fixed,
    megatron_stage_bounds,
)
from phaze.placement.memory import state_bytes_per_param_byte

# Four parts: pre, two layers, post; widths 1 and 2; one microbatch size. On a 1 B/s flat
# network a p2p of x bytes takes x s and an all-reduce over d takes 2 (d - 1) / d x s.
FWD_T1 = [1.0, 2.0, 1.0, 1.0]
BWD_T1 = [2.0, 4.0, 2.0, 2.0]
PARAMS_T1 = [10.0, 20.0, 20.0, 30.0]
SAVED_T1 = [1.0, 3.0, 3.0, 2.0]
INPUT = [0.5, 1.0, 1.0, 1.0]
OUTPUT = [1.0, 2.0, 1.0, 0.1]


def chain(global_batch=8, hbm=1000.0, optimizer="sgd", network=None) -> PlacementInput:
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
        model_flops_per_seq=100.0, peak_flops_s=10.0,
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
    assert r.breakdown == {"compute_s": 36.0, "bubble_s": 11.0, "tp_comm_s": 0.0, "p2p_s": 8.0, "dp_allreduce_s": 50.0}
    assert r.throughput_seq_s == 8 / 105.0
    assert r.tokens_per_s == 16 * 8 / 105.0
    assert r.tokens_per_s_per_device == pytest.approx(16 * 8 / 105.0 / 4)
    assert r.mfu == pytest.approx(100.0 * 8 / 105.0 / 4 / 10.0)
    check_result(chain(), r)


def test_recompute_costs_a_forward_keeps_inputs_and_spares_the_last_stage():
    r = evaluate_fixed(chain(), dp=2, pp=2, tp=1, mbs=1, recompute=True)
    # stage 0: 3 + 6 + 3 (recomputed forward) + send 2 = 14; stash: saved 4 + 1 x input 0.5.
    # The last stage does not recompute: load 7, memory unchanged.
    assert r.stage_load_s == (14.0, 7.0)
    assert r.memory_per_stage_bytes == (64.5, 105.0)
    assert r.time_per_batch_s == 14.0 * 5 + 50.0


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
        (dict(dp=3, pp=2, tp=1, mbs=1, recompute=False), "not a multiple"),
        (dict(dp=1, pp=3, tp=1, mbs=1, recompute=False), "exceeds the 2 transformer layers"),
        (dict(dp=1, pp=2, tp=4, mbs=1, recompute=False), "TP width 4"),
        (dict(dp=1, pp=2, tp=1, mbs=2, recompute=False), "microbatch size 2"),
    ],
)
def test_infeasible_fixed_plans_come_back_flagged(kwargs, reason):
    hbm = kwargs.pop("hbm", 1000.0)
    r = evaluate_fixed(chain(hbm=hbm), **kwargs)
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
    with pytest.raises(ValueError, match="optimizer"):
        dataclasses.replace(chain(), optimizer="lamb")
