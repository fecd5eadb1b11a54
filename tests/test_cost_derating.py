"""Derating in the cost model: achievable matmul and memory rates, and a fixed time per compute operator."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze.cost import Network, op_latencies, roofline_s
from phaze.cost.reference import op_latency
from phaze.hardware import Accelerator, enumerate_space
from tests.conftest import compose_cfg
from tests.cost_cases import allreduce_op, chip_frame, matmul_op, ops_frame, vector_op, view_op

NET = Network(devices=1024, node_size=1024, intra_bytes_s=4e9, inter_bytes_s=4e9)
IDEAL = {"matmul_efficiency": 1.0, "memory_efficiency": 1.0, "op_overhead_s": 0.0}


def derated(points: pd.DataFrame, **values) -> pd.DataFrame:
    """A copy of `points` with derating columns replaced (a scalar or one value per point)."""
    out = points.copy()
    for name, value in values.items():
        out[name] = value
    return out


def latency(op, points) -> tuple[float, float]:
    out = op_latencies(ops_frame([op]), points, NET, tp=1)
    return float(out.single_s[0, 0]), float(out.parallel_s[0, 0])


@pytest.fixture(scope="module")
def a100() -> pd.DataFrame:
    return enumerate_space(compose_cfg("hw=a100").hw)


def test_4096_cubed_matmul_on_a100_by_hand(a100):
    # 256 x 128 CTA tiles: 16 x 32 = 512 tiles over 108 SMs = ceil(512 / 108) = 5 waves; each tile is
    # 8 x 4 passes of the 32x32 array over the 4096-deep reduction plus 128 steps of fill and epilogue;
    # compute-bound (HBM and L2 traffic take < 40% of it); 91.54% of the clock; plus the matmul kernel's
    # 3 us and the 2.6 us launch.
    op = matmul_op(1, 4096, 4096, 4096)
    _, parallel = latency(op, a100)
    assert parallel == pytest.approx(5 * 8 * 4 * (4096 + 128) / (1.41e9 * 0.9154) + 3e-6 + 2.6e-6, rel=1e-12)
    # The last wave holds 512 - 4 x 108 = 80 tiles: 512 / 540 of the SMs' tile slots are busy.
    peak = 2 * 108 * 32 * 32 * 1.41e9
    assert parallel == pytest.approx(2 * 4096**3 / (peak * 0.9154 * 512 / 540 * 4096 / 4224) + 5.6e-6, rel=1e-12)


def test_large_elementwise_op_on_a100_by_hand(a100):
    # 2^28 bf16 adds: 3 x 2 bytes per element through HBM at 84.59% of 2039 GB/s, plus 2.6 us.
    n = 2**28
    _, parallel = latency(vector_op(n, target="add", n_inputs=2), a100)
    assert parallel == pytest.approx(3 * 2 * n / (2039e9 * 0.8459) + 2.6e-6, rel=1e-12)


@pytest.mark.parametrize("preset", ["a100", "h100"])
def test_gpu_presets_approach_their_efficiencies_on_large_ops(preset):
    # Large ops reach the steady-state rates less what the tiles add (waves, fill) and the launch: a few percent.
    # The matmul's steady state is a training step's: matmul_efficiency over the power-limited slowdown (H100: 1.18).
    point = enumerate_space(compose_cfg(f"hw={preset}").hw)
    acc = Accelerator.from_row(point.iloc[0])
    mm, add = matmul_op(1, 8192, 8192, 8192), vector_op(2**28, target="add", n_inputs=2)
    out = op_latencies(ops_frame([mm, add]), point, NET, tp=1).parallel_s[:, 0]
    flops_fraction = mm["flops"] / out[0] / acc.peak_matmul_flops
    hbm_fraction = (add["bytes_read"] + add["bytes_written"]) / out[1] / acc.hbm_bytes_s
    steady = acc.achievable_matmul_flops / acc.peak_matmul_flops
    assert steady == pytest.approx(acc.matmul_efficiency / {"a100": 1.0, "h100": 1.18}[preset], rel=1e-12)
    assert 0.95 * steady <= flops_fraction <= steady
    assert 0.99 * acc.memory_efficiency <= hbm_fraction <= acc.memory_efficiency


def test_ideal_derating_reproduces_the_ideal_model_exactly():
    points = chip_frame(hbm_gbps=100.0)
    assert points[list(IDEAL)].iloc[0].to_dict() == IDEAL
    n = 2**24
    # Compute-bound matmul (ample bandwidth), bandwidth-bound matmul and vector op: the closed forms, bit for bit.
    assert latency(matmul_op(1, 4096, 4096, 4096), chip_frame())[0] == 2 * 4096**3 / (2 * 128**2 * 1e9)
    assert latency(matmul_op(1, 4096, 4096, 4096), chip_frame(hbm_gbps=10.0))[0] == 3 * 4096**2 * 2 / 10e9
    assert latency(vector_op(n), points) == (2 * 2 * n / 100e9, 2 * 2 * n / 100e9)


def test_a100_with_derating_switched_off_predicts_the_ideal_tiling():
    off = ("hw.matmul_efficiency=1.0", "hw.memory_efficiency=1.0", "hw.op_overhead_s=0", "hw.matmul_fixed_s=0")
    tiled = enumerate_space(compose_cfg("hw=a100", *off).hw)
    assert latency(matmul_op(1, 4096, 4096, 4096), tiled)[1] == 5 * 8 * 4 * (4096 + 128) / (1.41 * 1e9)
    # without CTA tiles, PHAZE's array mapping: 128 x 128 output blocks of the 32x32 arrays over 108 SMs = 152 rounds
    ideal = enumerate_space(compose_cfg("hw=a100", *off, "hw.matmul_tile_rows=0", "hw.matmul_tile_cols=0", "hw.matmul_tile_fill_k=0").hw)
    assert latency(matmul_op(1, 4096, 4096, 4096), ideal)[1] == 152 * 4096 / (1.41 * 1e9)


def test_each_efficiency_slows_only_its_own_bounds():
    compute_mm = matmul_op(1, 4096, 4096, 4096)  # ample bandwidth: compute-bound
    lanes_op = vector_op(2**20)  # ample bandwidth: lane-bound
    base = chip_frame()
    slow_tc, slow_mem = derated(base, matmul_efficiency=0.5), derated(base, memory_efficiency=0.5)
    assert latency(compute_mm, slow_tc)[0] == pytest.approx(2 * latency(compute_mm, base)[0], rel=1e-12)
    assert latency(compute_mm, slow_mem) == latency(compute_mm, base)
    assert latency(lanes_op, slow_tc) == latency(lanes_op, slow_mem) == latency(lanes_op, base)
    # Bandwidth-bound: HBM, then the per-core port and the shared buffer.
    for chip in (dict(hbm_gbps=10.0), dict(n_tc=8, core_bytes_per_cycle=64), dict(n_tc=8, core_bytes_per_cycle=64, glb_gbps=100.0)):
        fast = chip_frame(**chip)
        for op in (compute_mm, vector_op(2**24)):
            assert latency(op, derated(fast, memory_efficiency=0.25)) == pytest.approx(
                tuple(4 * t for t in latency(op, fast)), rel=1e-12)
            assert latency(op, derated(fast, matmul_efficiency=0.9)) == latency(op, fast)


def test_overhead_is_added_to_compute_ops_but_not_to_views_or_collectives():
    ops = ops_frame([matmul_op(1, 4096, 4096, 4096), vector_op(2**24), allreduce_op(2**26), view_op(1000)])
    base = chip_frame(hbm_gbps=100.0)
    ideal = op_latencies(ops, base, NET, tp=8)
    slow = op_latencies(ops, derated(base, op_overhead_s=5e-6), NET, tp=8)
    assert slow.single_s[0, 0] == pytest.approx(2 * 4096**3 / (2 * 128**2 * 1e9) + 5e-6, rel=1e-12)
    assert slow.single_s[1, 0] == slow.parallel_s[1, 0] == pytest.approx(2 * 2 * 2**24 / 100e9 + 5e-6, rel=1e-12)
    assert (slow.single_s[:2] - ideal.single_s[:2]).ravel() == pytest.approx([5e-6, 5e-6], rel=1e-9)
    assert (slow.parallel_s[:2] - ideal.parallel_s[:2]).ravel() == pytest.approx([5e-6, 5e-6], rel=1e-9)
    assert slow.single_s[2, 0] == slow.parallel_s[2, 0] == pytest.approx(2 * 7 / 8 * 2**26 / 4e9, rel=1e-12)
    assert slow.single_s[3, 0] == slow.parallel_s[3, 0] == 0.0


def test_points_differing_only_in_derating_are_costed_apart():
    base = chip_frame(hbm_gbps=100.0)
    values = {"matmul_efficiency": [1.0, 0.5, 1.0, 1.0], "memory_efficiency": [1.0, 1.0, 0.5, 1.0], "op_overhead_s": [0.0, 0.0, 0.0, 1e-6]}
    grid = derated(base.loc[[0, 0, 0, 0]].reset_index(drop=True), **values)
    ops = ops_frame([matmul_op(1, 4096, 4096, 4096), vector_op(2**24)])
    together = op_latencies(ops, grid, NET, tp=1)
    for j in range(len(grid)):
        alone = op_latencies(ops, grid.loc[[j]], NET, tp=1)
        assert np.array_equal(together.single_s[:, [j]], alone.single_s)
        assert np.array_equal(together.parallel_s[:, [j]], alone.parallel_s)
    assert len({tuple(together.parallel_s[:, j]) for j in range(len(grid))}) == 4


@pytest.mark.parametrize("name, value, message", [
    ("matmul_efficiency", 0.0, "points column matmul_efficiency must be in (0, 1]"),
    ("memory_efficiency", 1.5, "points column memory_efficiency must be in (0, 1]"),
    ("op_overhead_s", -1e-6, "points column op_overhead_s must be a finite number of seconds >= 0"),
])
def test_a_points_frame_with_bad_derating_is_rejected(name, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        op_latencies(ops_frame([vector_op(10)]), derated(chip_frame(), **{name: value}), NET, tp=1)


@pytest.fixture(scope="module")
def spread() -> pd.DataFrame:
    """12 PHAZE grid points, the tiny grid's first 12 and the three presets."""
    grid = enumerate_space(compose_cfg().hw).sample(12, random_state=1)
    tiny = enumerate_space(compose_cfg("hw=tiny_grid").hw).head(12)
    presets = [enumerate_space(compose_cfg(f"hw={name}").hw) for name in ("tpuv4", "a100", "h100")]
    return pd.concat([grid, tiny, *presets], ignore_index=True)


dim = st.integers(1, 5000)
matmuls = st.builds(matmul_op, st.integers(1, 64), dim, dim, dim, st.sampled_from([2, 4]))
vectors = st.builds(
    vector_op, st.integers(1, 10**8), st.sampled_from(["add", "div", "silu", "_softmax"]),
    st.sampled_from(["elementwise", "softmax", "reduction"]), st.sampled_from([2, 4]), st.none() | st.integers(1, 10**8),
)
compute_ops = st.lists(st.one_of(matmuls, vectors), min_size=1, max_size=6)
efficiency = st.floats(min_value=0.01, max_value=1.0)
overhead = st.floats(min_value=0.0, max_value=1e-4)


@settings(max_examples=60, deadline=None)
@given(rows=compute_ops, data=st.data())
def test_derated_latency_lies_between_the_ideal_and_the_ideal_over_the_smallest_efficiency(spread, rows, data):
    n = len(spread)
    mm = np.array(data.draw(st.lists(efficiency, min_size=n, max_size=n)))
    mem = np.array(data.draw(st.lists(efficiency, min_size=n, max_size=n)))
    ovh = np.array(data.draw(st.lists(overhead, min_size=n, max_size=n)))
    ops = ops_frame(rows)
    ideal = op_latencies(ops, derated(spread, **IDEAL), NET, tp=1)
    real = op_latencies(ops, derated(spread, matmul_efficiency=mm, memory_efficiency=mem, op_overhead_s=ovh), NET, tp=1)
    bound = roofline_s(ops, spread)
    assert (real.parallel_s >= bound * (1 - 1e-12)).all()  # never faster than the ideal roofline
    assert (real.single_s >= real.parallel_s * (1 - 1e-12)).all()
    slowest = 1.0 / np.minimum(mm, mem)
    for got, want in ((real.single_s, ideal.single_s), (real.parallel_s, ideal.parallel_s)):
        assert (got >= (want + ovh[None, :]) * (1 - 1e-12)).all()
        assert (got <= (want * slowest[None, :] + ovh[None, :]) * (1 + 1e-12)).all()


@settings(max_examples=30, deadline=None)
@given(rows=compute_ops, mm=efficiency, mem=efficiency, ovh=overhead, slow=st.floats(1.0, 2.0))
def test_vectorised_derating_equals_the_plain_python_reference(spread, rows, mm, mem, ovh, slow):
    points = derated(spread, matmul_efficiency=mm, memory_efficiency=mem, op_overhead_s=ovh, matmul_sustained_slowdown=slow)
    out = op_latencies(ops_frame(rows), points, NET, tp=1)
    for j in range(len(points)):
        acc = Accelerator.from_row(points.iloc[j])
        for i, op in enumerate(rows):
            _, single, parallel = op_latency(op, acc, NET, 1)
            assert out.single_s[i, j] == pytest.approx(single, rel=1e-12, abs=0)
            assert out.parallel_s[i, j] == pytest.approx(parallel, rel=1e-12, abs=0)
