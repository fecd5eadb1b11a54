"""Cost of a given placement (an expert baseline or any dp/pp/tp/mbs/recompute/zero/sp/vp/cp/ep) with the DP's model."""

from __future__ import annotations

from collections.abc import Sequence

from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import Plan, PlanCost, evaluate_plan
from phaze.placement.result import PlacementResult, result_from_cost


def megatron_stage_bounds(inp: PlacementInput, pp: int) -> tuple[tuple[int, int], ...] | str:
    """Megatron-style split: the N layers as evenly as possible (the first N mod pp stages get one
    more), pre-parts with the first stage, post-parts with the last. A reason string if impossible.
    For an interleaved schedule pass pp x vp: the chunks, in chain order."""
    n_layers = inp.num_layers
    if pp < 1:
        return f"pipeline depth must be >= 1, got {pp}"
    if pp == 1:
        return ((0, inp.num_parts - 1),)
    if pp > n_layers:
        return f"pipeline depth {pp} exceeds the {n_layers} transformer layers"
    base, extra = divmod(n_layers, pp)
    return stage_bounds_of_layers(inp, [base + (1 if stage < extra else 0) for stage in range(pp)])


def stage_bounds_of_layers(inp: PlacementInput, layers_per_stage: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Part ranges of stages holding the given numbers of transformer layers: pre-parts with the first, post-parts
    with the last (a first or last stage may hold no layer, only the embedding or the loss)."""
    bounds, first, layer_end = [], 0, inp.num_pre
    for stage, n in enumerate(layers_per_stage):
        layer_end += int(n)
        last = inp.num_parts - 1 if stage == len(layers_per_stage) - 1 else layer_end - 1
        bounds.append((first, last))
        first = last + 1
    return tuple(bounds)


def evaluate_fixed(
    inp: PlacementInput,
    dp: int,
    pp: int,
    tp: int | Sequence[int],
    mbs: int,
    recompute: bool | str,
    stage_bounds: Sequence[tuple[int, int]] | None = None,
    *,
    layers_per_stage: Sequence[int] | None = None,
    zero: int = 0,
    sp: bool = False,
    vp: int = 1,
    cp: int = 1,
    tp_comm_overlap: bool = False,
    ep: int = 1,
) -> PlacementResult:
    """Time, throughput and memory of a fixed placement; infeasible plans come back flagged with the reason.
    The stages are `stage_bounds` (part ranges), else the ranges holding `layers_per_stage` transformer layers,
    else Megatron's even split. With vp > 1, these and a per-stage `tp` list the pp x vp chunks."""
    chunks = pp * vp
    if stage_bounds is not None:
        bounds = tuple((int(a), int(b)) for a, b in stage_bounds)
    elif layers_per_stage is not None:
        bounds = stage_bounds_of_layers(inp, layers_per_stage)
    else:
        bounds = megatron_stage_bounds(inp, chunks)
    widths = tuple(int(t) for t in tp) if isinstance(tp, Sequence) else (int(tp),) * chunks
    dims = dict(zero=int(zero), sp=bool(sp), vp=int(vp), cp=int(cp), tp_comm_overlap=bool(tp_comm_overlap), ep=int(ep))
    if isinstance(bounds, str):
        plan = Plan(int(mbs), recompute, int(dp), (), **dims)
        return result_from_cost(inp, PlanCost(plan, False, bounds, 0, float("inf")))
    reason = ""
    if len(bounds) != chunks:
        reason = f"{len(bounds)} stage bounds given for pp x vp = {chunks}"
    elif len(widths) != chunks:
        reason = f"{len(widths)} TP widths given for pp x vp = {chunks}"
    plan = Plan(int(mbs), recompute, int(dp), tuple((a, b, t) for (a, b), t in zip(bounds, widths)), **dims)
    if reason:
        return result_from_cost(inp, PlanCost(plan, False, reason, 0, float("inf")))
    return result_from_cost(inp, evaluate_plan(inp, plan))
