"""The design space: PHAZE's 29,360 valid points, budgets, presets, and the Accelerator value."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from phaze.hardware import Accelerator, area_budget_mm2, enumerate_space, reference_area_mm2
from phaze.hardware.space import TPUV4_LIKE, grid_axes
from tests.conftest import compose_cfg

# PHAZE's closed-form area (docs/phaze-reference.md §3.3), written out independently of phaze.hardware.
L2A = dict(zip([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
               [6133.98, 8248.43, 12610.5, 22139.9, 38583.0, 63338.4, 115579, 204764, 446565, 897890, 1634130]))
GLBA = dict(zip([2, 4, 8, 16, 32, 64, 128], [3338220, 6078640, 11952400, 23745200, 46750900, 88605700, 175423000]))
PHAZE_BUDGET_UM2 = 278_826_676.31  # PHAZE's cores.json / get_area_constraint
PHAZE_FIT_MAX_ERR_UM2 = 38.5  # the closed form's maximum error over cores.json


def phaze_area_um2(n_tc, n_vc, w, d, glb):
    return n_tc * (w * d * 760.041386 + L2A[max(1, w * d // 64)]) + n_vc * (w * 759.824 + L2A[max(1, w // 64)]) + GLBA[glb]


def brute_force_valid(n_tcs, widths, depths, n_vcs, glbs, budget_um2, min_fraction):
    """PHAZE's check_if_acc_to_explore over every tuple, in plain Python; (n_tc, rows, cols, n_vc, glb) tuples."""
    keep = set()
    for n_tc, n_vc, w, d, glb in itertools.product(n_tcs, n_vcs, widths, depths, glbs):
        a = phaze_area_um2(n_tc, n_vc, w, d, glb)
        factor = 0.0 if (n_tc == 1 or n_vc == 1) else min_fraction
        if factor * budget_um2 <= a <= budget_um2:
            keep.add((n_tc, d, w, n_vc, glb))  # rows = depth, cols = width (the vector width is tied to it)
    return keep


@pytest.fixture(scope="module")
def grid_cfg():
    return compose_cfg().hw


@pytest.fixture(scope="module")
def grid(grid_cfg):
    return enumerate_space(grid_cfg)


def test_phaze_grid_has_75712_tuples_per_hbm_option(grid_cfg):
    axes = grid_axes(grid_cfg)
    assert len(axes) == 75_712 * 3
    assert (axes["vc_width"] == axes["tc_cols"]).all()


def test_phaze_grid_keeps_exactly_phaze_29360_points(grid):
    assert len(grid) == 29_360 * 3
    for hbm, group in grid.groupby("hbm_gib"):
        assert len(group) == 29_360, hbm
        assert int(((group["n_tc"] == 1) | (group["n_vc"] == 1)).sum()) == 9_308


def test_phaze_grid_equals_brute_force_closed_form(grid):
    p2 = [2**i for i in range(13)]
    sides = [2**i for i in range(1, 9)]
    expected = brute_force_valid(p2, sides, sides, p2, [2**i for i in range(1, 8)], phaze_area_um2(8, 2, 128, 128, 128), 0.3)
    got = grid[grid["hbm_gib"] == 32]
    assert set(map(tuple, got[["n_tc", "tc_rows", "tc_cols", "n_vc", "glb_mib"]].to_numpy().tolist())) == expected


def test_budget_is_the_tpuv4_like_area(grid_cfg, grid):
    budget = area_budget_mm2(grid_cfg)
    assert budget == reference_area_mm2(grid_cfg)
    assert abs(budget * 1e6 - PHAZE_BUDGET_UM2) < PHAZE_FIT_MAX_ERR_UM2
    assert grid["area_mm2"].max() <= budget
    multi = grid[(grid["n_tc"] > 1) & (grid["n_vc"] > 1)]
    assert multi["area_mm2"].min() >= 0.3 * budget
    single = grid[(grid["n_tc"] == 1) | (grid["n_vc"] == 1)]
    assert single["area_mm2"].min() < 0.3 * budget  # the exemption is used


def test_tpuv4_preset_area_equals_the_budget_exactly(grid_cfg, grid):
    tpu = enumerate_space(compose_cfg("hw=tpuv4").hw)
    assert len(tpu) == 1
    assert tpu["area_mm2"].iloc[0] == area_budget_mm2(grid_cfg)
    match = grid
    for axis, value in TPUV4_LIKE.items():
        match = match[match[axis] == value]
    assert len(match) == 1 and match["area_mm2"].iloc[0] == area_budget_mm2(grid_cfg)


def test_explicit_area_budget_bounds_the_space():
    space = enumerate_space(compose_cfg("hw.area_budget_mm2=100").hw)
    assert space["area_mm2"].max() <= 100
    multi = space[(space["n_tc"] > 1) & (space["n_vc"] > 1)]
    assert multi["area_mm2"].min() >= 30
    assert 0 < len(space) < 29_360 * 3


def test_power_budget_filters_like_the_area_budget(grid):
    budget_w = float(np.median(grid["tdp_w"]))
    space = enumerate_space(compose_cfg(f"hw.power_budget_w={budget_w}").hw)
    expected = grid[grid["tdp_w"] <= budget_w].reset_index(drop=True)
    assert 0 < len(space) < len(grid)
    pd.testing.assert_frame_equal(space, expected)


def test_tiny_grid_is_a_few_dozen_points_and_matches_brute_force():
    hw = compose_cfg("hw=tiny_grid").hw
    space = enumerate_space(hw)
    assert 20 <= len(space) <= 100
    expected = brute_force_valid([1, 2, 4], [8, 16], [8, 16], [1, 2], [2, 4], 6.5e6, 0.6)
    for _, group in space.groupby("hbm_gib"):
        assert set(map(tuple, group[["n_tc", "tc_rows", "tc_cols", "n_vc", "glb_mib"]].to_numpy().tolist())) == expected


@pytest.mark.parametrize(
    "preset, peak_flops, hbm_gbps",
    [("tpuv4", 275e12, 1200.0), ("a100", 312e12, 2039.0), ("h100", 989.4e12, 3350.0)],
)
def test_presets_reproduce_published_peaks(preset, peak_flops, hbm_gbps):
    point = enumerate_space(compose_cfg(f"hw={preset}").hw)
    assert len(point) == 1
    acc = Accelerator.from_row(point.iloc[0])
    assert acc.peak_matmul_flops == pytest.approx(peak_flops, rel=1e-3)
    assert acc.hbm_bytes_s == hbm_gbps * 1e9
    assert acc.area_mm2 > 0 and acc.tdp_w > 0


def test_a_point_preset_with_two_values_on_an_axis_is_rejected():
    with pytest.raises(ValueError, match="exactly one value"):
        enumerate_space(compose_cfg("hw=a100", "hw.n_tc=[64,128]").hw)


def test_accelerator_round_trips_and_is_frozen(grid):
    row = grid.iloc[1234]
    acc = Accelerator.from_row(row)
    assert Accelerator(**acc.to_dict()) == acc
    assert acc.n_tc == row["n_tc"] and isinstance(acc.n_tc, int)
    assert acc.peak_matmul_flops == row["peak_matmul_flops"]
    assert acc.peak_vector_flops == row["peak_vector_flops"]
    assert acc.peak_matmul_flops == 2 * acc.n_tc * acc.tc_rows * acc.tc_cols * acc.freq_ghz * 1e9
    with pytest.raises(dataclasses.FrozenInstanceError):
        acc.n_tc = 2
    with pytest.raises(KeyError):
        Accelerator.from_row({k: v for k, v in acc.to_dict().items() if k != "tdp_w"})
