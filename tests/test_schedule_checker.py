"""The schedule checker: solver schedules pass; broken dependencies, overloads and wrong makespans fail."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings

from phaze.schedule import ScheduleError, check_schedule, schedule_layer
from phaze.schema import ScheduleCfg
from tests.schedule_cases import cases

MS = 1e-3

# Three tensor-core operators on 2 cores: 0 -> 2, and 1 independent. Single 4 ms, parallel 2 ms.
EDGES = ([0], [2])
UNIT = ["tc", "tc", "tc"]
SINGLE_S = np.array([4.0, 4.0, 4.0]) * MS
PARALLEL_S = np.array([2.0, 2.0, 2.0]) * MS


def check(start_ms, parallel, makespan_ms, n_tc=2):
    sched = dataclasses.make_dataclass("S", ["start_s", "parallel", "makespan_s"])(
        np.array(start_ms, dtype=float) * MS, np.array(parallel, dtype=bool), makespan_ms * MS
    )
    check_schedule(EDGES, UNIT, SINGLE_S, PARALLEL_S, n_tc, 1, sched)


def test_feasible_hand_schedule_passes():
    # 0 and 1 side by side on one core each (0..4 ms), then 2 on both cores (4..6 ms).
    check([0, 0, 4], [False, False, True], 6)


def test_broken_dependency_raises():
    with pytest.raises(ScheduleError, match="dependency 0->2"):
        check([0, 0, 3], [False, False, True], 5)


def test_over_capacity_instant_raises():
    # 2 (parallel, both cores) would overlap 1 (single) during 4..6 ms.
    with pytest.raises(ScheduleError, match="tc over capacity"):
        check([0, 2, 4], [False, False, True], 6)


def test_three_single_ops_on_two_cores_raise():
    sched_edges = ([], [])
    sched = dataclasses.make_dataclass("S", ["start_s", "parallel", "makespan_s"])(np.zeros(3), np.zeros(3, dtype=bool), 4 * MS)
    with pytest.raises(ScheduleError, match="use 3 of 2"):
        check_schedule(sched_edges, UNIT, SINGLE_S, PARALLEL_S, 2, 1, sched)


def test_wrong_makespan_raises():
    with pytest.raises(ScheduleError, match="reported makespan"):
        check([0, 0, 4], [False, False, True], 7)


@pytest.mark.solver
@settings(max_examples=30, deadline=None)
@given(case=cases(max_ops=7, sparse=True))
def test_solver_schedules_pass_and_tampered_ones_fail(case):
    args = case.args()
    sched = schedule_layer(*args, cfg=ScheduleCfg(backend="highs", mip_gap=0.0, cache=False))
    check_schedule(*args, sched)
    finish = sched.start_s + np.where(sched.parallel & np.isin(case.unit, ("tc", "vc")), case.parallel_s, case.single_s)
    with pytest.raises(ScheduleError, match="reported makespan"):
        check_schedule(*args, dataclasses.replace(sched, makespan_s=sched.makespan_s * 1.5 + MS))
    timed = [(s, d) for s, d in case.edges if finish[s] > sched.start_s[s]]
    if timed:  # start a successor before its predecessor ends
        s, d = timed[0]
        start = sched.start_s.copy()
        start[d] = start[s]
        with pytest.raises(ScheduleError):
            check_schedule(*args, dataclasses.replace(sched, start_s=start, makespan_s=float(np.max(start + finish - sched.start_s))))
