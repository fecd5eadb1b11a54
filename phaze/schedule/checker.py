"""Replay a schedule from the raw inputs and fail loudly on any precedence or capacity violation.

Independent of how the schedule was found: durations and core demands are recomputed from the
reported modes (tc/vc parallel: every core of the unit; single: one core; net: the one network
slot; none: nothing), and usage is evaluated at every operator's start, where it peaks.
"""

from __future__ import annotations

import numpy as np

from phaze.schedule.instance import NET_CAPACITY, RESOURCES, LayerProblem

CHECK_REL_TOL = 1e-9
"""Slack allowed on times, relative to the makespan: float round-off of sums of latencies."""


class ScheduleError(ValueError):
    """A schedule breaks a dependency, over-subscribes a resource or misreports its makespan."""


def check_times(problem: LayerProblem, start_s, parallel, makespan_s: float, rel_tol: float = CHECK_REL_TOL) -> None:
    """Raise ScheduleError unless (start_s, parallel) is feasible for `problem` with this makespan."""
    start = np.asarray(start_s, dtype=np.float64)
    par = np.asarray(parallel, dtype=bool)
    n = problem.n
    if start.shape != (n,) or par.shape != (n,):
        raise ScheduleError(f"schedule has {start.shape} starts and {par.shape} modes for {n} operators")
    compute = np.isin(problem.unit, ("tc", "vc"))
    dur = np.where(compute & par, problem.parallel_s, problem.single_s)
    if not np.isfinite(start).all() or not np.isfinite(dur).all():
        bad = np.flatnonzero(~np.isfinite(start) | ~np.isfinite(dur)).tolist()
        raise ScheduleError(f"operators {bad} have a non-finite start or run in a mode that cannot run")
    finish = start + dur
    tol = rel_tol * max(float(makespan_s), float(finish.max(initial=0.0)))
    if (start < -tol).any():
        raise ScheduleError(f"operators {np.flatnonzero(start < -tol).tolist()} start before time 0")
    late = start[problem.dst] < finish[problem.src] - tol
    if late.any():
        k = int(np.flatnonzero(late)[0])
        s, d = int(problem.src[k]), int(problem.dst[k])
        raise ScheduleError(f"dependency {s}->{d} broken: {d} starts at {start[d]:.9g} s before {s} ends at {finish[s]:.9g} s")
    if n and abs(float(makespan_s) - float(finish.max())) > tol:
        raise ScheduleError(f"reported makespan {makespan_s:.9g} s differs from the last finish {finish.max():.9g} s")
    capacity = {"tc": problem.n_tc, "vc": problem.n_vc, "net": NET_CAPACITY}
    for name in RESOURCES:
        on = np.flatnonzero((problem.unit == name) & (dur > 0))
        if not len(on):
            continue
        demand = np.where(par[on] & compute[on], capacity[name], 1)
        probe = start[on] + tol
        running = (start[on][None, :] <= probe[:, None]) & (finish[on][None, :] > probe[:, None])
        usage = running.astype(np.int64) @ demand
        worst = int(np.argmax(usage))
        if usage[worst] > capacity[name]:
            ops = on[running[worst]].tolist()
            raise ScheduleError(
                f"{name} over capacity at t={start[on[worst]]:.9g} s: operators {ops} use {int(usage[worst])} "
                f"of {capacity[name]} (parallel flags {par[ops].tolist()})"
            )


def check_schedule(graph, unit, single_s, parallel_s, n_tc: int, n_vc: int, schedule, rel_tol: float = CHECK_REL_TOL) -> None:
    """Raise ScheduleError (with the operators and times involved) unless `schedule` is feasible."""
    problem = LayerProblem.build(graph, unit, single_s, parallel_s, n_tc, n_vc)
    check_times(problem, schedule.start_s, schedule.parallel, schedule.makespan_s, rel_tol)
