"""Schedule one layer direction: cache, bounds, list schedule, the mode search, and the MILP only when they leave a gap;
the split bound then proves what the MILP leaves open."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from phaze.placement.kept import Kept
from phaze.schedule.backends import SolveParams, SolveStatus, solve_milp
from phaze.schedule.bounds import problem_lower_bound_s
from phaze.schedule.cache import ScheduleCache, bound_key, list_key, problem_key, store_for, stored_bound
from phaze.schedule.checker import check_times
from phaze.schedule.heuristic import ListSchedule, best_list_schedule, best_with_modes
from phaze.schedule.ilp import build_ilp, decode, overloads
from phaze.schedule.instance import LayerProblem
from phaze.schedule.modes import FixedModes, ModeSearch
from phaze.schedule.result import LayerSchedule
from phaze.schedule.split import split_bound_s as split_with
from phaze.schema import ScheduleCfg

LISTED_KEPT = 4096
"""List schedules kept in this process (listed_for). A point's vector cores, buffer or HBM leave many of its layers'
operators as another point's: the headline search (llama2 x phaze_grid) list-schedules 661 distinct layers in 2,550."""

_listed = Kept(LISTED_KEPT)

GAP_ROUND_OFF = 1e-9
"""Relative margin by which the mode search aims inside the gap, so that a bound it proves there closes the gap
whatever the round-off in best * (1 - gap)."""

MODE_ROUNDS = 2
"""Rounds of list-scheduling the mode search's open assignments, each at the gap below the best schedule so far. On
the 20 open Llama-2-7B backward layers of experiments/performance/bench_mode_search.py the first round shortened 7 by 2.9-3.7%
and a second never found more; it enumerates the assignments again at the shorter schedule's gap, fewer of them,
so that more modes are fixed in the MILP."""


SPLIT_WORK_LIMIT = 1.0
"""Solver effort per side of the split bound (Gurobi work units; seconds with HiGHS): on the headline run's layers a
side's MILP closes within SPLIT_MIP_GAP in less, and 2 units gave the same bounds (scratch measurement, 2026-11-29)."""

SPLIT_MIP_GAP = 1e-3
"""Relative gap at which a side's MILP stops: its bound is what the split bound adds, so it aims well inside the
layer's own schedule.mip_gap."""

BOUND_REL_TOL = 1e-9
"""Round-off allowed above the largest value a cached bound can take (split_ceiling_s) before its entry is damaged."""

SPLIT_KEPT = 1024
"""Split bounds kept in this process: a search asks for one layer's bound to prune with (phaze.pipeline), then, if the
point is not pruned, to prove its MILP's schedule."""

_split = Kept(SPLIT_KEPT)


def _gap(makespan_s: float, bound_s: float) -> float:
    return 0.0 if makespan_s <= 0 else max(0.0, (makespan_s - bound_s) / makespan_s)


def _from_list(problem: LayerProblem, upper: ListSchedule, bound_s: float, status: str, backend: str, t0: float, fallback: str = "") -> LayerSchedule:
    bound_s = min(bound_s, upper.makespan_s)
    return LayerSchedule(
        makespan_s=upper.makespan_s, start_s=upper.start_s, parallel=problem.modes(upper.parallel), backend=backend,
        status=status, mip_gap=_gap(upper.makespan_s, bound_s), solve_s=time.perf_counter() - t0, bound_s=bound_s,
        fallback=fallback,
    )


def listed_for(problem: LayerProblem, store: ScheduleCache | None = None) -> LayerSchedule:
    """heuristic_for, kept by the problem's content and core counts: a search meets the same layer on many points. With a
    schedule cache also on disk, so that other workers and later runs on the same cache list-schedule it once."""
    key = list_key(problem)
    return _listed.get(key, lambda: _stored_list(problem, store, key))


def _stored_list(problem: LayerProblem, store: ScheduleCache | None, key: str) -> LayerSchedule:
    """The list schedule read back from `store` (which checks it against the problem), else computed and written there."""
    hit = store.load(key, problem, 0.0) if store is not None else None
    if hit is not None:
        return hit
    listed = heuristic_for(problem)
    if store is not None:
        store.save(key, listed, 0.0)
    return listed


def heuristic_for(problem: LayerProblem) -> LayerSchedule:
    t0 = time.perf_counter()
    upper = best_list_schedule(problem)
    lower = problem_lower_bound_s(problem)
    status = "optimal" if upper.makespan_s <= lower else "heuristic"
    return _from_list(problem, upper, lower, status, "heuristic", t0)


@dataclass(frozen=True, eq=False)
class Prepared:
    """A layer's schedule up to its MILP: the best list (or mode-search) schedule, the lower bound proven so far (a
    valid bound on the optimal makespan: what a search may prune with before any MILP), the modes the mode search
    fixed, and the seconds it took."""

    problem: LayerProblem
    best: ListSchedule
    lower_s: float
    modes: FixedModes | None
    solve_s: float


def split_bound_s(problem: LayerProblem, cfg: ScheduleCfg) -> float:
    """phaze.schedule.split's bound (s), each side bounded by its own list schedule, closed-form bound and MILP (no mode
    search, no cache; SPLIT_WORK_LIMIT, SPLIT_MIP_GAP), kept by the problem's content and the backend, in this process
    and in cfg's schedule cache (a later run on the same layer, a what-if, reads it back)."""

    def side_bound_s(part: LayerProblem) -> float:
        start = prepare_problem(part, side_cfg)
        if isinstance(start, LayerSchedule):
            return start.bound_s
        return milp_schedule(part, side_cfg, start.best, start.lower_s, time.perf_counter()).bound_s

    side_cfg = replace(cfg, work_limit=SPLIT_WORK_LIMIT, mip_gap=SPLIT_MIP_GAP, mode_search=False, cache=False)
    return _split.get(_split_key(problem, cfg), lambda: _stored_split(problem, cfg, lambda: split_with(problem, side_bound_s)))


def _split_key(problem: LayerProblem, cfg: ScheduleCfg) -> tuple:
    return problem_key(problem, SPLIT_MIP_GAP), cfg.backend


def _stored_split(problem: LayerProblem, cfg: ScheduleCfg, compute=None) -> float | None:
    """The split bound read back from cfg's schedule cache (where it lies between 0 and split_ceiling_s, all it can
    be), else compute() written there; None where neither is given."""
    key = bound_key(problem, "split", gap=SPLIT_MIP_GAP, work=SPLIT_WORK_LIMIT, backend=cfg.backend)
    return stored_bound(store_for(cfg), key, 0.0, split_ceiling_s(problem) * (1.0 + BOUND_REL_TOL), compute)


def split_ceiling_s(problem: LayerProblem) -> float:
    """The most split_bound_s can prove (s): the same split with each side at its list schedule, which no side's bound
    exceeds. List schedules only (milliseconds): where it cannot prune or close a gap, the sides' MILPs are spared."""
    return split_with(problem, lambda part: best_list_schedule(part).makespan_s)


def certified(problem: LayerProblem, cfg: ScheduleCfg, schedule: LayerSchedule) -> LayerSchedule:
    """A MILP's schedule left open (status time_limit) with its bound raised to the split bound: the same schedule,
    "optimal" where that proves it within cfg.mip_gap; the split's seconds count in its solve_s. The split is not
    computed (unless a search already did) where even split_ceiling_s could not close the gap."""
    if schedule.status != "time_limit":
        return schedule
    t0 = time.perf_counter()
    split_s = _split.find(_split_key(problem, cfg))
    if split_s is None:
        split_s = _stored_split(problem, cfg)
    if split_s is None and _gap(schedule.makespan_s, split_ceiling_s(problem)) <= cfg.mip_gap:
        split_s = split_bound_s(problem, cfg)
    bound = min(max(schedule.bound_s, split_s or 0.0), schedule.makespan_s)
    gap = _gap(schedule.makespan_s, bound)
    return replace(schedule, bound_s=bound, mip_gap=gap, status="optimal" if gap <= cfg.mip_gap else "time_limit",
                   solve_s=schedule.solve_s + time.perf_counter() - t0)


def prepare_problem(problem: LayerProblem, cfg: ScheduleCfg) -> LayerSchedule | Prepared:
    """The schedule when the list schedule, then the mode search, meet the lower bound within cfg.mip_gap (the mode
    search runs only where the list schedule leaves the gap), else what the MILP starts from."""
    t0 = time.perf_counter()
    lower = problem_lower_bound_s(problem)
    best = best_list_schedule(problem)
    if _gap(best.makespan_s, lower) <= cfg.mip_gap:
        return _from_list(problem, best, lower, "optimal", "heuristic", t0)
    modes = None
    if uses_modes(cfg):
        best, lower, modes = mode_search(problem, cfg.mip_gap, best, lower)
        if _gap(best.makespan_s, lower) <= cfg.mip_gap:
            return _from_list(problem, best, lower, "optimal", "heuristic", t0)
    return Prepared(problem, best, lower, modes, time.perf_counter() - t0)


def solve_problem(problem: LayerProblem, cfg: ScheduleCfg, prepared: Prepared | None = None, stop_s: float | None = None) -> LayerSchedule:
    """Optimal schedule within cfg.mip_gap, or the best one the MILP finds within cfg.time_limit_s and
    cfg.work_limit; the mode search runs when the list schedule and the lower bound are further apart than the
    gap, the MILP when it leaves them so. `prepared`: prepare_problem's answer for this problem, not computed again.
    `stop_s`: see milp_schedule."""
    start = prepared or prepare_problem(problem, cfg)
    if isinstance(start, LayerSchedule):
        return start
    found = milp_schedule(problem, cfg, start.best, start.lower_s, time.perf_counter() - start.solve_s, start.modes, stop_s)
    return certified(problem, cfg, found)


def mode_bound_s(problem: LayerProblem, lower_s: float, upper_s: float, store: ScheduleCache | None = None) -> float:
    """The largest makespan in [lower_s, upper_s] (s) that the mode search's refutation proves no schedule of the layer
    meets (lower_s when it proves none): a bound to prune with that leaves the layer's schedule, and its MILP, as they are.
    With a schedule cache, read back from it, or written there."""
    key = bound_key(problem, "modes", lower=float(lower_s), upper=float(upper_s))
    return stored_bound(store, key, lower_s, upper_s, lambda: ModeSearch(problem).lower_bound_s(lower_s, upper_s))


def uses_modes(cfg: ScheduleCfg) -> bool:
    """schedule.mode_search, null read as on (phaze.inputs.execution_model resolves it for a job)."""
    return cfg.mode_search is not False


def mode_search(problem: LayerProblem, mip_gap: float, best: ListSchedule, lower_s: float) -> tuple[ListSchedule, float, FixedModes | None]:
    """A shorter schedule from the tensor-unit mode assignments that the refutation leaves open at the gap
    below `best` (only they can beat it by the gap), the largest makespan it refutes as the bound, and the
    modes every open assignment shares (None where the enumeration stopped at a limit)."""
    search = ModeSearch(problem)
    for _ in range(MODE_ROUNDS):
        limit_s = best.makespan_s * (1.0 - mip_gap) * (1.0 + GAP_ROUND_OFF)
        assignments, complete = search.leaves(limit_s)
        if not complete:  # so many assignments stay open that the modes hardly matter: the list scheduler's stand
            break
        better = best_with_modes(problem, assignments, best)
        if better.makespan_s >= best.makespan_s:
            break
        best = better
    modes = search.common_modes(assignments, limit_s) if complete and assignments else None
    return best, max(lower_s, search.lower_bound_s(lower_s, best.makespan_s)), modes


def milp_schedule(problem: LayerProblem, cfg: ScheduleCfg, best: ListSchedule, lower: float, t0: float,
                  modes: FixedModes | None = None, stop_s: float | None = None) -> LayerSchedule:
    """The MILP rounds from the list schedule `best` and the bound `lower` (s), at least one round.

    Each round solves the MILP with the capacity cuts found so far; a solution that overloads a
    unit adds cuts for the next round. Every round's bound is valid and every solution is replayed
    into a feasible schedule, so the loop stops as soon as the two are within the gap. With `modes`
    the model keeps them, so its bound holds for the schedules that keep them and, capped at
    modes.below_s, for all; a model with no solution then proves that cap.
    With `stop_s` the solver stops as soon as its bound shows no schedule shorter than stop_s (a search asks only
    that: phaze.pipeline.LayerLatencies.best); the result is then "refuted", its bound_s at least stop_s and its
    schedule only the best found so far. A solve whose bound never gets there ends as it would without stop_s.
    """
    if best.makespan_s <= 0.0:  # nothing takes time (and the model is scaled by the makespan)
        return _from_list(problem, best, lower, "optimal", "heuristic", t0)
    deadline = time.perf_counter() + cfg.time_limit_s  # the MILP's own budget: a cold Numba cache can spend seconds before it
    work_left = cfg.work_limit
    cliques: list = []
    backend, fallback, proven = "heuristic", "", False
    while not proven:
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or (work_left is not None and work_left <= 0):
            break
        model, layout, start = build_ilp(problem, best, lower, cliques, *((modes.parallel, modes.single) if modes else ()))
        params = SolveParams(mip_gap=cfg.mip_gap, time_limit_s=remaining, threads=cfg.threads, work_limit=work_left,
                             bound_stop=_bound_stop(stop_s, layout.scale_s, modes))
        result, note = solve_milp(model, cfg.backend, params, start)
        if work_left is not None:
            work_left -= result.work
        backend, fallback = result.backend, fallback or note
        if result.status == SolveStatus.INFEASIBLE and modes is not None:  # nothing as short as best keeps the modes
            lower = max(lower, modes.below_s)
            break
        if result.status in (SolveStatus.INFEASIBLE, SolveStatus.ERROR):
            raise RuntimeError(f"{result.backend} failed on a layer MILP that has a feasible schedule: {result.status.value} {result.message}")
        lower = max(lower, min(result.bound * layout.scale_s, modes.below_s if modes else np.inf))
        if result.status == SolveStatus.BOUND_STOP:
            return _from_list(problem, best, lower, "refuted", backend, t0, fallback)
        if not result.has_solution:
            break
        replayed = decode(problem, layout, result.x)
        if replayed.makespan_s < best.makespan_s:
            best = replayed
        found = overloads(problem, layout, result.x)
        if result.status != SolveStatus.OPTIMAL:
            break
        proven = not found
        cliques += found
        proven = proven or _gap(best.makespan_s, lower) <= cfg.mip_gap
    status = "optimal" if proven or _gap(best.makespan_s, lower) <= cfg.mip_gap else "time_limit"
    return _from_list(problem, best, lower, status, backend, t0, fallback)


def _bound_stop(stop_s: float | None, scale_s: float, modes: FixedModes | None) -> float | None:
    """stop_s in the model's units; None where the model's bound could not prove it (it holds for all schedules only
    up to modes.below_s)."""
    if stop_s is None or (modes is not None and stop_s > modes.below_s):
        return None
    return stop_s / scale_s


def _settings(cfg: ScheduleCfg | None) -> ScheduleCfg:
    """The settings given, or the defaults (ScheduleCfg checks its own fields when built)."""
    return cfg if cfg is not None else ScheduleCfg()


def _cached(problem: LayerProblem, cfg: ScheduleCfg) -> tuple[LayerSchedule | None, object, str]:
    """(the cached schedule or None, the cache, its key) for this problem under cfg."""
    store = store_for(cfg)
    if store is None:
        return None, None, ""
    key = problem_key(problem, cfg.mip_gap, uses_modes(cfg))
    return store.load(key, problem, cfg.time_limit_s, cfg.work_limit), store, key


def _checked(problem: LayerProblem, schedule: LayerSchedule, cfg: ScheduleCfg, store, key: str) -> LayerSchedule:
    check_times(problem, schedule.start_s, schedule.parallel, schedule.makespan_s)
    if store is not None:
        store.save(key, schedule, cfg.time_limit_s, cfg.work_limit)
    return schedule


def prepare_layer(graph, unit, single_s, parallel_s, n_tc: int, n_vc: int, cfg: ScheduleCfg | None = None) -> LayerSchedule | Prepared:
    """schedule_layer up to its MILP: the schedule when the cache holds it or the list schedule or the mode search
    proves it (checked and cached as schedule_layer would), else a Prepared whose lower_s bounds the makespan, to be
    passed back to schedule_layer."""
    cfg = _settings(cfg)
    problem = LayerProblem.build(graph, unit, single_s, parallel_s, n_tc, n_vc)
    hit, store, key = _cached(problem, cfg)
    if hit is not None:
        return hit
    start = prepare_problem(problem, cfg)
    return _checked(problem, start, cfg, store, key) if isinstance(start, LayerSchedule) else start


def schedule_layer(graph, unit, single_s, parallel_s, n_tc: int, n_vc: int, cfg: ScheduleCfg | None = None,
                   prepared: Prepared | None = None, stop_s: float | None = None) -> LayerSchedule:
    """Start time and mode of every operator of a view-free layer graph, minimising the makespan (from prepare_layer's
    `prepared` where given: the same schedule, without its list schedules and mode search again).

    With `stop_s`, a MILP may stop once it proves no schedule shorter than that (milp_schedule): a "refuted" result
    answers only that question and is not cached. The result is checked (precedence and capacity at every instant)
    before it is returned or cached.
    """
    cfg = _settings(cfg)
    problem = prepared.problem if prepared is not None else LayerProblem.build(graph, unit, single_s, parallel_s, n_tc, n_vc)
    hit, store, key = _cached(problem, cfg)
    if hit is not None:
        return hit
    schedule = solve_problem(problem, cfg, prepared, stop_s)
    return _checked(problem, schedule, cfg, None if schedule.status == "refuted" else store, key)
