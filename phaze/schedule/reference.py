"""Plain-Python list scheduler, the reference the Numba one (heuristic.py, sgs.py) must equal tie for tie;
kept for tests and for experiments/performance/bench_list_schedule.py's speed ratio."""

from __future__ import annotations

import bisect
import heapq
import sys

import numpy as np

from phaze.schedule import heuristic
from phaze.schedule.heuristic import JUSTIFY_ROUNDS, MODE_RULES, ListSchedule
from phaze.schedule.instance import LayerProblem


class _Profile:
    """Cores in use on one unit over time: a step function, usage[k] on [time[k], time[k+1])."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.time = [0.0]
        self.usage = [0]

    def earliest(self, est: float, dur: float, demand: int) -> float:
        """Earliest t >= est with at most capacity - demand cores in use throughout [t, t + dur)."""
        limit = self.capacity - demand
        t = est
        k = bisect.bisect_right(self.time, t) - 1
        while True:
            end = t + dur
            j = k
            while j < len(self.time) and self.time[j] < end and self.usage[j] <= limit:
                j += 1
            if j == len(self.time) or self.time[j] >= end:
                return t
            t, k = self.time[j + 1], j + 1  # the last segment is idle, so a busy one has an end

    def _split(self, t: float) -> int:
        k = bisect.bisect_right(self.time, t) - 1
        if self.time[k] != t:
            self.time.insert(k + 1, t)
            self.usage.insert(k + 1, self.usage[k])
            k += 1
        return k

    def add(self, start: float, end: float, demand: int) -> None:
        a = self._split(start)
        b = self._split(end)
        for k in range(a, b):
            self.usage[k] += demand


def topological(problem: LayerProblem, key: np.ndarray) -> list[int]:
    """Kahn's algorithm taking the ready operator with the smallest (key, id) first."""
    n_preds = np.array([len(p) for p in problem.preds])
    succs = [[] for _ in range(problem.n)]
    for s, d in zip(problem.src.tolist(), problem.dst.tolist()):
        succs[s].append(d)
    ready = [(key[i], i) for i in range(problem.n) if n_preds[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            n_preds[j] -= 1
            if n_preds[j] == 0:
                heapq.heappush(ready, (key[j], j))
    return order


def list_schedule(problem: LayerProblem, order: list[int], mode_rule: str, modes: np.ndarray | None = None) -> ListSchedule:
    """Schedule operators one by one in `order`, each at its earliest start on free cores.

    `modes` (per op, True = parallel) fixes every decision; otherwise `mode_rule` picks them.
    """
    if mode_rule not in MODE_RULES:
        raise ValueError(f"unknown mode rule {mode_rule!r}; allowed: {MODE_RULES}")
    n = problem.n
    capacity = problem.capacity.tolist()
    profiles = [_Profile(c) for c in capacity]
    start = np.zeros(n)
    finish = np.zeros(n)
    parallel = np.zeros(n, dtype=bool)
    resource = problem.resource.tolist()
    holds = problem.holds.tolist()
    choice = problem.choice.tolist()
    exclusive_fixed = problem.fixed_exclusive.tolist()
    d_single = problem.dur_single.tolist()
    d_par = problem.dur_parallel.tolist()
    fixed = None if modes is None else modes.tolist()
    for i in order:
        preds = problem.preds[i]
        est = float(finish[preds].max()) if len(preds) else 0.0
        if not holds[i]:
            start[i], finish[i] = est, est + d_single[i]
            continue
        r = resource[i]
        if not choice[i]:
            candidates = (exclusive_fixed[i],)
        elif fixed is not None:
            candidates = (fixed[i],)
        else:
            candidates = (False, True)
        options = []
        for par in candidates:
            dur = d_par[i] if par and choice[i] else d_single[i]
            demand = capacity[r] if par else 1
            s = profiles[r].earliest(est, dur, demand)
            options.append((s + dur, dur, dur * demand, par, s, demand))
        if mode_rule == "earliest_finish":
            best = min(options, key=lambda o: (o[0], o[3]))
        elif mode_rule == "fastest":
            best = min(options, key=lambda o: (o[1], o[3]))
        else:
            best = min(options, key=lambda o: (o[2], o[0], o[3]))
        end, _, _, par, s, demand = best
        start[i], finish[i], parallel[i] = s, end, par
        profiles[r].add(s, end, demand)
    makespan = float(finish.max()) if n else 0.0
    return ListSchedule(start, parallel, makespan)


def nondelay_schedule(problem: LayerProblem, key: np.ndarray) -> ListSchedule:
    """Parallel schedule generation (Kelley 1963): whenever cores free up, start the ready operators
    that fit now, smallest `key` first, each in its fastest mode that fits; a unit never idles while
    a ready operator fits on it (serial generation may, leaving a gap no listed operator fills)."""
    n = problem.n
    capacity = problem.capacity.tolist()
    in_use = [0] * len(capacity)
    waiting = np.array([len(p) for p in problem.preds])
    succs = [[] for _ in range(n)]
    for a, b in zip(problem.src.tolist(), problem.dst.tolist()):
        succs[a].append(b)
    start, finish = np.zeros(n), np.zeros(n)
    parallel = np.zeros(n, dtype=bool)
    ready = [i for i in range(n) if waiting[i] == 0]
    running: list[tuple[float, int, int]] = []
    t, done = 0.0, 0
    while done < n:
        for i in sorted(ready, key=lambda i: (key[i], i)):
            r = int(problem.resource[i])
            options = [(problem.dur_single[i], False)]
            if problem.choice[i]:
                options.append((problem.dur_parallel[i], True))
            elif problem.fixed_exclusive[i]:
                options = [(problem.dur_single[i], True)]
            if problem.holds[i]:
                options = [(d, par) for d, par in options if in_use[r] + (capacity[r] if par else 1) <= capacity[r]]
            if not options:
                continue
            dur, par = min(options)
            ready.remove(i)
            start[i], finish[i], parallel[i] = t, t + dur, par
            demand = (capacity[r] if par else 1) if problem.holds[i] else 0
            if demand:
                in_use[r] += demand
            heapq.heappush(running, (t + dur, i, demand))
        t = running[0][0]
        while running and running[0][0] <= t:
            _, i, demand = heapq.heappop(running)
            in_use[int(problem.resource[i])] -= demand
            done += 1
            for j in succs[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    ready.append(j)
    return ListSchedule(start, parallel, float(finish.max()) if n else 0.0)


def justify(problem: LayerProblem, sched: ListSchedule, mirrored: LayerProblem) -> ListSchedule:
    """Forward-backward improvement (Li & Willis, EJOR 1992; Valls et al., EJOR 2005): schedule the
    operators backwards in order of decreasing finish, then forwards in order of the resulting
    starts, with the modes kept; neither pass can lengthen the schedule."""
    best = sched
    last = problem.n - 1
    for _ in range(JUSTIFY_ROUNDS):
        modes = best.parallel
        dur = problem.durations(modes & problem.choice)
        finish = best.start_s + dur
        back_order = sorted(range(problem.n), key=lambda i: (-finish[i], -best.start_s[i], -i))
        back = list_schedule(mirrored, [last - i for i in back_order], "earliest_finish", modes[::-1].copy())
        start = back.makespan_s - (back.start_s[::-1] + dur)
        fwd_order = sorted(range(problem.n), key=lambda i: (start[i], i))
        cand = list_schedule(problem, fwd_order, "earliest_finish", modes)
        if cand.makespan_s >= best.makespan_s:
            break
        best = cand
    return best


def best_list_schedule(problem: LayerProblem, seed: int = 0) -> ListSchedule:
    """heuristic.best_list_schedule on these kernels."""
    return heuristic.best_list_schedule(problem, seed, kernels=sys.modules[__name__])
