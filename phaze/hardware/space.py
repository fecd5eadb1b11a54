"""The accelerator design space: the points of a hardware config, their derived columns (per-core
buffers, peak rates, derating, area, TDP), and the area / power budget that decides which points are valid.

PHAZE's rule (reference/phaze-method.md §3.2): keep a point when
`area_min_fraction * A_max <= area <= A_max`, single-tensor-core and single-vector-core points being
exempt from the lower bound, A_max being the TPUv4-like reference point's area under the same model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from phaze.hardware.area import area_mm2
from phaze.hardware.derating import DERATING_COLUMNS, check_derating
from phaze.hardware.power import tdp_w
from phaze.hardware.rates import GB, FLOPS_PER_MAC, core_buffer_kib, peak_matmul_flops, peak_vector_ops

AXES = ("n_tc", "tc_rows", "tc_cols", "n_vc", "vc_width", "glb_mib", "hbm_gib")
"""The searched parameters; an empty `vc_width` list ties the vector width to `tc_cols` (PHAZE)."""

TPUV4_LIKE = {"n_tc": 8, "tc_rows": 128, "tc_cols": 128, "n_vc": 2, "vc_width": 128, "glb_mib": 128, "hbm_gib": 32}
"""PHAZE's area reference `max_acc_config` (Estimator/architecture.py, reference/phaze-method.md §3.3):
8 tensor cores of 128x128, 2 vector cores of width 128, 128 MiB on-chip buffer; HBM 32 GiB as TPUv4."""

KINDS = ("grid", "point")


def grid_axes(hw) -> pd.DataFrame:
    """The cartesian product of the config's axes, one row per tuple (vector width tied when empty)."""
    if hw.kind not in KINDS:
        raise ValueError(f"hw.kind must be one of {KINDS}, got {hw.kind!r}")
    lists = {a: [int(v) for v in getattr(hw, a)] for a in AXES}
    tied = not lists["vc_width"]
    for a in AXES:
        if a == "vc_width" and tied:
            continue
        if not lists[a] or min(lists[a]) <= 0:
            raise ValueError(f"hw.{a} must be a non-empty list of positive integers, got {lists[a]}")
        if hw.kind == "point" and len(lists[a]) != 1:
            raise ValueError(f"hw {hw.name} is a point: hw.{a} must have exactly one value, got {lists[a]}")
    axes = [a for a in AXES if not (tied and a == "vc_width")]
    mesh = np.meshgrid(*[np.asarray(lists[a], dtype=np.int64) for a in axes], indexing="ij")
    frame = pd.DataFrame({a: m.ravel() for a, m in zip(axes, mesh)})
    if tied:
        frame["vc_width"] = frame["tc_cols"]
    return frame[list(AXES)]


def describe_points(hw, axes: pd.DataFrame) -> pd.DataFrame:
    """The points `axes` (AXES columns) with the config's chip-wide values and every derived column."""
    derating = {name: float(getattr(hw, name)) for name in DERATING_COLUMNS}
    check_derating(derating, "hw.")
    frame = axes[list(AXES)].astype(np.int64).reset_index(drop=True)
    frame["hbm_gbps"] = float(hw.hbm_gbps)
    frame["glb_gbps"] = float(hw.glb_gbps)
    frame["freq_ghz"] = float(hw.freq_ghz)
    frame["core_buffer_bytes_per_cycle"] = float(hw.core_buffer_bytes_per_cycle)
    for name, value in derating.items():
        frame[name] = value
    n_tc, rows, cols = frame["n_tc"].to_numpy(), frame["tc_rows"].to_numpy(), frame["tc_cols"].to_numpy()
    n_vc, width = frame["n_vc"].to_numpy(), frame["vc_width"].to_numpy()
    frame["tc_buffer_kib"] = core_buffer_kib(rows * cols, hw.core_buffer_bytes_per_pe, hw.core_buffer_min_kib)
    frame["vc_buffer_kib"] = core_buffer_kib(width, hw.core_buffer_bytes_per_pe, hw.core_buffer_min_kib)
    frame["peak_matmul_flops"] = peak_matmul_flops(n_tc, rows, cols, hw.freq_ghz)
    frame["peak_vector_flops"] = peak_vector_ops(n_vc, width, hw.freq_ghz)
    frame["area_mm2"] = area_mm2(
        hw.area, n_tc=n_tc, tc_rows=rows, tc_cols=cols, n_vc=n_vc, vc_width=width,
        tc_buffer_kib=frame["tc_buffer_kib"].to_numpy(), vc_buffer_kib=frame["vc_buffer_kib"].to_numpy(),
        glb_mib=frame["glb_mib"].to_numpy(), hbm_gib=frame["hbm_gib"].to_numpy(),
    )
    frame["tdp_w"] = tdp_w(
        hw.power,
        mac_per_s=frame["peak_matmul_flops"].to_numpy() / FLOPS_PER_MAC,
        vector_ops_per_s=frame["peak_vector_flops"].to_numpy(),
        glb_bytes_per_s=frame["glb_gbps"].to_numpy() * GB,
        hbm_bytes_per_s=frame["hbm_gbps"].to_numpy() * GB,
        area_mm2=frame["area_mm2"].to_numpy(),
    )
    return frame


def reference_area_mm2(hw) -> float:
    """Area of the TPUv4-like reference point under the config's area model and buffer rule."""
    return float(describe_points(hw, pd.DataFrame([TPUV4_LIKE]))["area_mm2"].iloc[0])


def area_budget_mm2(hw) -> float:
    """The area budget: `hw.area_budget_mm2` when set, else the TPUv4-like reference area."""
    return float(hw.area_budget_mm2) if hw.area_budget_mm2 is not None else reference_area_mm2(hw)


def enumerate_space(hw) -> pd.DataFrame:
    """One row per valid point. A grid keeps the points inside the area (and power) budget; a point
    preset is returned as given, whatever its area."""
    points = describe_points(hw, grid_axes(hw))
    if hw.kind == "point":
        return points
    budget = area_budget_mm2(hw)
    area = points["area_mm2"].to_numpy()
    exempt = np.zeros(len(points), dtype=bool)
    if hw.area_min_exempt_single_core:
        exempt = (points["n_tc"].to_numpy() == 1) | (points["n_vc"].to_numpy() == 1)
    keep = (area <= budget) & ((area >= hw.area_min_fraction * budget) | exempt)
    if hw.power_budget_w is not None:
        keep &= points["tdp_w"].to_numpy() <= float(hw.power_budget_w)
    return points[keep].reset_index(drop=True)
