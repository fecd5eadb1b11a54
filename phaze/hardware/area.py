"""Chip area as a sum of per-component areas, vectorised over design points.

Components: MAC arrays (per PE, register file included), vector lanes, per-core SRAM, the global
buffer, one HBM PHY and memory controller per stack, a NoC stop per core, a programmable core's
control per vector core, and the off-chip SerDes and PCIe lanes. SRAM comes from a (size -> area)
table when the area config gives one (PHAZE's CACTI-derived tables), else from a density per KiB.
Logic (arrays, lanes, control, NoC, controllers) is cell area over `area.logic_utilization`.
"""

from __future__ import annotations

import numpy as np

from phaze.hardware.rates import KIB

UM2_PER_MM2 = 1e6


def table_um2(size, sizes, areas):
    """Area from a (size -> um^2) table: linear between entries, the end segments' slopes outside."""
    xs = np.asarray(sizes, dtype=float)
    ys = np.asarray(areas, dtype=float)
    if xs.size < 2 or xs.size != ys.size or np.any(np.diff(xs) <= 0):
        raise ValueError(f"an SRAM area table needs >= 2 increasing sizes with one area each, got {list(xs)} -> {list(ys)}")
    x = np.asarray(size, dtype=float)
    y = np.interp(x, xs, ys)
    below = ys[0] + (x - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
    above = ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return np.where(x < xs[0], below, np.where(x > xs[-1], above, y))


def sram_um2(kib, table_kib, table_um2_, um2_per_kib: float):
    """SRAM area of `kib` KiB: the table when given, else the density."""
    if len(table_kib):
        return table_um2(kib, table_kib, table_um2_)
    if um2_per_kib <= 0:
        raise ValueError("the area model has neither an SRAM table nor a positive sram_um2_per_kib")
    return np.asarray(kib, dtype=float) * um2_per_kib


def stacks_for_capacity(hbm_gib, gib_per_stack: float):
    """HBM stacks needed for a capacity (each stack brings one PHY on the chip)."""
    if gib_per_stack <= 0:
        raise ValueError(f"area.hbm_gib_per_stack must be positive, got {gib_per_stack}")
    return np.ceil(np.asarray(hbm_gib, dtype=float) / gib_per_stack - 1e-9)


def area_components_um2(area, n_tc, tc_rows, tc_cols, n_vc, vc_width, tc_buffer_kib, vc_buffer_kib, glb_mib,
                        hbm_stacks, hbm_phy_um2_per_stack, interconnect_lanes=0, pcie_lanes=0, fp8_matmul_ratio=0.0) -> dict:
    """Per-component area (um^2) of each point under the area config `area` (an AreaCfg); the counts are
    what the die holds (spare cores, stacks and buffer for yield included); FP8 tensor cores (`fp8_matmul_ratio` r > 0)
    carry r FP8 multipliers more per PE."""
    n_tc = np.asarray(n_tc, dtype=float)
    n_vc = np.asarray(n_vc, dtype=float)
    stacks = np.asarray(hbm_stacks, dtype=float)
    logic = 1.0 / area.logic_utilization

    def l2(kib):
        return sram_um2(kib, area.l2_kib, area.l2_um2, area.sram_um2_per_kib)

    glb = (
        table_um2(glb_mib, area.glb_mib, area.glb_um2)
        if len(area.glb_mib)
        else sram_um2(np.asarray(glb_mib, dtype=float) * KIB, [], [], area.sram_um2_per_kib)
    )
    return {
        "tc_macs": n_tc * np.asarray(tc_rows, float) * tc_cols * (area.tc_pe_um2 + fp8_matmul_ratio * getattr(area, "tc_fp8_multiplier_um2", 0.0)) * logic,
        "tc_buffers": n_tc * l2(tc_buffer_kib),
        "vc_lanes": n_vc * np.asarray(vc_width, float) * area.vc_lane_um2 * logic,
        "vc_buffers": n_vc * l2(vc_buffer_kib),
        "vc_control": n_vc * area.vc_control_um2 * logic,
        "glb": np.asarray(glb, dtype=float),
        "hbm_phy": stacks * np.asarray(hbm_phy_um2_per_stack, dtype=float),
        "hbm_controller": stacks * area.hbm_controller_um2_per_stack * logic,
        "noc": (n_tc + n_vc) * area.noc_um2_per_core * logic,
        "io_phy": np.asarray(interconnect_lanes, dtype=float) * area.serdes_um2_per_lane
                  + np.asarray(pcie_lanes, dtype=float) * area.pcie_um2_per_lane,
    }


def area_mm2(area, **point) -> np.ndarray:
    """Total chip area in mm^2 (the sum of `area_components_um2`)."""
    return sum(area_components_um2(area, **point).values()) / UM2_PER_MM2
