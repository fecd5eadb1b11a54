"""Cost of a given placement (an expert baseline or any dp/pp/tp/mbs/recompute) with the DP's model."""

from __future__ import annotations

from collections.abc import Sequence

from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import Plan, PlanCost, evaluate_plan
from phaze.placement.result import PlacementResult, result_from_cost


def megatron_stage_bounds(inp: PlacementInput, pp: int) -> tuple[tuple[int, int], ...] | str:
    """Megatron-style split: the N layers as evenly as possible (the first N mod pp stages get one
    more), pre-parts with the first stage, post-parts with the last. A reason string if impossible."""
    n_layers = inp.num_layers
    if pp < 1:
        return f"pipeline depth must be >= 1, got {pp}"
    if pp == 1:
        return ((0, inp.num_parts - 1),)
    if pp > n_layers:
        return f"pipeline depth {pp} exceeds the {n_layers} transformer layers"
    base, extra = divmod(n_layers, pp)
    bounds, first, layer_end = [], 0, inp.num_pre
    for stage in range(pp):
        layer_end += base + (1 if stage < extra else 0)
        last = inp.num_parts - 1 if stage == pp - 1 else layer_end - 1
        bounds.append((first, last))
        first = last + 1
    return tuple(bounds)


def evaluate_fixed(
    inp: PlacementInput,
    dp: int,
    pp: int,
    tp: int | Sequence[int],
    mbs: int,
    recompute: bool,
    stage_bounds: Sequence[tuple[int, int]] | None = None,
) -> PlacementResult:
    """Time, throughput and memory of a fixed placement; infeasible plans come back flagged with the reason."""
    bounds = megatron_stage_bounds(inp, pp) if stage_bounds is None else tuple((int(a), int(b)) for a, b in stage_bounds)
    widths = tuple(int(t) for t in tp) if isinstance(tp, Sequence) else (int(tp),) * pp
    if isinstance(bounds, str):
        plan = Plan(int(mbs), bool(recompute), int(dp), ())
        return result_from_cost(inp, PlanCost(plan, False, bounds, 0, float("inf")))
    reason = ""
    if len(bounds) != pp:
        reason = f"{len(bounds)} stage bounds given for pp = {pp}"
    elif len(widths) != pp:
        reason = f"{len(widths)} TP widths given for pp = {pp}"
    plan = Plan(int(mbs), bool(recompute), int(dp), tuple((a, b, t) for (a, b), t in zip(bounds, widths)))
    if reason:
        return result_from_cost(inp, PlanCost(plan, False, reason, 0, float("inf")))
    return result_from_cost(inp, evaluate_plan(inp, plan))
