"""hw.*: the accelerator space (a grid or a point), its HBM model, area and power constants, budgets and baseline."""

from __future__ import annotations

from phaze.config_values import ConfigError, choice, positive, positive_ints
from phaze.hardware.derating import DERATING_COLUMNS, check_derating
from phaze.hardware.hbm import HBM_GENERATIONS
from phaze.hardware.space import AXES, describe_points, grid_axes

POWER_OF_TWO_AXES = ("n_tc", "tc_rows", "tc_cols", "n_vc", "vc_width")
"""Grid axes that PHAZE's space takes in powers of two (docs/phaze-reference.md §3.2); point presets
describe real chips (an A100 has 108 SMs) and are exempt."""


def check_hw(hw) -> None:
    """The accelerator space's rules that read the hardware model: positive axes (powers of two on a grid), one value
    each on a point, the HBM model, the derating, a budget some point fits (the chip's own scalar
    rules: phaze.schema.hardware; the baseline's name: phaze.config.study_spec, which composes it)."""
    stacked = check_hbm(hw)
    for axis in AXES:
        values = list(getattr(hw, axis))
        if (axis == "vc_width" or (axis == "hbm_gib" and stacked)) and not values:
            continue
        positive_ints(values, f"hw.{axis}", powers_of_two=hw.kind == "grid" and axis in POWER_OF_TWO_AXES)
        if hw.kind == "point" and len(values) != 1:
            raise ConfigError(f"hw.{axis}={values}: hw={hw.name} is a point (hw.kind=point), allowed is exactly one value")
    try:
        check_derating({name: getattr(hw, name) for name in DERATING_COLUMNS}, "hw.")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if hw.kind == "grid":
        check_budget(hw)


def check_precision(hw, train) -> None:
    """FP8 training needs tensor cores with FP8 on every point of the space."""
    if train.precision == "fp8" and float(hw.fp8_matmul_ratio) < 1:
        raise ConfigError(f"hw.fp8_matmul_ratio={hw.fp8_matmul_ratio}: train.precision=fp8 needs tensor cores with FP8; "
                          f"allowed values are >= 1 (the FP8 peak over the bf16 peak; hw=h100: 2.0), or train.precision=bf16")


def check_hbm(hw) -> bool:
    """HBM: PHAZE's capacity axis at a fixed bandwidth, or the stack model (stack counts x generations); True for the latter."""
    stacks, gens = list(hw.hbm_stacks), list(hw.hbm_generation)
    if not stacks and not gens:
        if hw.hbm_gbps is None:
            raise ConfigError("hw.hbm_gbps=None: without HBM stacks (hw.hbm_stacks, hw.hbm_generation) allowed values are numbers > 0")
        positive(hw.hbm_gbps, "hw.hbm_gbps")
        return False
    positive_ints(stacks, "hw.hbm_stacks")
    if not gens:
        raise ConfigError(f"hw.hbm_generation=[]: with hw.hbm_stacks={stacks} allowed values are one or more of {', '.join(HBM_GENERATIONS)}")
    for g in gens:
        choice(g, "hw.hbm_generation", list(HBM_GENERATIONS))
    if hw.hbm_gbps is not None:
        positive(hw.hbm_gbps, "hw.hbm_gbps")
    if hw.kind == "point" and (len(stacks) != 1 or len(gens) != 1):
        raise ConfigError(f"hw.hbm_stacks={stacks}, hw.hbm_generation={gens}: hw={hw.name} is a point (hw.kind=point), allowed is exactly one value each")
    if hw.kind == "grid" and (list(hw.hbm_gib) or hw.hbm_gbps is not None):
        raise ConfigError(f"hw.hbm_gib={list(hw.hbm_gib)}, hw.hbm_gbps={hw.hbm_gbps}: on a grid under the stack model allowed values are "
                          "[] and null (capacity and bandwidth follow from the stacks)")
    return True


def check_budget(hw) -> None:
    """A grid needs at least one point inside its area (and power) budget."""
    from phaze.hardware.space import enumerate_space, area_budget_mm2

    if len(enumerate_space(hw)):
        return
    points = describe_points(hw, grid_axes(hw))
    smallest = float(points.area_mm2.min())
    if hw.power_budget_w is not None and smallest <= area_budget_mm2(hw):
        raise ConfigError(f"hw.power_budget_w={hw.power_budget_w}: no point of hw={hw.name} fits; allowed values are >= {float(points.tdp_w.min()):.4g}")
    raise ConfigError(f"hw.area_budget_mm2={hw.area_budget_mm2}: no point of hw={hw.name} fits; allowed values are >= {smallest:.4g} (the smallest point's area)")
