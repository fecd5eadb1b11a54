"""Device placement: a Piper-style DP over the layer chain (pipeline stages with a TP width each,
data-parallel replicas, microbatch size, recompute) under PipeDream-flush timing, compiled with
Numba; a plain-Python reference; the cost of fixed (expert) placements; a from-scratch checker."""

from phaze.placement.check import PlacementCheckError, check_result
from phaze.placement.fixed import evaluate_fixed, megatron_stage_bounds
from phaze.placement.inputs import PartCosts, PlacementInput
from phaze.placement.plan import Plan, PlanCost, evaluate_plan
from phaze.placement.result import PlacementResult, Strategy
from phaze.placement.solve import optimize, warm_up

__all__ = [
    "PartCosts",
    "Plan",
    "PlanCost",
    "PlacementCheckError",
    "PlacementInput",
    "PlacementResult",
    "Strategy",
    "check_result",
    "evaluate_fixed",
    "evaluate_plan",
    "megatron_stage_bounds",
    "optimize",
    "warm_up",
]
