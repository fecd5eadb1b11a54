"""Derating fields of the hardware config: defaults, preset values against their sources, validation."""

from __future__ import annotations

import re

import pytest

from phaze.hardware import Accelerator, enumerate_space
from phaze.hardware.derating import DERATING_COLUMNS
from phaze.schema import HwCfg
from tests.conftest import compose_cfg

IDEAL = {"matmul_efficiency": 1.0, "memory_efficiency": 1.0, "op_overhead_s": 0.0, "matmul_fixed_s": 0.0,
         "matmul_tile_rows": 0, "matmul_tile_cols": 0, "matmul_tile_fill_k": 0, "fp8_matmul_ratio": 0.0, "matmul_sustained_slowdown": 1.0,
         "fp8_matmul_efficiency": 1.0, "sfu_lanes": 0, "mma_sync_fraction": 1.0}
"""PHAZE's accelerators: the ideal roofline, no FP8 (their tensor cores compute in 16 bits), no power-limited clock, no
special-function units (their vector lanes evaluate exponentials)."""


def preset(name: str) -> Accelerator:
    return Accelerator.from_row(enumerate_space(compose_cfg(f"hw={name}").hw).iloc[0])


def test_schema_defaults_are_the_ideal_roofline():
    cfg = HwCfg()
    assert {name: getattr(cfg, name) for name in DERATING_COLUMNS} == IDEAL


@pytest.mark.parametrize("name", ["phaze_grid", "tiny_grid", "tpuv4"])
def test_phaze_accelerators_stay_ideal(name):
    space = enumerate_space(compose_cfg(f"hw={name}").hw)
    for column, value in IDEAL.items():
        assert (space[column] == value).all(), column


@pytest.mark.parametrize("name, mamf_tflops, spec_tflops, stream_gbps, hbm_gbps", [
    ("a100", 271.2, 312.0, 1724.827, 2039.0),  # Bekman MAMF v2; BabelStream Triad on Tursa
    ("h100", 794.5, 989.0, 2903.0, 3350.0),  # Bekman MAMF v2; Voltage Park D2D copy
])
def test_gpu_presets_carry_their_measured_efficiencies(name, mamf_tflops, spec_tflops, stream_gbps, hbm_gbps):
    acc = preset(name)
    assert acc.memory_efficiency == round(stream_gbps / hbm_gbps, 4)
    assert acc.op_overhead_s == 2.6e-6
    assert acc.achievable_hbm_bytes_s == pytest.approx(stream_gbps * 1e9, rel=1e-4)
    # The tile's steady state is above the best whole matmul, which also pays waves, fill and the launch
    # (tests/test_cost_gpu_matmul.py: the preset reproduces the MAMF at its shape).
    assert (acc.matmul_tile_rows, acc.matmul_tile_cols, acc.matmul_tile_fill_k, acc.matmul_fixed_s) == (256, 128, 128, 3e-6)
    assert mamf_tflops / spec_tflops < acc.matmul_efficiency < 1.1 * mamf_tflops / spec_tflops
    assert acc.sfu_lanes == 16  # exponentials per clock per SM (CUDA C++ Programming Guide's throughput table)


def test_a100_keeps_issue_3_must_show_margins():
    acc = preset("a100")
    assert acc.matmul_efficiency >= 0.85
    assert acc.memory_efficiency >= 0.80


@pytest.mark.parametrize("hw", ["a100", "phaze_grid"])
@pytest.mark.parametrize("override, message", [
    ("matmul_efficiency=0", "hw.matmul_efficiency must be in (0, 1], got 0.0"),
    ("matmul_efficiency=1.2", "hw.matmul_efficiency must be in (0, 1], got 1.2"),
    ("memory_efficiency=-0.5", "hw.memory_efficiency must be in (0, 1], got -0.5"),
    ("memory_efficiency=nan", "hw.memory_efficiency must be in (0, 1], got nan"),
    ("fp8_matmul_efficiency=0", "hw.fp8_matmul_efficiency must be in (0, 1], got 0.0"),
    ("op_overhead_s=-1e-6", "hw.op_overhead_s must be a finite number of seconds >= 0, got -1e-06"),
    ("op_overhead_s=inf", "hw.op_overhead_s must be a finite number of seconds >= 0, got inf"),
    ("matmul_sustained_slowdown=0.5", "hw.matmul_sustained_slowdown must be a finite number >= 1 (1: no power-limited slowdown), got 0.5"),
    ("matmul_sustained_slowdown=inf", "hw.matmul_sustained_slowdown must be a finite number >= 1 (1: no power-limited slowdown), got inf"),
    ("mma_sync_fraction=0", "hw.mma_sync_fraction must be in (0, 1], got 0.0"),
    ("sfu_lanes=-1", "hw.sfu_lanes must be a whole number of results per clock >= 0 (0: no special-function units), got -1.0"),
])
def test_out_of_range_derating_is_rejected_naming_the_field(hw, override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        enumerate_space(compose_cfg(f"hw={hw}", f"hw.{override}").hw)


def test_boundary_values_are_accepted():
    space = enumerate_space(compose_cfg("hw=a100", "hw.matmul_efficiency=1.0", "hw.memory_efficiency=0.01", "hw.op_overhead_s=0",
                                        "hw.fp8_matmul_efficiency=1.0").hw)
    columns = ["matmul_efficiency", "memory_efficiency", "op_overhead_s", "fp8_matmul_efficiency"]
    assert set(columns) <= set(DERATING_COLUMNS)
    assert space[columns].iloc[0].tolist() == [1.0, 0.01, 0.0, 1.0]
