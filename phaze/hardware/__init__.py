"""The accelerator: its parameters, area and power models, and the space of valid design points."""

from phaze.hardware.accelerator import Accelerator
from phaze.hardware.power import perf_per_tdp
from phaze.hardware.space import area_budget_mm2, describe_points, enumerate_space, reference_area_mm2

__all__ = ["Accelerator", "area_budget_mm2", "describe_points", "enumerate_space", "perf_per_tdp", "reference_area_mm2"]
