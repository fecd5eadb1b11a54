"""The layer-scheduling MILP against brute force, the bounds around it, and the list-scheduling replay."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaze.schedule import lower_bound_s, schedule_layer
from phaze.schedule.backends.gurobi import unavailable_reason
from phaze.schedule.bounds import problem_lower_bound_s
from phaze.schedule.checker import check_times
from phaze.schedule import reference
from phaze.schedule.heuristic import MODE_RULES, best_list_schedule, blend_key, list_schedule, nondelay_schedule, topological
from phaze.schedule.instance import LayerProblem
from phaze.schedule.layer import milp_schedule
from phaze.schema import ScheduleCfg
from tests.schedule_cases import brute_force_makespan, cases

EXACT_REL = 1e-9
"""Makespans are sums of the same latencies; only float round-off may separate them."""

ROUND_OFF_S = 1e-12
"""Absolute slack on times (s): the cases' latencies are multiples of 0.25 ms."""

IDLE_STEP_S = 1e-4
"""Random idle gaps of 0, 1 or 2 steps are inserted before operators (off the cases' 0.25 ms grid)."""

BRUTE_FORCE_EXAMPLES = 150
"""Hypothesis examples per backend: random DAGs of up to 7 operators (the brute force is exponential)."""


def exact_cfg(backend: str) -> ScheduleCfg:
    return ScheduleCfg(backend=backend, mip_gap=0.0, time_limit_s=60.0, threads=1, cache=False)


def backend_for(name: str) -> str:
    """gurobi where a licence starts, else auto (which must then record its fallback to HiGHS)."""
    return name if name == "highs" or unavailable_reason() is None else "auto"


def problem_of(case) -> LayerProblem:
    return LayerProblem.build(*case.args())


@pytest.mark.solver
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["highs", "gurobi"])
@settings(max_examples=BRUTE_FORCE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_ops=7))
def test_milp_makespan_equals_brute_force(backend, case):
    problem = problem_of(case)
    chosen = backend_for(backend)
    t0 = time.perf_counter()
    upper = best_list_schedule(problem)
    result = milp_schedule(problem, exact_cfg(chosen), upper, problem_lower_bound_s(problem), t0)
    optimum = brute_force_makespan(case)
    assert result.status == "optimal"
    assert result.makespan_s == pytest.approx(optimum, rel=EXACT_REL, abs=ROUND_OFF_S)
    check_times(problem, result.start_s, result.parallel, result.makespan_s)
    if optimum == 0.0:  # nothing to scale the model by: the zero-length list schedule is returned
        assert result.backend == "heuristic"
    elif chosen == "auto":
        assert result.backend == "highs" and result.fallback.startswith("gurobi")
    else:
        assert result.backend == chosen and result.fallback == ""


@pytest.mark.solver
@settings(max_examples=BRUTE_FORCE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_ops=7, sparse=True))
def test_schedule_layer_is_optimal_on_wide_graphs(case):
    """The full path (list schedule, bound shortcut, MILP rounds with capacity cuts) on wide DAGs."""
    result = schedule_layer(*case.args(), cfg=exact_cfg("highs"))
    assert result.makespan_s == pytest.approx(brute_force_makespan(case), rel=EXACT_REL, abs=ROUND_OFF_S)


@pytest.mark.solver
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_ops=7))
def test_lower_bound_le_milp_le_heuristic(case):
    problem = problem_of(case)
    heuristic = best_list_schedule(problem).makespan_s
    exact = schedule_layer(*case.args(), cfg=exact_cfg("highs")).makespan_s
    slack = EXACT_REL * heuristic
    assert lower_bound_s(*case.args()) <= problem_lower_bound_s(problem) + slack
    assert problem_lower_bound_s(problem) <= exact + slack
    assert exact <= heuristic + slack


def random_feasible_schedule(problem: LayerProblem, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Starts and modes of a feasible schedule with random idle gaps (independent of phaze.schedule):
    operators in a random topological order, random modes, each at the first time at least a random
    delay after its dependencies when its unit has the cores free for its whole duration."""
    n = problem.n
    order = topological(problem, rng.random(n))
    parallel = rng.random(n) < 0.5
    dur = np.where(parallel, problem.parallel_s, problem.single_s)
    capacity = {"tc": problem.n_tc, "vc": problem.n_vc, "net": 1}
    start, placed = np.zeros(n), []
    for i in order:
        preds = problem.preds[i]
        est = (float(np.max(start[preds] + dur[preds])) if len(preds) else 0.0) + float(rng.integers(0, 3)) * IDLE_STEP_S
        unit = problem.unit[i]
        demand = capacity[unit] if parallel[i] and unit in ("tc", "vc") else 1
        same = [j for j in placed if problem.unit[j] == unit and dur[j] > 0]
        for t in sorted({est} | {start[j] + dur[j] for j in same if start[j] + dur[j] > est}):
            probes = [t] + [start[j] for j in same if t < start[j] < t + dur[i]]
            used = lambda p: sum(capacity[unit] if parallel[j] and unit in ("tc", "vc") else 1 for j in same if start[j] <= p < start[j] + dur[j])  # noqa: E731
            if unit == "none" or dur[i] == 0 or all(used(p) + demand <= capacity[unit] for p in probes):
                start[i] = t
                break
        placed.append(i)
    return start, parallel


@settings(max_examples=100, deadline=None)
@given(case=cases(max_ops=7, sparse=True), seed=st.integers(0, 2**31 - 1))
def test_replay_in_start_order_never_starts_later(case, seed):
    """What decode relies on: list scheduling in the order of a feasible schedule's starts, with its
    modes, starts every operator no later than that schedule (so never lengthens it)."""
    problem = problem_of(case)
    start, parallel = random_feasible_schedule(problem, np.random.default_rng(seed))
    dur = np.where(parallel & np.isin(problem.unit, ("tc", "vc")), problem.parallel_s, problem.single_s)
    check_times(problem, start, parallel, float(np.max(start + dur)))
    modes = parallel & problem.choice
    replay = list_schedule(problem, topological(problem, start), "earliest_finish", modes)
    check_times(problem, replay.start_s, problem.modes(replay.parallel), replay.makespan_s)
    assert (replay.start_s <= start + ROUND_OFF_S).all()
    assert replay.makespan_s <= float(np.max(start + problem.durations(modes))) + ROUND_OFF_S


@settings(max_examples=100, deadline=None)
@given(case=cases(max_ops=7))
def test_heuristic_schedule_is_feasible(case):
    problem = problem_of(case)
    sched = best_list_schedule(problem)
    check_times(problem, sched.start_s, problem.modes(sched.parallel), sched.makespan_s)


def same_schedule(a, b) -> bool:
    return a.makespan_s == b.makespan_s and np.array_equal(a.start_s, b.start_s) and np.array_equal(a.parallel, b.parallel)


@settings(max_examples=150, deadline=None)
@given(case=st.one_of(cases(max_ops=14, max_cores=4), cases(max_ops=14, max_cores=4, sparse=True)), seed=st.integers(0, 2**31 - 1))
def test_numba_list_scheduler_equals_the_plain_python_reference(case, seed):
    """Every generation scheme, the priority lists and the whole best-of search make the reference's choices,
    tie for tie (the cases' latencies sit on a 0.25 ms grid, so ties are common): bit-identical schedules."""
    problem = problem_of(case)
    key = np.random.default_rng(seed).random(problem.n)
    assert topological(problem, key).tolist() == reference.topological(problem, key)
    order = topological(problem, key)
    for rule in MODE_RULES:
        assert same_schedule(list_schedule(problem, order, rule), reference.list_schedule(problem, order.tolist(), rule))
    assert same_schedule(nondelay_schedule(problem, blend_key(problem, 0.5)), reference.nondelay_schedule(problem, blend_key(problem, 0.5)))
    assert same_schedule(best_list_schedule(problem, seed), reference.best_list_schedule(problem, seed))


def test_list_schedule_fills_an_earlier_gap():
    """Serial generation with insertion: a short operator goes into the idle gap before a long one.

    2 tensor cores; op 0 (1 ms) then op 1 (all cores, 1 ms) after it; op 2 (0.5 ms, one core) is
    independent and listed last: it fits beside op 0 at t=0, not after op 1.
    """
    problem = LayerProblem.build(([0], [1]), ["tc", "tc", "tc"], [1e-3, 4e-3, 0.5e-3], [1e-3, 1e-3, 0.5e-3], 2, 1)
    sched = list_schedule(problem, [0, 1, 2], "earliest_finish", np.array([False, True, False]))
    assert sched.start_s.tolist() == [0.0, 1e-3, 0.0]
    assert sched.makespan_s == pytest.approx(2e-3, rel=EXACT_REL)


@settings(max_examples=60, deadline=None)
@given(case=cases(max_ops=10, max_cores=4))
def test_kept_list_schedules_are_the_schedules_of_their_content(case):
    """listed_for keeps list schedules by content: the same problem built again gets the kept schedule, equal to a
    fresh one, and other core counts get their own."""
    from phaze.schedule.layer import heuristic_for, listed_for

    problem = problem_of(case)
    kept = listed_for(problem)
    again = listed_for(problem_of(case))
    fresh = heuristic_for(problem)
    assert again is kept and same_schedule(kept, fresh) and kept.status == fresh.status and kept.bound_s == fresh.bound_s
    graph, unit, single, parallel, n_tc, n_vc = case.args()
    wider = LayerProblem.build(graph, unit, single, parallel, n_tc + 1, n_vc)
    assert listed_for(wider) is not kept and same_schedule(listed_for(wider), heuristic_for(wider))


@settings(max_examples=20, deadline=None)
@given(case=cases(max_ops=8, max_cores=3))
def test_list_schedules_are_kept_in_the_schedule_cache_for_other_processes(case, tmp_path_factory):
    """With a schedule cache, listed_for writes the list schedule to disk; a process that has not kept it (here: the
    kept map cleared, a cache object of its own) reads it back, equal to a fresh one, and solved schedules of the same
    problem keep keys of their own."""
    from phaze.placement.kept import Kept
    from phaze.schedule import layer
    from phaze.schedule.cache import ScheduleCache, list_key, problem_key

    directory = tmp_path_factory.mktemp("schedules")
    problem = problem_of(case)
    kept = layer._listed
    try:
        layer._listed = Kept(layer.LISTED_KEPT)  # a process that has kept nothing yet
        first = layer.listed_for(problem, ScheduleCache(directory))
        assert not first.from_cache and len(list(directory.rglob("*.json"))) == 1
        layer._listed = Kept(layer.LISTED_KEPT)  # another one
        again = layer.listed_for(problem_of(case), ScheduleCache(directory))
    finally:
        layer._listed = kept
    fresh = layer.heuristic_for(problem)
    assert again.from_cache and same_schedule(again, fresh) and again.status == fresh.status and again.bound_s == fresh.bound_s
    assert list_key(problem) not in (problem_key(problem, 0.0), problem_key(problem, 0.0, True))


def test_the_schedule_cache_keeps_a_bounded_copy_and_reads_the_rest_back(tmp_path, monkeypatch):
    """Beyond SCHEDULES_KEPT entries a ScheduleCache drops its in-process copy of the least recently used one, whose file
    it still serves."""
    from phaze.schedule import cache
    from phaze.schedule.layer import heuristic_for

    monkeypatch.setattr(cache, "SCHEDULES_KEPT", 2)
    store = cache.ScheduleCache(tmp_path)
    problems = [LayerProblem.build(([0], [1]), ["tc", "vc"], [1e-3 * (k + 1), 1e-3], [1e-3, 1e-3], 1, 1) for k in range(3)]
    for p in problems:
        store.save(cache.list_key(p), heuristic_for(p), 0.0)
    assert store._memory.find(cache.list_key(problems[0])) is None
    again = store.load(cache.list_key(problems[0]), problems[0], 0.0)
    assert again.from_cache and same_schedule(again, heuristic_for(problems[0]))
