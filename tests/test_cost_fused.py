"""Steps of a fused kernel (FlashAttention): operands on chip, one launch per kernel."""

import numpy as np
import pandas as pd
import pytest

from phaze.config import compose_config
from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.workload.graph import OP_COLUMNS


def _step(fused: bool, bytes_read: float, bytes_written: float) -> dict:
    # one attention score block, bh=32 heads, s=4096, d=128: S = Q K^T
    row = {c: 0 for c in OP_COLUMNS}
    row.update(op_id=0, name="s", target="bmm", kind="matmul", numel_out=32 * 4096 * 4096, flops=2.0 * 32 * 4096 * 128 * 4096,
               bytes_read=bytes_read, bytes_written=bytes_written, mm_b=32, mm_m=4096, mm_k=128, mm_n=4096,
               elem_bytes=2, fused=fused, in_shapes=(), out_shape=())
    return row


@pytest.fixture(scope="module")
def a100():
    cfg = compose_config("hw=a100", "cluster=dgx_a100")
    return enumerate_space(cfg.hw), Network.from_cfg(cfg.cluster)


def test_fused_step_pays_compute_not_hbm(a100):
    points, net = a100
    ops = pd.DataFrame([_step(True, 0.0, 0.0), _step(False, 0.0, 0.0)])
    lat = op_latencies(ops, points, net, 1)
    row = points.iloc[0]
    # On chip: the array time alone, and no launch: it is not the first step. 32 x 16 x 32 CTA tiles of 256 x 128
    # in ceil(16384 / 108) = 152 waves, each 8 x 4 passes of the 32x32 array over k = 128 plus 128 steps of fill
    # (no matmul kernel of its own: no matmul_fixed_s either).
    compute_s = 152 * 8 * 4 * (128 + 128) / (1.41e9 * row.matmul_efficiency)
    assert lat.parallel_s[0, 0] == pytest.approx(compute_s, rel=1e-12)
    # The same GEMM as its own kernel writes its 1 GiB output to HBM and pays a launch.
    out_bytes = 32 * 4096 * 4096 * 2
    assert lat.parallel_s[1, 0] >= out_bytes / (row.hbm_gbps * 1e9 * row.memory_efficiency) + row.op_overhead_s


def test_one_launch_per_fused_kernel(a100):
    points, net = a100
    first, later = _step(True, 3e6, 0.0), _step(True, 0.0, 0.0)
    lat = op_latencies(pd.DataFrame([first, later]), points, net, 1)
    overhead = points.iloc[0].op_overhead_s
    assert overhead > 0
    compute = op_latencies(pd.DataFrame([later]), points.assign(op_overhead_s=0.0), net, 1).parallel_s[0, 0]
    assert lat.parallel_s[1, 0] == pytest.approx(compute, rel=1e-12)
    assert lat.parallel_s[0, 0] >= compute + overhead - 1e-15


def test_flash_layer_costs_less_than_eager(a100, workload_cache):
    from phaze.workload.extract import extract_workload

    points, net = a100
    totals = {}
    for attention in ("eager", "flash"):
        cfg = compose_config("model=llama2", f"model.attention={attention}")
        layer = extract_workload(cfg.model, 1, tp_widths=(8,), cache_dir=workload_cache).part(8, "layer")
        totals[attention] = sum(op_latencies(g.without_views().ops, points, net, 8).parallel_s.sum() for g in (layer.fwd, layer.bwd))
    assert totals["flash"] < totals["eager"]
    assert np.isfinite(totals["flash"])


def _softmax_step(bh: int, queries: int, keys: int) -> dict:
    """FlashAttention's online softmax over one kernel's scores: a middle step (no bytes, no launch)."""
    row = {c: 0 for c in OP_COLUMNS}
    scores = (bh, queries, keys)
    row.update(op_id=0, name="p", target="_softmax", kind="softmax", numel_out=bh * queries * keys, flops=0.0,
               bytes_read=0.0, bytes_written=0.0, elem_bytes=2, fused=True, in_shapes=(scores,), out_shape=scores)
    return row


def test_fused_softmax_exponentials_run_on_the_special_function_units():
    """A100, 16 heads x 16k x 16k scores (FlashAttention-2's benchmark, head width 128): 4 lane operations per score
    on 108 x 64 FP32 lanes against one exponential per score on 108 x 16 special-function units, in parallel."""
    cfg = compose_config("hw=a100", "cluster=dgx_a100")
    points, net = enumerate_space(cfg.hw), Network.from_cfg(cfg.cluster)
    scores = 16 * 16384 * 16384
    ops = pd.DataFrame([_softmax_step(16, 16384, 16384)])
    lanes_cycles = -(-scores // (108 * 64)) * 4  # 621,379 lane-steps of 4 operations: 2,485,516 cycles
    sfu_cycles = -(-scores // (108 * 16))  # 2,485,514 cycles: the two pipes are nearly balanced on the A100
    assert lanes_cycles == 2_485_516 and sfu_cycles == 2_485_514
    seconds = op_latencies(ops, points, net, 1).parallel_s[0, 0]
    assert seconds == pytest.approx(max(lanes_cycles, sfu_cycles) / 1.41e9, rel=1e-12)  # 1.763 ms
    # Without special-function units (PHAZE's vector core) the exponentials take the lanes' 11 cycles per element.
    phaze_core = op_latencies(ops, enumerate_space(compose_config("hw=a100", "hw.sfu_lanes=0").hw), net, 1).parallel_s[0, 0]
    assert phaze_core == pytest.approx(-(-scores // (108 * 64)) * 11 / 1.41e9, rel=1e-12)  # 4.848 ms


def test_flash_attention_forward_efficiency_point():
    """FlashAttention-2's forward on an A100 (batch 1, 16 heads of 128, 16k tokens, no mask; FLOPs 4 s^2 d heads =
    2.199 TFLOP) as the three steps of its kernel: S = Q K^T and O = P V in 256 x 128 tiles, each
    ceil(16 * 64 * 128 / 108) = 1214 waves of 8 x 4 array passes over k = 128 (S) plus 128 steps of fill, and
    k = 16384 (O, as 128 x 256 tiles: ceil(16 * 64 / 108) = 10 waves of 4 x 8 passes), at the tile efficiency 0.9154; the
    softmax on the special-function units (above); the kernel's launch: 13.56 ms, 162.1 TFLOP/s (132.1 with the
    exponentials on the lanes). experiments/results/flash_attention_check.md sets such points against the papers'."""
    from phaze.workload.attention import kernel_steps
    from phaze.workload.trace import kernel_step_rows

    cfg = compose_config("hw=a100", "cluster=dgx_a100", "hw.matmul_sustained_slowdown=1")
    points, net = enumerate_space(cfg.hw), Network.from_cfg(cfg.cluster)
    tensor_bytes = 16384 * 16 * 128 * 2
    frame = pd.DataFrame(kernel_step_rows("attention", kernel_steps(True, (1, 16384, 16, 128), False), 2,
                                          3 * tensor_bytes, tensor_bytes + 16384 * 16 * 4))
    frame["op_id"] = range(len(frame))
    seconds = op_latencies(frame[list(OP_COLUMNS)], points, net, 1).parallel_s[:, 0]
    clock_hz = 1.41e9 * 0.9154
    s_step = 1214 * 8 * 4 * (128 + 128) / clock_hz
    o_step = 10 * 4 * 8 * (16384 + 128) / clock_hz
    softmax = 2_485_516 / 1.41e9
    assert seconds == pytest.approx([s_step + 2.6e-6, softmax, o_step], rel=1e-9)
    flops = 4.0 * 16384**2 * 128 * 16
    assert flops / seconds.sum() / 1e12 == pytest.approx(162.1, abs=0.05)


def test_flash_attention_2_matmuls_run_at_the_mma_sync_rate_on_hopper():
    """On an H100 FlashAttention-2's matmuls (mma.sync) run at 2/3 of the rate wgmma reaches (FlashAttention-3 paper,
    section 2.2); on an A100, whose tensor cores mma.sync drives at their peak, at the same rate either way."""
    for hw, fraction in (("h100", 0.6667), ("a100", 1.0)):
        cfg = compose_config(f"hw={hw}", "cluster=dgx_h100")
        points, net = enumerate_space(cfg.hw), Network.from_cfg(cfg.cluster)
        pv = {**_step(True, 0.0, 0.0), "name": "o", "mm_k": 4096, "mm_n": 128}  # O = P V: compute-bound on both
        own, warp = {**pv, "warp_mma": False}, {**pv, "warp_mma": True}
        lat = op_latencies(pd.DataFrame([own, warp]), points, net, 1).parallel_s[:, 0]
        assert lat[1] == pytest.approx(lat[0] / fraction, rel=1e-12)


def test_the_framework_says_which_fused_matmuls_use_warp_level_mma(workload_cache):
    """train.attention_warp_mma (a run on FlashAttention-2's kernels) flags the fused kernel's matmuls, and only them;
    train=fsdp (PyTorch SDPA, which ran cuDNN's wgmma kernels on the project's H100) and train=megatron flag none."""
    from phaze.config import model_job
    from phaze.workload.extract import extract_workload
    from phaze.workload.warp_mma import with_warp_mma

    assert model_job(compose_config("model=llama2", "hw=h100", "cluster=dgx_h100", "train=fsdp",
                                    "train.attention_warp_mma=true")).workload.attention_warp_mma
    assert not model_job(compose_config("model=llama2", "hw=h100", "cluster=dgx_h100", "train=fsdp")).workload.attention_warp_mma
    assert not model_job(compose_config("model=llama2", "hw=h100", "cluster=dgx_h100", "train=megatron")).workload.attention_warp_mma
    cfg = compose_config("model=llama2", "model.attention=flash")
    workload = extract_workload(cfg.model, 1, tp_widths=(8,), cache_dir=workload_cache)
    flagged = with_warp_mma(workload, True).part(8, "layer")
    for graph, matmuls in ((flagged.fwd, 2), (flagged.bwd, 5)):  # S and O; S again, dV, dP, dQ, dK
        ops = graph.ops
        assert (ops.warp_mma == (ops.fused & (ops.kind == "matmul"))).all() and ops.warp_mma.sum() == matmuls
    assert with_warp_mma(workload, False) is workload


def test_a_fused_softmax_runs_at_its_kernels_sustained_clock():
    """A fused attention kernel runs its softmax steps beside its matmul steps at one clock: on an H100 whose GEMMs
    run 1.18 times as long back to back (hw.matmul_sustained_slowdown), FlashAttention-2's forward (batch 1, 16 heads
    of 128, 16k tokens) takes 1.18 times as long in its softmax step as alone, as its compute-bound matmul steps do:
    its exponentials on the special-function units (16 * 16384^2 = 4.295e9 scores over 132 SMs x 16 units: 2,033,602
    cycles at 1.83 GHz, 1.111 ms alone); an unfused softmax, a memory-bound kernel of its own, keeps its time."""
    from phaze.workload.attention import kernel_steps
    from phaze.workload.trace import kernel_step_rows

    tensor_bytes = 16384 * 16 * 128 * 2
    frame = pd.DataFrame(kernel_step_rows("attention", kernel_steps(True, (1, 16384, 16, 128), False), 2,
                                          3 * tensor_bytes, tensor_bytes + 16384 * 16 * 4))
    frame["op_id"] = range(len(frame))
    eager = {**frame.iloc[1].to_dict(), "op_id": len(frame), "fused": False, "bytes_read": 2.0 * 16 * 16384**2,
             "bytes_written": 2.0 * 16 * 16384**2}
    ops = pd.concat([frame, pd.DataFrame([eager])], ignore_index=True)[list(OP_COLUMNS)]
    seconds = {}
    for slowdown in (1.0, 1.18):
        cfg = compose_config("hw=h100", "cluster=dgx_h100", f"hw.matmul_sustained_slowdown={slowdown}")
        points, net = enumerate_space(cfg.hw), Network.from_cfg(cfg.cluster)
        seconds[slowdown] = op_latencies(ops, points, net, 1).parallel_s[:, 0]
    assert frame.target.iloc[1] == "_softmax" and seconds[1.0][1] == pytest.approx(2_033_602 / 1.83e9, rel=1e-9)
    assert seconds[1.18][1] == pytest.approx(1.18 * seconds[1.0][1], rel=1e-9)
    assert seconds[1.18][3] == seconds[1.0][3]  # 17.2 GB through HBM: memory-bound either way
