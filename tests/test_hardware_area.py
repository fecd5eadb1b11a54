"""Area and TDP models: monotone in every resource, hand-computed reference points, SRAM tables."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze.hardware import perf_per_tdp
from phaze.hardware.area import area_components_um2, table_um2
from phaze.hardware.space import AXES, TPUV4_LIKE, describe_points
from tests.conftest import compose_cfg

HW = {name: compose_cfg(f"hw/area={name}", f"hw/power={name2}").hw
      for name, name2 in (("phaze", "horowitz_45nm"), ("modern_7nm", "modern_7nm"), ("modern_5nm", "modern_5nm"))}

pow2 = st.integers(0, 12).map(lambda e: 2**e)
side = st.integers(1, 8).map(lambda e: 2**e)
points = st.fixed_dictionaries({
    "n_tc": pow2, "tc_rows": side, "tc_cols": side, "n_vc": pow2, "vc_width": side,
    "glb_mib": st.integers(1, 7).map(lambda e: 2**e), "hbm_gib": st.sampled_from([16, 32, 64, 80]),
})


def describe(hw, point: dict) -> pd.Series:
    return describe_points(hw, pd.DataFrame([point])).iloc[0]


@settings(max_examples=150, deadline=None)
@given(point=points, axis=st.sampled_from(AXES), model=st.sampled_from(sorted(HW)))
def test_area_and_tdp_are_monotone_in_every_resource(point, axis, model):
    hw = HW[model]
    bigger = dict(point, **{axis: point[axis] * 2})
    small, large = describe(hw, point), describe(hw, bigger)
    if axis == "hbm_gib":  # HBM adds area only through its PHYs, one per stack
        assert large["area_mm2"] >= small["area_mm2"]
    else:
        assert large["area_mm2"] > small["area_mm2"]
    assert large["tdp_w"] >= small["tdp_w"]


def test_tpuv4_like_area_by_hand():
    hw = HW["phaze"]
    tc = 8 * (128 * 128 * 760.041386 + 446565)  # 256 KiB per-core buffer
    vc = 2 * (128 * 759.824 + 8248.43)  # 2 KiB per-core buffer
    glb = 175423000  # 128 MiB
    assert describe(hw, TPUV4_LIKE)["area_mm2"] == pytest.approx((tc + vc + glb) / 1e6, rel=1e-12)


def test_modern_area_uses_densities_and_hbm_phys():
    hw = HW["modern_7nm"]
    a = hw.area
    point = dict(TPUV4_LIKE, hbm_gib=80)  # 5 stacks of 16 GiB
    parts = area_components_um2(
        a, n_tc=8, tc_rows=128, tc_cols=128, n_vc=2, vc_width=128, tc_buffer_kib=256, vc_buffer_kib=2,
        glb_mib=128, hbm_stacks=5, hbm_phy_um2_per_stack=a.hbm_phy_um2_per_stack,
    )
    assert parts["glb"] == pytest.approx(128 * 1024 * 2482.4)
    assert parts["tc_buffers"] == pytest.approx(8 * 256 * 2482.4)
    assert parts["tc_macs"] == pytest.approx(8 * 128 * 128 * 210.7 / 0.7)  # cell area over 70% utilization
    assert parts["vc_control"] == pytest.approx(2 * 1.5356e6 / 0.7)
    assert parts["hbm_phy"] == pytest.approx(5 * 10.45e6)
    assert parts["hbm_controller"] == pytest.approx(5 * 5.7398e6 / 0.7)
    assert parts["noc"] == pytest.approx(10 * 3940.0 / 0.7)
    assert parts["io_phy"] == 0.0
    assert describe(hw, point)["area_mm2"] == pytest.approx(sum(parts.values()) / 1e6, rel=1e-12)


def test_sram_table_interpolates_and_extrapolates_linearly():
    assert table_um2(3, [2, 4, 8], [10, 20, 60]) == 15
    assert table_um2(16, [2, 4, 8], [10, 20, 60]) == 140  # last slope: 10 per unit
    assert table_um2(1, [2, 4, 8], [10, 20, 60]) == 5
    with pytest.raises(ValueError):
        table_um2(3, [4, 2], [1, 2])


def test_tdp_by_hand_for_the_tpuv4_like_grid_point():
    hw = HW["phaze"]
    row = describe(hw, TPUV4_LIKE)
    f = 1.05e9
    expected = (
        1.5e-12 * 8 * 128 * 128 * f  # MACs at 1.5 pJ
        + 1.5e-12 * 2 * 128 * f  # vector lanes at 1.5 pJ
        + 12.5e-12 * 537.6e9  # GLB bytes at peak
        + 31.2e-12 * 268.8e9  # HBM bytes at peak
        + 0.1 * row["area_mm2"]  # leakage
    )
    assert row["tdp_w"] == pytest.approx(expected, rel=1e-12)


def test_perf_per_tdp():
    assert perf_per_tdp(300.0, 150.0) == 2.0
    with pytest.raises(ValueError):
        perf_per_tdp(1.0, 0.0)
