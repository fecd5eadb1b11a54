"""Hand-computed numbers for the modern placement dimensions: model-state bytes per ZeRO stage, activation
bytes per layer for none / selective / full recompute with and without sequence parallelism (Korthikanti
et al. 2022, arXiv 2205.05198, §4-5), the interleaved 1F1B bubble, ring-attention traffic, and the
data-parallel reduction exposed after the backward."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from phaze.cost.latency import collective_s
from phaze.cost.network import Network
from phaze.placement import PlacementInput, evaluate_fixed
from phaze.placement.dp import (
    TIMELINE_FLOW_SHOP, TIMELINE_ONE_STREAM, TL_FIELDS, TL_GB, TL_GF, TL_GH, TL_RBL, TL_RBM, TL_XB, TL_XBL, TL_XF, TL_XH,
    extend_stage, new_stage, stage_core_s,
)
from phaze.placement.memory import state_bytes_per_param_byte, transient_part_copies
from phaze.placement.plan import interleaved_chunk_inflight, interleaved_inflight
from phaze.placement.stepcomm import timeline_arrays
from phaze.schedule.streams import StreamOptions, stream_makespan
from phaze.schema import PlacementCfg
from phaze.workload.graph import OpGraph
from phaze.workload.families import build_parts
from phaze.workload.trace import part_graph
from tests.conftest import compose_cfg

# --- model states per ZeRO stage (Rajbhandari et al. 2020 §5; bf16 weights, fp32 gradients as Megatron keeps them)

PSI = 1e9
"""Parameters on the device before sharding."""
SHARDS = 8


@pytest.mark.parametrize("zero, bytes_per_param", [
    (0, 2 + 4 + 12),                              # bf16 weights, fp32 gradients, fp32 master + Adam moments
    (1, 2 + 4 + 12 / SHARDS),                     # Megatron's distributed optimizer: the 12 bytes sharded
    (2, 2 + 4 / SHARDS + 12 / SHARDS),            # + gradients sharded
    (3, (2 + 4 + 12) / SHARDS),                   # FSDP full shard: everything
])
def test_model_state_bytes_per_device_for_each_zero_stage(zero, bytes_per_param):
    weight_bytes = 2 * PSI
    mult = state_bytes_per_param_byte("adam", 2, zero, SHARDS, grad_bytes_per_elem=4)
    assert mult * weight_bytes == pytest.approx(bytes_per_param * PSI, rel=1e-12)


def test_sixteen_bytes_per_parameter_of_zero_paper_and_nemo_master_remainders():
    # ZeRO §3.1: fp16 weights and gradients + 12 bytes of Adam state = 16 bytes per parameter
    assert state_bytes_per_param_byte("adam", 2) * 2 == 16
    # NeMo's distributed Adam keeps 2-byte master remainders: 2 + 4 + (8 + 2) / 8 bytes per parameter
    mult = state_bytes_per_param_byte("adam", 2, 1, SHARDS, grad_bytes_per_elem=4, master_bytes_per_param=2)
    assert mult * 2 == pytest.approx(2 + 4 + 10 / SHARDS)
    # NeMo's distributed Adam with its state in bf16 (optim.dtype=bf16, grad_sync_dtype=bf16): no master copy, bf16
    # moments, bf16 gradients: 2 + 2 + 4 / 8 bytes per parameter
    mult = state_bytes_per_param_byte("adam", 2, 1, SHARDS, grad_bytes_per_elem=2, master_bytes_per_param=0, moment_bytes_per_param=4)
    assert mult * 2 == pytest.approx(2 + 2 + 4 / SHARDS)
    with pytest.raises(ValueError, match="placement.zero=4: allowed values are 0, 1, 2, 3"):  # checked once, in the schema
        PlacementCfg(zero=4)


@pytest.mark.parametrize("zero, grad_bytes, buffer_bytes_per_param", [
    (0, 2, 0), (1, 4, 0),                         # nothing unsharded beyond the weights and gradients counted above
    (2, 2, 2), (2, 4, 4),                         # the part being reduce-scattered: its full gradients
    (3, 2, 2 + 2 * 2), (3, 4, 4 + 2 * 2),         # + the bf16 weights of the part computing and of the one prefetched
])
def test_zero_buffers_hold_gradients_in_the_precision_they_are_reduced_in(zero, grad_bytes, buffer_bytes_per_param):
    """ZeRO-2/3's unsharded buffers per parameter of the largest part, bf16 weights: fp32-reduced gradients (Megatron,
    torchtitan's default mixed_precision_reduce) take 4 bytes each in the buffer being reduce-scattered."""
    assert transient_part_copies(zero, grad_bytes / 2) * 2 == pytest.approx(buffer_bytes_per_param, rel=1e-12)


# --- activation bytes per layer (Korthikanti et al. 2022, Eq. 1-2 and §5, 16-bit activations, 1-byte dropout masks)

S, H, A, B = 128, 256, 4, 2
"""Sequence, hidden size, heads, microbatch of a GPT layer small enough to trace in a second."""
LN_STATS_BYTES = 2 * 2 * 4 * S * B
"""Two layer norms each keep a mean and a reciprocal std per token in fp32; the paper's count leaves them out."""


@pytest.fixture(scope="module")
def gpt_layer():
    cfg = compose_cfg("model=gpt2", f"model.hidden_size={H}", f"model.num_heads={A}", f"model.num_kv_heads={A}",
                      f"model.ffn_hidden_size={4 * H}", f"model.seq_len={S}", f"model.max_position_embeddings={S}",
                      "model.activation=gelu_pytorch_tanh", "model.dropout=0.1", "model.max_tp=4", "model.num_layers=2")

    def trace(tp, sp):
        parts = build_parts(cfg.model, B, tp, torch.bfloat16, sp=sp, cp=1)
        return part_graph("layer", parts["layer"], tp, B, S)

    return trace


@pytest.mark.parametrize("tp, sp", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_activation_bytes_per_layer_match_korthikanti(gpt_layer, tp, sp):
    g = gpt_layer(tp, sp)
    sbh, as2b = S * B * H, A * S * S * B
    if sp:  # Eq. 4 / §5: everything split over the t ranks
        none = (34 * sbh + 5 * as2b) / tp + LN_STATS_BYTES / tp
        selective = 34 * sbh / tp + LN_STATS_BYTES / tp
        full = 2 * sbh / tp
    else:  # Eq. 2: layer norms, dropouts and the layer input replicated
        none = sbh * (10 + 24 / tp) + 5 * as2b / tp + LN_STATS_BYTES
        selective = sbh * (10 + 24 / tp) + LN_STATS_BYTES
        full = 2 * sbh
    assert g.saved_bytes == none
    assert g.saved_bytes - g.core_saved_bytes == selective  # the core's scores, softmax and dropout: 5as^2b/t
    assert g.input_bytes == full  # full recompute keeps the layer input only


# --- interleaved 1F1B (Narayanan et al. 2021 §2.2.2): bubble (p - 1) / (v m) of the ideal time

def uniform_chain(layers: int, devices: int, global_batch: int, **kw) -> PlacementInput:
    """`layers` identical layers (forward 1 s, backward 2 s), nothing communicated, memory unbounded."""
    ones = np.ones((1, 1, layers))
    defaults = dict(
        mbs_values=np.array([1]), tp_values=np.array([1]), fwd_s=ones, bwd_s=2 * ones, tp_comm_fwd_s=0 * ones,
        tp_comm_bwd_s=0 * ones, param_bytes=ones, saved_bytes=ones, input_bytes=0 * ones, output_bytes=0 * ones,
        num_pre=0, num_layers=layers, devices=devices, global_batch=global_batch, seq_len=8, hbm_bytes=1e18,
        network=Network(devices, devices, 1e9, 1e9, 0.0), step_model="timeline",
    )
    return PlacementInput(**{**defaults, **kw})


@pytest.mark.parametrize("pp, vp, m", [(2, 2, 4), (4, 2, 8), (4, 4, 4), (2, 1, 4)])
def test_interleaved_bubble_is_p_minus_1_over_v_m(pp, vp, m):
    layers = 16
    result = evaluate_fixed(uniform_chain(layers, pp, m), dp=1, pp=pp, tp=1, mbs=1, recompute="none", vp=vp)
    ideal_s = m * 3.0 * layers / pp  # every microbatch through a rank's layers, forward + backward
    assert result.feasible
    assert result.time_per_batch_s == pytest.approx(ideal_s * (1 + (pp - 1) / (vp * m)), rel=1e-12)
    assert result.breakdown["bubble_s"] / ideal_s == pytest.approx((pp - 1) / (vp * m), rel=1e-12)


def test_interleaved_activation_memory_counts_each_chunks_inflight_microbatches():
    # Megatron's warm-up: (p - r - 1) * 2 + (v - 1) * p forwards, then one more, visiting chunks p microbatches at a time
    assert interleaved_inflight(0, 4, 2, 8) == 6 + 4 + 1
    assert [interleaved_chunk_inflight(0, c, 4, 2, 8) for c in range(2)] == [4 + 3, 4]
    assert [interleaved_chunk_inflight(3, c, 4, 2, 8) for c in range(2)] == [4, 1]
    # 16 layers, pp 4, vp 2: chunks of 2 layers; rank 0 keeps 7 + 4 microbatch-chunks of 2 layers, 1 byte each
    result = evaluate_fixed(uniform_chain(16, 4, 8), dp=1, pp=4, tp=1, mbs=1, recompute="none", vp=2)
    weights = 4.0  # 4 layers of 1 byte, SGD: weights + gradients
    assert result.memory_per_device_bytes == pytest.approx(2 * weights + 2 * (7 + 4), rel=1e-12)


# --- ring attention (context parallelism): K and V of the whole sequence reach every cp rank

@pytest.mark.parametrize("tp, sp, cp", [(1, False, 2), (1, False, 4), (2, True, 2)])
def test_ring_attention_moves_key_and_value_of_the_other_chunks(tp, sp, cp):
    s, h, heads, kv_heads, b = 128, 256, 4, 2, 2
    cfg = compose_cfg("model=llama2", f"model.hidden_size={h}", f"model.num_heads={heads}", f"model.num_kv_heads={kv_heads}",
                      f"model.ffn_hidden_size={3 * h}", f"model.seq_len={s}", f"model.max_position_embeddings={s}",
                      "model.attention=flash", "model.max_tp=2", "model.num_layers=2")
    g = part_graph("layer", build_parts(cfg.model, b, tp, torch.bfloat16, sp=sp, cp=cp)["layer"], tp, b, s)
    kv_bytes = b * s * (kv_heads // tp) * (h // heads) * 2  # K (or V) of the whole sequence on one TP rank, bf16
    fwd = g.fwd.ops[g.fwd.ops.comm_context]
    bwd = g.bwd.ops[g.bwd.ops.comm_context]
    assert list(fwd.target) == ["phaze.all_gather"] * 2  # K and V
    assert sorted(bwd.target) == ["phaze.all_gather"] * 2 + ["phaze.reduce_scatter"] * 2  # again, then dK and dV back
    for ops in (fwd, bwd):
        assert (ops.comm_bytes == kv_bytes).all() and (ops.comm_group == cp).all() and (ops.comm_stride == tp).all()
    bytes_s = 100e9
    network = Network(64, 64, bytes_s, bytes_s, 0.0)
    # a ring of cp ranks: each receives the cp - 1 chunks it lacks, of K and of V
    assert collective_s(fwd, network, tp).sum() == pytest.approx(2 * (cp - 1) / cp * kv_bytes / bytes_s, rel=1e-12)


# --- the data-parallel gradient reduction under the backward (bucket per part, Megatron's overlap_grad_reduce)

def exposed_reduction_s(bwd_s: float, reduce_s: float, parts: int) -> float:
    """Step tail of one stage past its forward and backward: the reductions not hidden under the backward."""
    fwd = np.ones((1, parts))
    bwd = np.full((1, parts), bwd_s)
    tl = np.zeros((len(TL_FIELDS), 1, parts))
    tl[TL_RBL] = reduce_s
    st = new_stage()
    for j in range(parts):
        extend_stage(st, 0, j, fwd, bwd, np.zeros((1, parts)), np.zeros((1, parts)), np.zeros((1, parts)), tl, False, True, True)
    _, tail = stage_core_s(st, 0.0, False, True, True)
    return tail - parts * (1.0 + bwd_s)


def test_reduction_that_fits_under_backward_exposes_only_the_last_bucket():
    # each bucket reduces (0.5 s) while the next part's backward (2 s) runs; only the first part's waits
    assert exposed_reduction_s(2.0, 0.5, 4) == pytest.approx(0.5, rel=1e-12)


def test_reduction_slower_than_backward_is_exposed_by_the_difference():
    # buckets queue: the last of 4 ends at b + 4 a, the backward at 4 b: exposed 4 a - 3 b
    assert exposed_reduction_s(1.0, 3.0, 4) == pytest.approx(4 * 3.0 - 3 * 1.0, rel=1e-12)


def zero3_backward_s(timeline: int, gather_s: float, compute_s: float, reduce_s: float, parts: int) -> float:
    """A microbatch's load of one stage of `parts` equal parts with nothing but their backward, each prefetching its
    gather under the backward before it and reducing its gradients under the one after it."""
    zeros = np.zeros((1, parts))
    tl = np.zeros((len(TL_FIELDS), 1, parts))
    tl[TL_GB], tl[TL_RBM] = gather_s, reduce_s
    st = new_stage()
    for j in range(parts):
        extend_stage(st, 0, j, zeros, np.full((1, parts), compute_s), zeros, zeros, zeros, tl, False, True, timeline)
    return stage_core_s(st, 0.0, False, True, timeline)[0]


def test_fsdp_gathers_and_reductions_take_turns_on_one_stream():
    """Three parts, gathers 2 s, backward 3 s, reductions 2 s. On two streams: gathers at 0-2, 2-4, 4-6, the backward
    2-5, 5-8, 8-11, reductions 5-7, 8-10, 11-13. On FSDP's one communicator, in its order G3 G2 R3 G1 R2 R1: G3 0-2,
    G2 2-4, R3 5-7 (after its backward 2-5), G1 7-9, R2 9-11 (backward 5-8), backward of part 1 9-12, R1 12-14."""
    assert zero3_backward_s(TIMELINE_FLOW_SHOP, 2.0, 3.0, 2.0, 3) == pytest.approx(13.0, rel=1e-12)
    assert zero3_backward_s(TIMELINE_ONE_STREAM, 2.0, 3.0, 2.0, 3) == pytest.approx(14.0, rel=1e-12)
    # when the backward is long enough both hide every collective but the first gather and the last reduction
    assert zero3_backward_s(TIMELINE_ONE_STREAM, 1.0, 5.0, 1.0, 3) == pytest.approx(1.0 + 3 * 5.0 + 1.0, rel=1e-12)


def test_zero0_reduction_is_one_gradient_all_reduce_per_part():
    network = Network(16, 8, 200e9, 25e9, 0.0)
    prm = np.array([[1e9, 2e9]])  # bf16 weights of two parts
    tl = timeline_arrays(prm, np.array([1]), network, zero=0, dp=16, cp=1, replicas=(8,), grad_bytes_per_param_byte=2.0,
                         overlap_grad_reduce=True, overlap_param_gather=True, update_bytes_per_param_byte=0.0, hbm_bytes_s=0.0)
    grads = 2 * prm[0]  # fp32 gradients
    # hierarchical ring: 8 ranks inside the node, then 2 nodes each moving an eighth over its link
    expected = 2 * 7 / 8 * grads / 200e9 + 2 * 1 / 2 * grads / 8 / 25e9
    assert tl[TL_RBL, 0] == pytest.approx(expected, rel=1e-12)
    assert np.count_nonzero(tl) == 2


TWO_NODES = Network(16, 8, 200e9, 25e9, 0.0)
"""Two nodes of 8 devices: 200 GB/s inside a node, 25 GB/s per device between them."""
TWO_PARTS = np.array([[1e9, 2e9]])
"""bf16 weights of two parts (bytes on one device)."""
OVERLAPPED_DP = dict(dp=16, cp=1, replicas=(8,), grad_bytes_per_param_byte=2.0, overlap_grad_reduce=True,
                     overlap_param_gather=True, update_bytes_per_param_byte=0.0, hbm_bytes_s=0.0)
"""Data parallelism over both nodes, fp32 gradients, reductions and gathers overlapped, the update not timed."""


def test_a_part_smaller_than_megatron_bucket_pays_its_share_of_the_collective_latency():
    """Megatron-Core's buckets hold max(40M, 1M x dp) parameters: 40M at dp 16, 80M bytes of bf16 weights. Parts of
    1 GB and 2 GB (0.5 and 1 G parameters) fill buckets of their own; a 20 MB part (10M parameters) is a quarter of one
    and pays a quarter of its reduce-scatter's latency: the launch (10 us) and 7 steps of 3 us inside the node, then
    1 step of 14 us between the nodes."""
    latency = Network(16, 8, 200e9, 25e9, 3e-6, inter_latency_s=14e-6, launch_latency_s=10e-6)
    prm = np.array([[1e9, 2e9, 20e6]])
    bucketed = dict(OVERLAPPED_DP, bucket_min_bytes=40e6 * 2, bucket_bytes_per_rank=1e6 * 2)
    tl = timeline_arrays(prm, np.array([1]), latency, zero=1, **bucketed)
    grads = 2 * prm[0]
    wire = 7 / 8 * grads / 200e9 + 1 / 2 * grads / 8 / 25e9
    rs_latency = 10e-6 + 7 * 3e-6 + 14e-6
    assert tl[TL_RBL, 0] == pytest.approx(wire + np.array([1.0, 1.0, 0.25]) * rs_latency, rel=1e-12)
    # At dp 128 the bucket is 128M parameters: the 1 GB part is two of them, the 20 MB part 1/12.8 of one.
    wide = Network(128, 8, 200e9, 25e9, 3e-6, inter_latency_s=14e-6, launch_latency_s=10e-6)
    tl = timeline_arrays(prm, np.array([1]), wide, zero=1, **{**bucketed, "dp": 128, "replicas": (8,)})
    grads_wire = 7 / 8 * grads / 200e9 + 15 / 16 * grads / 8 / 25e9
    rs_latency = 10e-6 + 7 * 3e-6 + 15 * 14e-6
    assert tl[TL_RBL, 0] == pytest.approx(grads_wire + np.array([1.0, 1.0, 20e6 / 256e6]) * rs_latency, rel=1e-12)
    # Without buckets (0 and 0) every part pays the whole latency.
    plain = timeline_arrays(prm, np.array([1]), latency, zero=1, **OVERLAPPED_DP)
    assert plain[TL_RBL, 0] == pytest.approx(wire + 10e-6 + 7 * 3e-6 + 14e-6, rel=1e-12)


def test_the_distributed_optimizer_gathers_fp8_weights_in_half_the_bytes():
    """ZeRO-1's parameter all-gather after the step moves the weights as kept: bf16, or FP8 with train.fp8_params."""
    prm = TWO_PARTS
    bf16 = timeline_arrays(prm, np.array([1]), TWO_NODES, zero=1, **OVERLAPPED_DP)
    fp8 = timeline_arrays(prm, np.array([1]), TWO_NODES, zero=1, **OVERLAPPED_DP, gather_bytes_per_param_byte=0.5)
    expected = 7 / 8 * prm[0] / 200e9 + 1 / 2 * prm[0] / 8 / 25e9  # hierarchical ring all-gather of the bf16 weights
    assert bf16[TL_GH, 0] == pytest.approx(expected, rel=1e-12)
    assert fp8[TL_GH, 0] == pytest.approx(expected / 2, rel=1e-12)
    assert fp8[TL_RBL, 0] == pytest.approx(bf16[TL_RBL, 0], rel=1e-12)  # the gradients are reduced as before


def test_fsdp2_copies_each_gathered_layer_out_and_each_gradient_in_on_the_compute_stream():
    """FSDP2 (train.per_param_sharding) at ZeRO-3 over 16 shards, 2 TB/s of HBM, bf16 weights of 1 GB and 2 GB with fp32
    reductions: every gather's copy-out reads and writes the gathered bytes on the compute stream (1 ms for the 1 GB part,
    forward and backward), every reduction's copy-in reads the bf16 gradients and writes them in fp32 (1 + 2 GB: 1.5 ms),
    and the gather's own copy-in of the 1/16 shard (62.5 us) joins the gather on its stream; the reductions keep their
    time. FSDP1's flat parameters (per_param_sharding off) have none of these, nor has ZeRO-1 with it on."""
    hbm = dict(OVERLAPPED_DP, hbm_bytes_s=2e12)
    flat = timeline_arrays(TWO_PARTS, np.array([1]), TWO_NODES, zero=3, **hbm)
    fsdp2 = timeline_arrays(TWO_PARTS, np.array([1]), TWO_NODES, zero=3, **hbm, per_param_sharding=True)
    gb = TWO_PARTS[0] / 1e9
    assert fsdp2[TL_XF, 0] - flat[TL_XF, 0] == pytest.approx(1e-3 * gb, rel=1e-12)
    assert fsdp2[TL_XH, 0] - flat[TL_XH, 0] == pytest.approx(1e-3 * gb, rel=1e-12)
    assert fsdp2[TL_XB, 0] - flat[TL_XB, 0] == pytest.approx((1e-3 + 1.5e-3) * gb, rel=1e-12)
    assert fsdp2[TL_XBL, 0] - flat[TL_XBL, 0] == pytest.approx((1e-3 + 1.5e-3) * gb, rel=1e-12)
    for gather in (TL_GF, TL_GH, TL_GB):
        assert fsdp2[gather, 0] - flat[gather, 0] == pytest.approx(62.5e-6 * gb, rel=1e-12)
    assert np.array_equal(fsdp2[TL_RBM], flat[TL_RBM]) and np.array_equal(fsdp2[TL_RBL], flat[TL_RBL])
    fp8 = timeline_arrays(TWO_PARTS, np.array([1]), TWO_NODES, zero=3, **hbm, per_param_sharding=True, gather_bytes_per_param_byte=0.5)
    assert fp8[TL_XF, 0] - flat[TL_XF, 0] == pytest.approx(0.5e-3 * gb, rel=1e-12)  # FP8 gathers copy half the bytes
    zero1 = dict(zero=1, **hbm)
    assert np.array_equal(timeline_arrays(TWO_PARTS, np.array([1]), TWO_NODES, **zero1, per_param_sharding=True),
                          timeline_arrays(TWO_PARTS, np.array([1]), TWO_NODES, **zero1))


# --- collectives that overlap compute still slow it (Lee et al. 2025: 18.9% on A100 / H100; hw.overlap_slowdown)

def test_an_overlapped_reduction_slows_the_backward_it_hides_under():
    network, prm, kw = TWO_NODES, TWO_PARTS, dict(zero=0, **OVERLAPPED_DP)
    free = timeline_arrays(prm, np.array([1]), network, **kw)
    slowed = timeline_arrays(prm, np.array([1]), network, **kw, overlap_slowdown=0.189)
    # the reduction still runs beside the last backward, which now also pays 0.189 / 1.189 of its time
    assert slowed[TL_RBL, 0] == pytest.approx(free[TL_RBL, 0], rel=1e-12)
    assert slowed[TL_XBL, 0] == pytest.approx(0.189 / 1.189 * free[TL_RBL, 0], rel=1e-12)
    # a framework that does not overlap pays the reduction in full, and no slowdown on top
    blocking = timeline_arrays(prm, np.array([1]), network, **{**kw, "overlap_grad_reduce": False}, overlap_slowdown=0.189)
    assert blocking[TL_XBL, 0] == pytest.approx(free[TL_RBL, 0], rel=1e-12)
    assert not blocking[TL_RBL, 0].any()


def test_an_async_tp_collective_hidden_under_compute_slows_it():
    """A 10 ms GEMM with a 4 ms all-reduce of the layer's input gradient on the communication stream beside it: the
    layer takes 10 ms with perfect overlap and 10 + 4 x 0.189 / 1.189 ms when the collective holds 18.9% of the chip;
    issued blocking, it takes 14 ms whatever the slowdown."""
    ops = pd.DataFrame({"name": ["ar", "mm", "out"], "target": ["phaze.all_reduce", "mm", "add"], "kind": ["collective", "matmul", "elementwise"],
                        "comm_group": [2, 0, 0]})
    graph = OpGraph(ops, pd.DataFrame({"src": [0, 1], "dst": [2, 2], "bytes": [0.0, 0.0]}))
    unit, lat = np.array(["net", "tc", "vc"]), np.array([[4e-3], [10e-3], [0.0]])
    free = stream_makespan(graph, unit, lat, StreamOptions(tp_async=True))
    slowed = stream_makespan(graph, unit, lat, StreamOptions(tp_async=True, overlap_slowdown=0.189))
    blocking = stream_makespan(graph, unit, lat, StreamOptions(tp_async=False, overlap_slowdown=0.189))
    assert free[0] == pytest.approx(10e-3, rel=1e-12)
    assert slowed[0] == pytest.approx(10e-3 + 4e-3 * 0.189 / 1.189, rel=1e-12)
    assert blocking[0] == pytest.approx(14e-3, rel=1e-12)


def _ring_attention_layer(kv_ms: float, steps_ms: tuple[float, float, float]):
    """K and V all-gathered over a context-parallel ring of 4 (2 x kv_ms each) into one FlashAttention kernel (S, P,
    O steps), then an output projection."""
    names = ["ag_k", "ag_v", "attn.s", "attn.p", "attn.o", "proj"]
    ops = pd.DataFrame({"name": names, "target": ["phaze.all_gather"] * 2 + ["bmm", "_softmax", "bmm", "mm"],
                        "kind": ["collective"] * 2 + ["matmul", "softmax", "matmul", "matmul"],
                        "comm_group": [4, 4, 0, 0, 0, 0], "comm_context": [True, True, False, False, False, False],
                        "fused": [False, False, True, True, True, False]})
    edges = pd.DataFrame({"src": [0, 1, 2, 3, 4], "dst": [2, 2, 3, 4, 5], "bytes": [0.0] * 5})
    unit = np.array(["net", "net", "tc", "vc", "tc", "tc"])
    lat = np.array([[kv_ms], [kv_ms], *([t] for t in steps_ms), [1.0]]) * 1e-3
    return OpGraph(ops, edges), unit, lat


@pytest.mark.parametrize("kv_ms, expected_ms", [(3.0, 12.0 + 1.0), (6.0, 3.0 * 4.0 + 3.0 + 1.0)])
def test_ring_attention_exposes_only_the_ring_steps_the_attention_chunks_cannot_hide(kv_ms, expected_ms):
    """cp = 4: the kernel (6 + 2 + 4 = 12 ms) runs as 4 chunks of 3 ms, one per K/V chunk; K and V travel together in
    3 ring steps of (kv + kv) / 3. Chunk 0 (the local K/V) starts at once, chunk k after ring step k. With 3 ms of K
    and of V, each 2 ms step hides under a 3 ms chunk: 12 ms of attention, then the 1 ms projection. With 6 ms each,
    the 4 ms steps expose 1 ms before each of chunks 1-3: steps end at 4, 8, 12 ms and the last chunk at 15 ms."""
    graph, unit, lat = _ring_attention_layer(kv_ms, (6.0, 2.0, 4.0))
    makespan = stream_makespan(graph, unit, lat, StreamOptions())
    assert makespan[0] == pytest.approx(expected_ms * 1e-3, rel=1e-12)
    # Not pipelined (cp_pipelined=False), the exchange is on the communication stream but the kernel waits for all of it.
    whole = stream_makespan(graph, unit, lat, StreamOptions(cp_pipelined=False))
    assert whole[0] == pytest.approx((2 * kv_ms + 12.0 + 1.0) * 1e-3, rel=1e-12)
