"""Plain-Python placement DP (same cost model as the Numba one, no pruning, one run per data-parallel
degree, p2p link kind and stage layout) and a brute-force enumerator of every plan of a space; both kept for tests."""

from __future__ import annotations

import itertools

from phaze.placement.dp import extend_stage, inflight_microbatches, new_stage, stage_core_s, stage_fits, stage_recomputes
from phaze.placement.fixed import megatron_stage_bounds
from phaze.placement.inputs import PlacementInput
from phaze.placement.layouts import Layout, layouts, rule_breach, stage_layer_counts
from phaze.placement.plan import Plan, PlanCost, evaluate_plan
from phaze.placement.result import PlacementResult, result_from_cost
from phaze.placement.solve import Group, Space, _configs, _kernel_args, _state, _timeline, chain_arrays, replica_counts, timeline_groups
from phaze.placement.timing import batch_time_s, pipeline_in_one_node

_extend = extend_stage.py_func
_new = new_stage.py_func
_core = stage_core_s.py_func
_fits = stage_fits.py_func
_recomputes = stage_recomputes.py_func
_inflight = inflight_microbatches.py_func


def _space(recompute_options, mbs_options, per_stage_tp, space) -> Space:
    return space or Space(recompute=tuple(recompute_options), mbs=None if mbs_options is None else tuple(mbs_options),
                          per_stage_tp=per_stage_tp)


def _width_sets(inp: PlacementInput, vi: int, per_stage_tp: bool) -> list[tuple[int, ...]]:
    idx = [ti for ti in range(len(inp.tp_values)) if inp.available(vi, ti)]
    if not idx:
        return []
    return [tuple(idx)] if per_stage_tp else [(ti,) for ti in idx]


def _insert(front: list, point: tuple) -> None:
    load, tail = point[0], point[1]
    if any(le <= load and ze <= tail for le, ze, *_ in front):
        return
    front[:] = [pt for pt in front if not (load <= pt[0] and tail <= pt[1])]
    front.append(point)


def pareto_fronts(inp, config, chain, group: Group, k_max, layout: Layout) -> dict[tuple[int, int], list]:
    """{(q, k): Pareto points (L, Z, stage, child)} for the whole chain in q stages on k devices, each stage
    one the layout allows."""
    n = inp.num_parts
    timeline = inp.timeline_mode(config.zero)
    per_layer = inp.per_layer_recompute
    full = config.recompute == "full"
    mult, transient = _state(inp, config, group)
    tl = _timeline(inp, config, chain, group)
    arrays = _kernel_args(inp, config, chain, group)
    widths = [int(w) for w in chain.widths]
    q_max = min(n, k_max // min(widths))
    prev = {n: {0: [(0.0, 0.0, None, None)]}}
    finals = {}
    for q in range(1, q_max + 1):
        cur: dict[int, dict[int, list]] = {}
        inflight, rcs = _inflight(q, group.cap), _recomputes(full, q, per_layer)
        for i in range(n - q + 1):
            for wi, w in enumerate(widths):
                st = _new()
                for j in range(i, n - q + 1):
                    _extend(st, wi, j, *arrays[:5], tl, rcs, per_layer, timeline)
                    if not _fits(st, chain.inb[wi, i], inflight, rcs, per_layer, mult, transient, float(inp.hbm_bytes)):
                        break
                    if not layout.allowed[i, j]:
                        continue
                    core, tail = _core(st, chain.recv[wi, i], rcs, per_layer, timeline)
                    load = core + chain.send[wi, j]
                    if timeline:
                        tail = tail + chain.send[wi, j]
                    for kc, points in prev.get(j + 1, {}).items():
                        if kc + w > k_max:
                            continue
                        cell = cur.setdefault(i, {}).setdefault(kc + w, [])
                        for pt in points:
                            _insert(cell, (max(load, pt[0]), max(tail, pt[1]), (i, j, int(chain.tp[wi])), pt))
        finals.update({(q, k): pts for k, pts in cur.get(0, {}).items()})
        prev = cur
    return finals


def _stages(point) -> tuple[tuple[int, int, int], ...]:
    out = []
    while point[2] is not None:
        out.append(point[2])
        point = point[3]
    return tuple(out)


def _groups(inp, mbs, widths, ep):
    """One group per (d, class) for the timeline, one per d for PHAZE's step (no shared runs here)."""
    if inp.step_model == "timeline":
        return [g for g in timeline_groups(inp, mbs, widths, None, ep)]
    return [Group(cap=m, replicas=((d, m, k_d),), k_max=k_d) for d, m, k_d in replica_counts(inp, mbs, widths, ep)]


def optimize(inp: PlacementInput, recompute_options=(False, True), mbs_options=None, per_stage_tp: bool = True,
             space: Space | None = None) -> PlacementResult | None:
    """The optimum by the plain-Python DP (plus the enumerated interleaved plans), costed by the plan evaluator; None if nothing fits."""
    space = _space(recompute_options, mbs_options, per_stage_tp, space)
    stage_layouts = layouts(inp.num_pre, inp.num_layers, inp.num_parts, space.stage_layers)
    best_time, best_plan = float("inf"), None
    for config in _configs(inp, space):
        fields_ = config.plan_fields(inp)
        for tp_idx in _width_sets(inp, config.vi, space.per_stage_tp) if 1 in space.vp else []:
            for same_node in (True, False):
                chain = chain_arrays(inp, config.vi, config.recompute, tp_idx, same_node)
                for group, layout in itertools.product(_groups(inp, fields_["mbs"], chain.widths, fields_["ep"]), stage_layouts):
                    d, m, k_d = group.replicas[0]
                    fronts = pareto_fronts(inp, config, chain, group, min(k_d, group.k_max), layout)
                    for (q, k), points in fronts.items():
                        if pipeline_in_one_node(k, inp.network.node_size) != same_node:
                            continue
                        if group.pipeline_sizes and k not in group.pipeline_sizes:
                            continue
                        for pt in points:
                            if inp.step_model == "timeline":
                                tpb = pt[0] * float(m + q - 2) + max(pt[0], pt[1])
                            else:
                                tpb = batch_time_s(pt[0], m, q, float(inp.network.allreduce_s(pt[1], d, k)))
                            if tpb < best_time:
                                best_time, best_plan = tpb, Plan(stages=_stages(pt), dp=d, **fields_)
        for plan in _interleaved_plans(inp, space, config):
            cost = evaluate_plan(inp, plan)
            if cost.feasible and cost.time_per_batch_s < best_time:
                best_time, best_plan = cost.time_per_batch_s, plan
    if best_plan is None:
        return None
    return result_from_cost(inp, evaluate_plan(inp, best_plan))


def _splits(n: int):
    """Every split of parts 0..n-1 into contiguous stages, as (first, last) tuples."""
    for cuts in itertools.product((False, True), repeat=n - 1):
        bounds, first = [], 0
        for j, cut in enumerate(cuts):
            if cut:
                bounds.append((first, j))
                first = j + 1
        bounds.append((first, n - 1))
        yield tuple(bounds)


def _interleaved_plans(inp: PlacementInput, space: Space, config):
    """Megatron's interleaved plans (vp > 1) of one configuration: uniform chunks, one TP width."""
    fields_ = config.plan_fields(inp)
    for vp in (v for v in space.vp if v > 1):
        for ti in range(len(inp.tp_values)):
            if not inp.available(config.vi, ti):
                continue
            t = int(inp.tp_values[ti])
            for pp in range(2, inp.num_layers // vp + 1):
                if inp.num_layers % (pp * vp):
                    continue
                chunks = megatron_stage_bounds(inp, pp * vp)
                for d, _, _ in replica_counts(inp, fields_["mbs"], inp.tp_values[[ti]] * fields_["cp"], fields_["ep"]):
                    if d * pp * t * fields_["cp"] <= inp.devices:
                        yield Plan(stages=tuple((a, b, t) for a, b in chunks), dp=d, vp=vp, **fields_)


def brute_force(inp: PlacementInput, recompute_options=(False, True), mbs_options=None, per_stage_tp: bool = True,
                space: Space | None = None) -> PlanCost | None:
    """The cheapest feasible plan over every (stage split the space's stage_layers rule allows, TP widths, d) of every
    configuration of the space."""
    space = _space(recompute_options, mbs_options, per_stage_tp, space)
    best = None
    for config in _configs(inp, space):
        fields_ = config.plan_fields(inp)
        plans = []
        for width_idx in _width_sets(inp, config.vi, space.per_stage_tp) if 1 in space.vp else []:
            widths = [int(inp.tp_values[ti]) for ti in width_idx]
            for bounds in _splits(inp.num_parts):
                if rule_breach(stage_layer_counts(bounds, inp.num_pre, inp.num_layers), space.stage_layers):
                    continue
                for tps in itertools.product(widths, repeat=len(bounds)):
                    for d, _, _ in replica_counts(inp, fields_["mbs"], inp.tp_values[list(width_idx)] * fields_["cp"], fields_["ep"]):
                        if d * sum(tps) * fields_["cp"] <= inp.devices:
                            plans.append(Plan(stages=tuple((a, b, t) for (a, b), t in zip(bounds, tps)), dp=d, **fields_))
        plans.extend(_interleaved_plans(inp, space, config))
        for plan in plans:
            cost = evaluate_plan(inp, plan)
            if cost.feasible and (best is None or cost.time_per_batch_s < best.time_per_batch_s):
                best = cost
    return best
