"""Numba kernels of the list scheduler (all @njit(cache=True) on numpy arrays): serial generation with
insertion, non-delay generation, forward-backward justification and Kahn's priority lists.

They make the same choices as the plain-Python scheduler in phaze/schedule/reference.py, tie for tie,
so a schedule does not depend on which one ran; the tests hold them equal and experiments/performance/bench_list_schedule.py
measures the ratio. Operators are described by the arrays of heuristic._ops: predecessors in CSR form,
the resource index, whether it holds it, whether its mode is a choice, its fixed mode, both durations.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

EARLIEST_FINISH, FASTEST, LEAST_WORK = 0, 1, 2
"""Mode rules by code, in heuristic.MODE_RULES order."""


@njit(cache=True)
def _bisect_right(times: np.ndarray, length: int, t: float) -> int:
    lo, hi = 0, length
    while lo < hi:
        mid = (lo + hi) // 2
        if t < times[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _earliest(times, usage, length, capacity, est, dur, demand):
    """Earliest t >= est with at most capacity - demand cores in use on [t, t + dur) of one unit's profile."""
    limit = capacity - demand
    t = est
    k = _bisect_right(times, length, t) - 1
    while True:
        end = t + dur
        j = k
        while j < length and times[j] < end and usage[j] <= limit:
            j += 1
        if j == length or times[j] >= end:
            return t
        t, k = times[j + 1], j + 1  # the last segment is idle, so a busy one has an end


@njit(cache=True)
def _split(times, usage, length, t):
    """Make t a breakpoint of the profile; returns (its index, the new length)."""
    k = _bisect_right(times, length, t) - 1
    if times[k] != t:
        times[k + 2:length + 1] = times[k + 1:length].copy()
        usage[k + 2:length + 1] = usage[k + 1:length].copy()
        times[k + 1] = t
        usage[k + 1] = usage[k]
        return k + 1, length + 1
    return k, length


@njit(cache=True)
def serial_schedule(order, mode_rule, modes, has_modes, pred_ptr, pred_idx, resource, holds, choice, fixed_exclusive,
                    dur_single, dur_parallel, capacity):
    """Serial generation with insertion: operators in `order`, each at its earliest start on free cores.
    `modes` fixes every decision when `has_modes`, else `mode_rule` picks them. Returns (start, parallel, makespan)."""
    n = len(resource)
    n_res = len(capacity)
    times = np.zeros((n_res, 2 * n + 2))
    usage = np.zeros((n_res, 2 * n + 2), dtype=np.int64)
    length = np.ones(n_res, dtype=np.int64)
    start = np.zeros(n)
    finish = np.zeros(n)
    parallel = np.zeros(n, dtype=np.bool_)
    for i in order:
        est = 0.0
        for p in range(pred_ptr[i], pred_ptr[i + 1]):
            if p == pred_ptr[i] or finish[pred_idx[p]] > est:
                est = finish[pred_idx[p]]
        if not holds[i]:
            start[i], finish[i] = est, est + dur_single[i]
            continue
        r = resource[i]
        if not choice[i]:
            first, last = fixed_exclusive[i], fixed_exclusive[i]
        elif has_modes:
            first, last = modes[i], modes[i]
        else:
            first, last = False, True
        best_end, best_dur, best_work, best_par, best_s, best_demand = 0.0, 0.0, 0.0, False, 0.0, 0
        for option in range(2):
            par = first if option == 0 else last
            if option == 1 and last == first:
                break
            dur = dur_parallel[i] if par and choice[i] else dur_single[i]
            demand = capacity[r] if par else 1
            s = _earliest(times[r], usage[r], length[r], capacity[r], est, dur, demand)
            end, work = s + dur, dur * demand
            if option == 0:
                better = True
            elif mode_rule == EARLIEST_FINISH:
                better = end < best_end  # ties keep single mode (False sorts first)
            elif mode_rule == FASTEST:
                better = dur < best_dur
            else:
                better = work < best_work or (work == best_work and end < best_end)
            if better:
                best_end, best_dur, best_work, best_par, best_s, best_demand = end, dur, work, par, s, demand
        start[i], finish[i], parallel[i] = best_s, best_end, best_par
        a, length[r] = _split(times[r], usage[r], length[r], best_s)
        b, length[r] = _split(times[r], usage[r], length[r], best_end)
        for k in range(a, b):
            usage[r, k] += best_demand
    makespan = finish.max() if n else 0.0
    return start, parallel, makespan


@njit(cache=True)
def nondelay_schedule(key, pred_ptr, pred_idx, succ_ptr, succ_idx, resource, holds, choice, fixed_exclusive,
                      dur_single, dur_parallel, capacity):
    """Parallel generation (Kelley 1963): whenever cores free up, start the ready operators that fit now,
    smallest (key, id) first, each in its fastest mode that fits. Returns (start, parallel, makespan)."""
    n = len(resource)
    in_use = np.zeros(len(capacity), dtype=np.int64)
    waiting = pred_ptr[1:] - pred_ptr[:-1]
    ready = waiting == 0
    running = np.zeros(n, dtype=np.bool_)
    demand_of = np.zeros(n, dtype=np.int64)
    start, finish = np.zeros(n), np.zeros(n)
    parallel = np.zeros(n, dtype=np.bool_)
    t, done = 0.0, 0
    while done < n:
        cands = np.flatnonzero(ready)
        for i in cands[np.argsort(key[cands], kind="mergesort")]:
            r = resource[i]
            n_opt = 2 if choice[i] else 1
            best_dur, best_par, found = 0.0, False, False
            for option in range(n_opt):
                par = option == 1 or (not choice[i] and fixed_exclusive[i])
                dur = dur_parallel[i] if option == 1 else dur_single[i]
                if holds[i] and in_use[r] + (capacity[r] if par else 1) > capacity[r]:
                    continue
                if not found or dur < best_dur or (dur == best_dur and best_par and not par):
                    best_dur, best_par, found = dur, par, True
            if not found:
                continue
            ready[i] = False
            running[i] = True
            start[i], finish[i], parallel[i] = t, t + best_dur, best_par
            demand_of[i] = (capacity[r] if best_par else 1) if holds[i] else 0
            in_use[r] += demand_of[i]
        t = np.inf
        for i in np.flatnonzero(running):
            t = min(t, finish[i])
        for i in np.flatnonzero(running & (finish <= t)):
            running[i] = False
            in_use[resource[i]] -= demand_of[i]
            done += 1
            for q in range(succ_ptr[i], succ_ptr[i + 1]):
                j = succ_idx[q]
                waiting[j] -= 1
                if waiting[j] == 0:
                    ready[j] = True
    makespan = finish.max() if n else 0.0
    return start, parallel, makespan


@njit(cache=True)
def justify(start, parallel, makespan, rounds, pred_ptr, pred_idx, resource, holds, choice, fixed_exclusive, dur_single,
            dur_parallel, capacity, m_pred_ptr, m_pred_idx, m_resource, m_holds, m_choice, m_fixed, m_single, m_parallel, m_capacity):
    """Forward-backward improvement (Li & Willis, EJOR 1992; Valls et al., EJOR 2005), modes kept: schedule
    backwards (on the mirrored problem, its arrays `m_*`) in order of decreasing finish, then forwards
    in order of the resulting starts; stops after `rounds` or when a round does not shorten the schedule."""
    n = len(resource)
    last = n - 1
    ids = np.arange(n)
    for _ in range(rounds):
        dur = np.where(choice & parallel, dur_parallel, dur_single)
        finish = start + dur
        back_order = ids[::-1].copy()  # sorted by (-finish, -start, -id): stable sorts, least significant key first
        back_order = back_order[np.argsort(-start[back_order], kind="mergesort")]
        back_order = back_order[np.argsort(-finish[back_order], kind="mergesort")]
        b_start, _, b_makespan = serial_schedule(last - back_order, EARLIEST_FINISH, parallel[::-1].copy(), True, m_pred_ptr,
                                                 m_pred_idx, m_resource, m_holds, m_choice, m_fixed, m_single, m_parallel, m_capacity)
        forward = b_makespan - (b_start[::-1] + dur)
        fwd_order = np.argsort(forward, kind="mergesort")
        c_start, c_parallel, c_makespan = serial_schedule(fwd_order, EARLIEST_FINISH, parallel, True, pred_ptr, pred_idx, resource,
                                                          holds, choice, fixed_exclusive, dur_single, dur_parallel, capacity)
        if c_makespan >= makespan:
            break
        start, parallel, makespan = c_start, c_parallel, c_makespan
    return start, parallel, makespan


@njit(cache=True)
def topological(key, pred_ptr, succ_ptr, succ_idx):
    """Kahn's algorithm taking the ready operator with the smallest (key, id) first."""
    n = len(key)
    waiting = pred_ptr[1:] - pred_ptr[:-1]
    ready = [(key[i], i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    order = np.empty(n, dtype=np.int64)
    k = 0
    while len(ready):
        _, i = heapq.heappop(ready)
        order[k] = i
        k += 1
        for q in range(succ_ptr[i], succ_ptr[i + 1]):
            j = succ_idx[q]
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (key[j], j))
    return order
