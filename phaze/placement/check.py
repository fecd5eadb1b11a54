"""Piper's habit: re-cost a returned placement from scratch and fail loudly when anything disagrees."""

from __future__ import annotations

from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import evaluate_plan

CHECK_RTOL = 1e-9
"""Relative tolerance on times; the solvers and the evaluator share formulas and summation order."""


class PlacementCheckError(AssertionError):
    """A placement result disagrees with its from-scratch cost or breaks a constraint."""


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= CHECK_RTOL * max(abs(a), abs(b))


def check_result(inp: PlacementInput, result) -> None:
    """Raise PlacementCheckError unless `result` is a feasible plan whose time, memory and device
    count match a from-scratch evaluation and fit the cluster."""
    plan = result.strategy.to_plan()
    cost = evaluate_plan(inp, plan)
    if not cost.feasible:
        raise PlacementCheckError(f"plan is infeasible: {cost.reason}")
    if not result.feasible:
        raise PlacementCheckError(f"result is flagged infeasible although its plan fits: {result.reason}")
    if not _close(cost.time_per_batch_s, result.time_per_batch_s):
        raise PlacementCheckError(f"time per batch {result.time_per_batch_s} s, from scratch {cost.time_per_batch_s} s")
    if len(result.memory_per_stage_bytes) != len(cost.stage_memory_bytes) or not all(
        _close(a, b) for a, b in zip(result.memory_per_stage_bytes, cost.stage_memory_bytes)
    ):
        raise PlacementCheckError(f"memory per stage {result.memory_per_stage_bytes}, from scratch {cost.stage_memory_bytes}")
    if max(cost.stage_memory_bytes) > inp.hbm_bytes:
        raise PlacementCheckError(f"memory {max(cost.stage_memory_bytes)} B exceeds HBM {inp.hbm_bytes} B")
    used = plan.dp * plan.devices_per_pipeline
    if used != result.strategy.devices_used or used > inp.devices:
        raise PlacementCheckError(f"devices used {result.strategy.devices_used} (plan {used}) of {inp.devices}")
    if result.strategy.pp * result.strategy.vp != len(plan.stages):
        raise PlacementCheckError(f"pp {result.strategy.pp} x vp {result.strategy.vp} but {len(plan.stages)} stages")
    total = sum(result.breakdown.values())
    if not _close(total, result.time_per_batch_s):
        raise PlacementCheckError(f"breakdown sums to {total} s, time per batch {result.time_per_batch_s} s")
