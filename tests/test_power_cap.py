"""The sustained clock under a board power limit (hw.power_limit_w): of the board's power, all but the part that does
not follow the SM clock goes as the clock cubed, so a limit sets the clock, from the slowdown measured at another."""

from __future__ import annotations

import pytest

from phaze.cost import Network, op_latencies
from phaze.hardware import enumerate_space
from phaze.hardware.derating import SUSTAINED_COLUMN, capped_slowdown
from tests.conftest import compose_cfg
from tests.cost_cases import matmul_op, ops_frame

NET = Network(devices=8, node_size=8, intra_bytes_s=1e11, inter_bytes_s=1e11)
H100_TENSOR_CLOCK_GHZ = 1.83
"""conf/hw/h100.yaml's freq_ghz: 989.4 TFLOP/s dense bf16 over 132 SMs x 2048 FMA x 2."""


def sustained(*overrides: str) -> float:
    """The H100 point's tensor-core slowdown in a training step under these overrides."""
    return float(enumerate_space(compose_cfg("hw=h100", *overrides).hw)[SUSTAINED_COLUMN].iloc[0])


def test_sustained_clock_at_two_caps():
    """Measured: 1.18 at 700 W (the tensor clock 1.83 / 1.18 = 1.551 GHz in a step), 74.6 W not following the clock.
    At 500 W the power that follows it is 425.4 W of the 625.4 W at 700 W: the clock (425.4 / 625.4)^(1/3) = 0.8795 of
    the 700 W one, 1.364 GHz, the slowdown 1.18 / 0.8795 = 1.3417."""
    assert sustained() == 1.18 and sustained("hw.power_limit_w=700") == pytest.approx(1.18, rel=1e-12)
    at_500 = sustained("hw.power_limit_w=500")
    assert at_500 == pytest.approx(1.18 * (625.4 / 425.4) ** (1 / 3), rel=1e-12) == pytest.approx(1.3417, abs=1e-4)
    assert H100_TENSOR_CLOCK_GHZ / at_500 == pytest.approx(1.3639, abs=1e-4)
    assert H100_TENSOR_CLOCK_GHZ / sustained() == pytest.approx(1.5508, abs=1e-4)
    # above the measured limit the clock rises, never past one kernel alone: 1000 W 1.0355, 2000 W 1
    assert sustained("hw.power_limit_w=1000") == pytest.approx(1.0355, abs=1e-4)
    assert sustained("hw.power_limit_w=2000") == 1.0
    # the H200 is the H100's die: the same limit gives the same clock
    assert float(enumerate_space(compose_cfg("hw=h200", "hw.power_limit_w=500").hw)[SUSTAINED_COLUMN].iloc[0]) == at_500


def test_a_compute_bound_gemm_slows_with_the_clock_and_a_memory_bound_one_does_not():
    """An 8192^3 bf16 GEMM's array steps slow by 1.3417 / 1.18 = 1.137 at 500 W (its fixed times do not: a little
    less overall); a matrix-vector product streams its weights from HBM, off the SM clock, and keeps its time."""
    def gemm_s(m: int, n: int, k: int, *overrides: str) -> float:
        points = enumerate_space(compose_cfg("hw=h100", *overrides).hw)
        return float(op_latencies(ops_frame([matmul_op(1, m, k, n)]), points, NET, tp=1).parallel_s[0, 0])

    ratio = gemm_s(8192, 8192, 8192, "hw.power_limit_w=500") / gemm_s(8192, 8192, 8192)
    assert 1.13 < ratio <= (625.4 / 425.4) ** (1 / 3) + 1e-12
    assert gemm_s(8192, 1, 8192, "hw.power_limit_w=500") == pytest.approx(gemm_s(8192, 1, 8192), rel=1e-12)


def test_capped_slowdown_without_a_limit_or_a_measurement_is_the_measured_one():
    assert capped_slowdown(1.18, 700.0, None, 74.6) == 1.18
    assert capped_slowdown(1.0, None, None, 0.0) == 1.0
