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
