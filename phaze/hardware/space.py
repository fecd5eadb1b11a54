"""The accelerator design space: the points of a hardware config, their derived columns (per-core
buffers, peak rates, derating, area, TDP), and the area / power budget that decides which points are valid.

PHAZE's rule (docs/phaze-reference.md §3.2): keep a point when
`area_min_fraction * A_max <= area <= A_max`, single-tensor-core and single-vector-core points being
exempt from the lower bound, A_max being the TPUv4-like reference point's area under the same model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from phaze.hardware.area import UM2_PER_MM2, area_components_um2, stacks_for_capacity
from phaze.hardware.derating import DERATING_COLUMNS, SUSTAINED_COLUMN, capped_slowdown, check_derating
from phaze.hardware.hbm import generation, stack_columns
from phaze.hardware.power import operand_fetches_per_mac, tdp_components_w
from phaze.hardware.rates import GB, GBIT, FLOPS_PER_MAC, core_buffer_kib, peak_matmul_flops, peak_vector_ops

AXES = ("n_tc", "tc_rows", "tc_cols", "n_vc", "vc_width", "glb_mib", "hbm_gib")
"""The searched parameters; an empty `vc_width` list ties the vector width to `tc_cols` (PHAZE)."""
STACK_AXES = ("hbm_stacks", "hbm_generation")
"""The stack model's HBM axes (hw.hbm_stacks, hw.hbm_generation); `hbm_gib` is then derived from them."""

TPUV4_LIKE = {"n_tc": 8, "tc_rows": 128, "tc_cols": 128, "n_vc": 2, "vc_width": 128, "glb_mib": 128, "hbm_gib": 32}
"""PHAZE's area reference `max_acc_config` (Estimator/architecture.py, docs/phaze-reference.md §3.3):
8 tensor cores of 128x128, 2 vector cores of width 128, 128 MiB on-chip buffer; HBM 32 GiB as TPUv4."""
TPUV4_HBM_STACKS = {"hbm_stacks": 4, "hbm_generation": "hbm2"}
"""The same 32 GiB as stacks, for a space under the stack model: TPUv4's package holds 4 HBM2 stacks
(Jouppi et al., ISCA 2023, Fig. of the v4 package and board), 4 x 8 GiB."""

BOTH_DIRECTIONS = 2
"""A SerDes lane count is per direction; its traffic at peak flows both ways."""


def uses_stacks(hw) -> bool:
    """True under the stack model (hw.hbm_stacks and hw.hbm_generation both given); ValueError when one is missing."""
    stacks, gens = list(hw.hbm_stacks), list(hw.hbm_generation)
    if bool(stacks) != bool(gens):
        raise ValueError("hw.hbm_stacks and hw.hbm_generation: give both (the stack model) or neither (hw.hbm_gib)")
    return bool(stacks)


def point_axes(hw) -> tuple:
    """The columns that name a point of this space: AXES, plus STACK_AXES under the stack model."""
    return AXES + STACK_AXES if uses_stacks(hw) else AXES


def _axis_lists(hw, stacked: bool) -> dict:
    """The config's integer axes as lists, checked: positive values, one value each on a point preset."""
    names = [a for a in AXES if not (stacked and a == "hbm_gib")] + (["hbm_stacks"] if stacked else [])
    lists = {a: [int(v) for v in getattr(hw, a)] for a in names}
    for a in names:
        if a == "vc_width" and not lists[a]:
            continue
        if not lists[a] or min(lists[a]) <= 0:
            raise ValueError(f"hw.{a} must be a non-empty list of positive integers, got {lists[a]}")
        if hw.kind == "point" and len(lists[a]) != 1:
            raise ValueError(f"hw {hw.name} is a point: hw.{a} must have exactly one value, got {lists[a]}")
    return lists


def grid_axes(hw) -> pd.DataFrame:
    """The cartesian product of the config's axes, one row per tuple (vector width tied when empty).
    Under the stack model the HBM axes are the stack counts and generations; a point preset may keep
    its product's capacity in `hbm_gib`, a grid derives it."""
    stacked = uses_stacks(hw)
    lists = _axis_lists(hw, stacked)
    if stacked:
        gens = [str(g) for g in hw.hbm_generation]
        for g in gens:
            generation(g)
        if hw.kind == "point" and len(gens) != 1:
            raise ValueError(f"hw {hw.name} is a point: hw.hbm_generation must have exactly one value, got {gens}")
        if hw.kind == "grid" and (list(hw.hbm_gib) or hw.hbm_gbps is not None):
            raise ValueError(f"hw={hw.name} is a grid under the stack model: hw.hbm_gib must be empty and hw.hbm_gbps null "
                             "(capacity and bandwidth follow from the stacks)")
        lists["hbm_generation"] = list(range(len(gens)))
    tied = not lists["vc_width"]
    axes = [a for a in lists if not (tied and a == "vc_width")]
    mesh = np.meshgrid(*[np.asarray(lists[a], dtype=np.int64) for a in axes], indexing="ij")
    frame = pd.DataFrame({a: m.ravel() for a, m in zip(axes, mesh)})
    if tied:
        frame["vc_width"] = frame["tc_cols"]
    if not stacked:
        return frame[list(AXES)]
    frame["hbm_generation"] = np.asarray(gens, dtype=object)[frame["hbm_generation"].to_numpy()]
    if list(hw.hbm_gib):
        frame["hbm_gib"] = int(hw.hbm_gib[0])
    return frame[[a for a in point_axes(hw) if a in frame.columns]]


def _hbm_columns(hw, frame: pd.DataFrame) -> dict:
    """HBM capacity and bandwidth of each point, and what its area and power need: stacks on the die, PHY
    area per stack, energy per byte (None: the power config's)."""
    if not uses_stacks(hw):
        if hw.hbm_gbps is None:
            raise ValueError(f"hw.hbm_gbps is null: hw={hw.name} has no HBM stacks (hw.hbm_stacks) to derive it from; "
                             "allowed: a bandwidth in GB/s > 0, or the stack model")
        gib = frame["hbm_gib"].to_numpy()
        stacks = stacks_for_capacity(gib, hw.area.hbm_gib_per_stack)
        return {"hbm_gib": gib, "hbm_gbps": float(hw.hbm_gbps), "die_stacks": stacks + hw.spare_hbm_stacks,
                "phy_um2": hw.area.hbm_phy_um2_per_stack, "pj_per_byte": None}
    if "hbm_stacks" not in frame.columns:
        raise ValueError(f"hw={hw.name} uses the stack model: its points need the columns {STACK_AXES} "
                         "(see phaze.hardware.space.reference_point)")
    stacks = frame["hbm_stacks"].to_numpy(dtype=float)
    derived = stack_columns(stacks, frame["hbm_generation"].to_numpy())
    gib = frame["hbm_gib"].to_numpy() if "hbm_gib" in frame.columns else np.rint(derived["hbm_gib"]).astype(np.int64)
    gbps = derived["hbm_gbps"] if hw.hbm_gbps is None else float(hw.hbm_gbps)
    return {"hbm_gib": gib, "hbm_gbps": gbps, "die_stacks": stacks + hw.spare_hbm_stacks,
            "phy_um2": derived["hbm_phy_um2_per_stack"], "pj_per_byte": derived["hbm_pj_per_byte"]}


def point_components(hw, frame: pd.DataFrame) -> tuple[dict, dict]:
    """Per-component area (um^2) and power (W) of the described points `frame` (describe_points' columns):
    area counts the whole die (the spare cores, stacks and buffer included), power the enabled chip at peak."""
    hbm = _hbm_columns(hw, frame)
    n_tc, n_vc = frame["n_tc"].to_numpy(), frame["n_vc"].to_numpy()
    area = area_components_um2(
        hw.area, n_tc=n_tc + hw.spare_cores, tc_rows=frame["tc_rows"].to_numpy(), tc_cols=frame["tc_cols"].to_numpy(),
        n_vc=n_vc + hw.spare_cores, vc_width=frame["vc_width"].to_numpy(), tc_buffer_kib=frame["tc_buffer_kib"].to_numpy(),
        vc_buffer_kib=frame["vc_buffer_kib"].to_numpy(), glb_mib=frame["glb_mib"].to_numpy() + hw.spare_glb_mib,
        hbm_stacks=hbm["die_stacks"], hbm_phy_um2_per_stack=hbm["phy_um2"],
        interconnect_lanes=hw.interconnect_lanes, pcie_lanes=hw.pcie_lanes, fp8_matmul_ratio=float(hw.fp8_matmul_ratio),
    )
    area_mm2 = sum(area.values()) / UM2_PER_MM2
    mac_per_s = frame["peak_matmul_flops"].to_numpy() / FLOPS_PER_MAC
    power = tdp_components_w(
        hw.power,
        mac_per_s=mac_per_s,
        operand_fetches_per_s=mac_per_s * operand_fetches_per_mac(frame["tc_rows"].to_numpy(), frame["tc_cols"].to_numpy()),
        vector_ops_per_s=frame["peak_vector_flops"].to_numpy(),
        glb_bytes_per_s=frame["glb_gbps"].to_numpy() * GB,
        hbm_bytes_per_s=frame["hbm_gbps"].to_numpy() * GB,
        area_mm2=area_mm2,
        hbm_pj_per_byte=hbm["pj_per_byte"],
        serdes_bits_per_s=hw.interconnect_lanes * hw.interconnect_gbit_s_per_lane * GBIT * BOTH_DIRECTIONS,
        fp8_matmul_ratio=float(hw.fp8_matmul_ratio),
    )
    return area, power


def describe_points(hw, axes: pd.DataFrame) -> pd.DataFrame:
    """The points `axes` (point_axes columns) with the config's chip-wide values and every derived column."""
    derating = {name: float(getattr(hw, name)) for name in DERATING_COLUMNS}
    check_derating(derating, "hw.")
    derating[SUSTAINED_COLUMN] = capped_slowdown(derating[SUSTAINED_COLUMN], hw.sustained_power_w, hw.power_limit_w,
                                                 float(hw.clock_floor_power_w))
    stacked = uses_stacks(hw)
    names = [a for a in point_axes(hw) if a in axes.columns]
    frame = axes[names].reset_index(drop=True)
    ints = [a for a in names if a != "hbm_generation"]
    frame[ints] = frame[ints].astype(np.int64)
    hbm = _hbm_columns(hw, frame)
    frame["hbm_gib"] = hbm["hbm_gib"]
    if stacked:
        frame = frame[list(AXES) + list(STACK_AXES)]
    frame["hbm_gbps"] = hbm["hbm_gbps"]
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
    area, power = point_components(hw, frame)
    frame["area_mm2"] = sum(area.values()) / UM2_PER_MM2
    frame["tdp_w"] = sum(power.values())
    return frame


def reference_point(hw) -> pd.DataFrame:
    """The TPUv4-like reference point (TPUV4_LIKE) as axes of this space: its HBM as 4 HBM2 stacks under the stack model."""
    if uses_stacks(hw):
        point = {k: v for k, v in TPUV4_LIKE.items() if k != "hbm_gib"}
        return pd.DataFrame([{**point, **TPUV4_HBM_STACKS}])
    return pd.DataFrame([TPUV4_LIKE])


def reference_area_mm2(hw) -> float:
    """Area of the TPUv4-like reference point under the config's area model and buffer rule."""
    return float(describe_points(hw, reference_point(hw))["area_mm2"].iloc[0])


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
