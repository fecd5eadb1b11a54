"""GPU matmuls from CTA tiles: the presets reproduce the measured maximum achievable matmul FLOPS (MAMF) at
its shape, tiles are dealt to the SMs in waves, and large GEMMs match OpenXLA's H100 measurements."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from phaze.cost import Network, op_latencies
from phaze.hardware import enumerate_space
from phaze.hardware.derating import KERNEL_ALONE
from tests.conftest import compose_cfg
from tests.cost_cases import matmul_op, ops_frame

NET = Network(devices=8, node_size=8, intra_bytes_s=1e11, inter_bytes_s=1e11)
XLA_H100 = Path(__file__).resolve().parents[1] / "experiments" / "data" / "xla_h100_bf16_matmul.csv"
H100_SUSTAINED = XLA_H100.parent / "h100_sustained.csv"

MAMF = {
    "a100": ((1024, 10240, 5120), 271.2e12),
    "h100": ((2048, 2048, 13312), 794.5e12),
}
"""Bekman, "Machine Learning Engineering", compute/accelerator/README.md, MAMF table v2: the best bf16 rate
measured by the MAMF finder and the (m, n, k) it was found at, A100 SXM and H100 SXM."""


def gemm_s(preset: str, b: int, m: int, n: int, k: int, *overrides: str) -> float:
    points = enumerate_space(compose_cfg(f"hw={preset}", KERNEL_ALONE, *overrides).hw)
    return float(op_latencies(ops_frame([matmul_op(b, m, k, n)]), points, NET, tp=1).parallel_s[0, 0])


@pytest.mark.parametrize("preset", sorted(MAMF))
def test_preset_reproduces_the_measured_mamf_at_its_shape(preset):
    (m, n, k), flops_s = MAMF[preset]
    assert 2 * m * n * k / gemm_s(preset, 1, m, n, k) == pytest.approx(flops_s, rel=1e-3)


def test_one_tile_more_than_the_sms_costs_a_second_wave():
    # H100: 132 SMs, 256 x 128 tiles, 32x64 arrays: 12 x 11 = 132 tiles fill one wave; one more column of
    # output makes 12 x 12 = 144 tiles, two waves. Each tile: 8 x 2 passes over k = 4096 plus 128 steps.
    off = ("hw.matmul_efficiency=1.0", "hw.op_overhead_s=0", "hw.matmul_fixed_s=0", "hw.hbm_gbps=1e9", "hw.memory_efficiency=1.0")
    clock_hz = compose_cfg("hw=h100").hw.freq_ghz * 1e9
    one_wave = gemm_s("h100", 1, 3072, 1408, 4096, *off)
    assert one_wave == pytest.approx(8 * 2 * (4096 + 128) / clock_hz, rel=1e-12)
    assert gemm_s("h100", 1, 3072, 1409, 4096, *off) == pytest.approx(2 * one_wave, rel=1e-12)


def test_fewer_tiles_than_sms_split_the_reduction():
    # 4 tiles on 132 SMs: 33 SMs per tile each stream ceil(4096 / 33) = 125 steps of k
    off = ("hw.matmul_efficiency=1.0", "hw.op_overhead_s=0", "hw.matmul_fixed_s=0", "hw.hbm_gbps=1e9", "hw.memory_efficiency=1.0")
    clock_hz = compose_cfg("hw=h100").hw.freq_ghz * 1e9
    assert gemm_s("h100", 1, 512, 256, 4096, *off) == pytest.approx(8 * 2 * (125 + 128) / clock_hz, rel=1e-12)


def test_large_gemms_match_openxla_h100_measurements():
    table = pd.read_csv(XLA_H100)
    points = enumerate_space(compose_cfg("hw=h100", KERNEL_ALONE).hw)
    ops = ops_frame([matmul_op(int(r.b), int(r.m), int(r.k), int(r.n)) for r in table.itertuples()])
    flops = 2.0 * table.b * table.m * table.n * table.k
    predicted = flops / op_latencies(ops, points, NET, tp=1).parallel_s[:, 0]
    ratio = (predicted / table.measured_flops_s)[flops >= 30e9]
    assert len(ratio) >= 50
    assert np.median(ratio) == pytest.approx(1.0, abs=0.05)
    assert ratio.max() < 1.15


def test_gemms_back_to_back_step_at_the_power_limited_rate():
    # hw=h100 takes matmul_sustained_slowdown = 1.18 (the median of four GEMMs timed back to back against alone):
    # a compute-bound GEMM's array steps take 1.18 times as long; its launch and fixed time do not, and a GEMM
    # bound by HBM (a matrix-vector product) keeps its time.
    hw = compose_cfg("hw=h100").hw
    runs = pd.read_csv(H100_SUSTAINED)
    assert round(float(np.median(runs.sustained_s / runs.single_s)), 2) == hw.matmul_sustained_slowdown == 1.18
    fixed_s = hw.op_overhead_s + hw.matmul_fixed_s
    (m, n, k), _ = MAMF["h100"]
    alone, sustained = gemm_s("h100", 1, m, n, k), gemm_s("h100", 1, m, n, k, "hw.matmul_sustained_slowdown=1.18")
    assert sustained - fixed_s == pytest.approx(1.18 * (alone - fixed_s), rel=1e-12)
    assert gemm_s("h100", 1, 8192, 1, 8192, "hw.matmul_sustained_slowdown=1.18") == pytest.approx(gemm_s("h100", 1, 8192, 1, 8192), rel=1e-12)
