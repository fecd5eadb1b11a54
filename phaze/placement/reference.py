"""Plain-Python placement DP (same cost model as the Numba one, no pruning, one run per data-parallel
degree and p2p link kind) and a brute-force enumerator of every plan; both kept for tests."""

from __future__ import annotations

import itertools

from phaze.placement.dp import inflight_microbatches, stage_compute_s, stage_memory_bytes, stage_recomputes
from phaze.placement.inputs import PlacementInput
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.placement.plan import Plan, PlanCost, evaluate_plan
from phaze.placement.result import PlacementResult, result_from_cost
from phaze.placement.timing import batch_time_s, pipeline_in_one_node

_memory = stage_memory_bytes.py_func
_compute = stage_compute_s.py_func
_recomputes = stage_recomputes.py_func
_inflight = inflight_microbatches.py_func


def _mbs_indices(inp: PlacementInput, mbs_options) -> list[int]:
    wanted = inp.mbs_values.tolist() if mbs_options is None else list(mbs_options)
    found = [inp.mbs_index(int(b)) for b in wanted]
    return [mi for mi in found if mi is not None and inp.global_batch % int(inp.mbs_values[mi]) == 0]


def _width_sets(inp: PlacementInput, mi: int, per_stage_tp: bool) -> list[list[int]]:
    widths = [int(inp.tp_values[ti]) for ti in range(len(inp.tp_values)) if inp.available(mi, ti)]
    if not widths:
        return []
    return [widths] if per_stage_tp else [[t] for t in widths]


def _replicas(inp: PlacementInput, mbs: int):
    per = inp.global_batch // mbs
    return [(d, per // d) for d in range(1, min(inp.devices, per) + 1) if per % d == 0]


def _rows(inp: PlacementInput, mi: int, t: int, same_node: bool) -> dict[str, list[float]]:
    ti = inp.tp_index(t)
    n = inp.num_parts
    rows = {name: [float(x) for x in getattr(inp, name)[mi, ti]] for name in ("fwd_s", "bwd_s", "param_bytes", "saved_bytes", "input_bytes")}
    rows["recv"] = [0.0] + [float(inp.network.p2p_s(float(inp.input_bytes[mi, ti, i]), same_node)) for i in range(1, n)]
    rows["send"] = [float(inp.network.p2p_s(float(inp.output_bytes[mi, ti, j]), same_node)) for j in range(n - 1)] + [0.0]
    return rows


def _insert(front: list, point: tuple) -> None:
    load, param = point[0], point[1]
    if any(le <= load and pe <= param for le, pe, *_ in front):
        return
    front[:] = [pt for pt in front if not (load <= pt[0] and param <= pt[1])]
    front.append(point)


def pareto_fronts(inp, mi, widths, same_node, recompute, cap, k_max) -> dict[tuple[int, int], list]:
    """{(q, k): Pareto points (L, P, stage, child)} for the whole chain in q stages on k devices."""
    n = inp.num_parts
    mult = state_bytes_per_param_byte(inp.optimizer, inp.bytes_per_elem)
    per_layer = inp.per_layer_recompute
    rows = [(t, _rows(inp, mi, t, same_node)) for t in widths]
    q_max = min(n, k_max // min(widths))
    prev = {n: {0: [(0.0, 0.0, None, None)]}}
    finals = {}
    for q in range(1, q_max + 1):
        cur: dict[int, dict[int, list]] = {}
        inflight, rcs = _inflight(q, cap), _recomputes(recompute, q, per_layer)
        for i in range(n - q + 1):
            for t, r in rows:
                f = b = p = s = si = 0.0
                rb = float("-inf")
                for j in range(i, n - q + 1):
                    f += r["fwd_s"][j]
                    b += r["bwd_s"][j]
                    p += r["param_bytes"][j]
                    s += r["saved_bytes"][j]
                    si += r["input_bytes"][j]
                    rb = max(rb, r["saved_bytes"][j] - r["input_bytes"][j])
                    if _memory(p, s, r["input_bytes"][i], si, rb, inflight, rcs, per_layer, mult) > inp.hbm_bytes:
                        break
                    load = _compute(f, b, rcs) + r["recv"][i] + r["send"][j]
                    for kc, points in prev.get(j + 1, {}).items():
                        if kc + t > k_max:
                            continue
                        cell = cur.setdefault(i, {}).setdefault(kc + t, [])
                        for pt in points:
                            _insert(cell, (max(load, pt[0]), max(p, pt[1]), (i, j, t), pt))
        finals.update({(q, k): pts for k, pts in cur.get(0, {}).items()})
        prev = cur
    return finals


def _stages(point) -> tuple[tuple[int, int, int], ...]:
    out = []
    while point[2] is not None:
        out.append(point[2])
        point = point[3]
    return tuple(out)


def optimize(inp: PlacementInput, recompute_options=(False, True), mbs_options=None, per_stage_tp: bool = True) -> PlacementResult | None:
    """The optimum by the plain-Python DP, costed by the plan evaluator; None if nothing fits."""
    best_time, best_plan = float("inf"), None
    for mi in _mbs_indices(inp, mbs_options):
        mbs = int(inp.mbs_values[mi])
        for widths in _width_sets(inp, mi, per_stage_tp):
            for recompute in recompute_options:
                for d, m in _replicas(inp, mbs):
                    k_max = min(inp.devices // d, max(widths) * inp.num_parts)
                    if k_max < min(widths):
                        continue
                    for same_node in (True, False):
                        fronts = pareto_fronts(inp, mi, widths, same_node, bool(recompute), m, k_max)
                        for (q, k), points in fronts.items():
                            if pipeline_in_one_node(k, inp.network.node_size) != same_node:
                                continue
                            for pt in points:
                                tpb = batch_time_s(pt[0], m, q, float(inp.network.allreduce_s(pt[1], d, k)))
                                if tpb < best_time:
                                    best_time, best_plan = tpb, Plan(mbs, bool(recompute), d, _stages(pt))
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


def brute_force(inp: PlacementInput, recompute_options=(False, True), mbs_options=None, per_stage_tp: bool = True) -> PlanCost | None:
    """The cheapest feasible plan over every (stage split, TP widths, d, mbs, recompute)."""
    best = None
    for mi in _mbs_indices(inp, mbs_options):
        mbs = int(inp.mbs_values[mi])
        for widths in _width_sets(inp, mi, per_stage_tp):
            for bounds in _splits(inp.num_parts):
                for tps in itertools.product(widths, repeat=len(bounds)):
                    k_pipe = sum(tps)
                    for recompute in recompute_options:
                        for d, _ in _replicas(inp, mbs):
                            if d * k_pipe > inp.devices:
                                continue
                            plan = Plan(mbs, bool(recompute), d, tuple((a, b, t) for (a, b), t in zip(bounds, tps)))
                            cost = evaluate_plan(inp, plan)
                            if cost.feasible and (best is None or cost.time_per_batch_s < best.time_per_batch_s):
                                best = cost
    return best
