"""The exact layer-scheduling MILP, written once as a solver-neutral matrix model, and its decoding.

Times are divided by the list schedule's makespan U, so the makespan T lies in [LB/U, 1] and solver
tolerances are relative to the layer's length. Only schedules no longer than U are sought, which
gives every operator a time window [head_i, U - tail_i] (heads and tails: longest paths of
fastest durations), fixes to parallel every operator whose single mode cannot fit its window, and
orders every same-unit pair whose windows do not overlap.

Variables: T; start t_i; mode y_i (1 = parallel over all cores of its unit) where that is still a
choice; order binaries for same-unit pairs that neither a dependency nor the windows order.
* Precedence (transitive reduction only): t_i + p_i <= t_j, p_i = d1_i + (dP_i - d1_i) y_i.
* Pairs that must not overlap (one-core units, the network, or either operator fixed to parallel,
  which holds every core): one orientation binary o_ij, i first or j first.
* Other pairs on a multi-core unit: x_ij = 1 forces i to end before j starts, with big-M
  M_ij = (U - tail_i) - head_j, the most t_i + p_i - t_j can be in any schedule no longer than U.
  (PHAZE's M = min(sum L^P, sum L^1) can be too small: docs/phaze-reference.md §9 item 11.)
  An operator choosing parallel mode holds every core, so it is ordered against all its unordered
  partners: sum_j (x_ij + x_ji) >= |partners| y_i.
* Capacity of the single-mode operators: added lazily (`overloads` finds them in a solution) as
  clique cuts: of C + 1 operators that ran at once, some pair must be ordered,
  sum over the pairs of (x_ij + x_ji) >= 1. Without them the model is a relaxation (its bound is
  valid), and a solution that respects the capacity is optimal. Only operators in the C-core of the
  "may overlap" graph get order variables for this: an operator that may overlap fewer than C
  others is never in an overloaded set, and every member of one overlaps at least C others.
  Nothing is needed when C is at least the unit's antichain width.
* Valid cuts per unit, from each operator's share of it (dP_i in parallel mode, d1_i / min(C, width)
  in single mode: at most that many single-mode operators run at once): T >= the sum of the shares;
  and for every operator k, whatever runs on the unit after k ends fits between k's end and T,
  and whatever runs before k starts fits between the earliest head and k's start.

The solution is decoded by list-scheduling the chosen modes in the order of the solver's starts, so
the returned times are exact sums of latencies, not the solver's values within its tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.schedule.heuristic import ListSchedule, topological, list_schedule
from phaze.schedule.instance import RESOURCES, LayerProblem
from phaze.schedule.problem import MilpBuilder, MilpModel

WINDOW_FIX_TOL = 1e-9
"""Slack (fraction of U) before a time window is trusted to forbid an order or a mode."""

OVERLAP_TOL = 1e-5
"""Overlap (fraction of U) below which two operators of a solution count as ordered: the solvers'
integrality tolerance (1e-5) times a big-M of at most 1 allows that much."""

WINDOW_ORDER_TOL = 1e-12
"""Round-off (fraction of U) under which two windows count as disjoint (the pair is then ordered)."""


@dataclass(frozen=True, eq=False)
class IlpLayout:
    """Where each decision lives in the model's columns."""

    scale_s: float
    col_T: int
    col_t: np.ndarray
    col_y: np.ndarray
    """-1 where the operator has no mode choice left."""
    forced_parallel: np.ndarray
    """Choice operators whose single mode cannot fit in a schedule no longer than U."""
    o_i: np.ndarray
    o_j: np.ndarray
    col_o: np.ndarray
    """Orientation of must-order pairs: 1 = i first."""
    x_i: np.ndarray
    x_j: np.ndarray
    col_xij: np.ndarray
    col_xji: np.ndarray
    capacity: np.ndarray
    """Per operator: cores of its unit when single-mode overloads are possible (C below the
    unit's width and the operator in its C-core), else 0."""


def _k_core(adjacent: np.ndarray, k: int) -> np.ndarray:
    """Mask of the largest vertex set in which every vertex has at least k neighbours."""
    alive = np.ones(len(adjacent), dtype=bool)
    while True:
        degree = adjacent[:, alive].sum(axis=1)
        drop = alive & (degree < k)
        if not drop.any():
            return alive
        alive &= ~drop


def _single_row(b: MilpBuilder, cols, coefs, lo, hi) -> None:
    cols = np.asarray(cols, dtype=np.int64)
    b.add_sum_rows(np.zeros(len(cols), dtype=np.int64), cols, np.asarray(coefs, dtype=np.float64), lo, hi)


def build_ilp(problem: LayerProblem, upper: ListSchedule, lower_s: float, cliques: list[np.ndarray] = (),
              fixed_parallel: np.ndarray | None = None, fixed_single: np.ndarray | None = None) -> tuple[MilpModel, IlpLayout, np.ndarray]:
    """The MILP for `problem` given a feasible schedule `upper` and the capacity cuts found so far
    (`cliques`: sets of C + 1 operators of one unit); returns (model, layout, warm start). `fixed_parallel` and
    `fixed_single` (masks of choice operators) fix modes: the model then covers only schedules that keep them."""
    scale = upper.makespan_s
    d1 = problem.dur_single / scale
    dp = problem.dur_parallel / scale
    dmin = problem.dur_min / scale
    head = problem.head_s / scale
    tail = problem.tail_s / scale
    latest_finish = 1.0 - tail
    latest_start = np.maximum(latest_finish - dmin, head)
    forced = problem.choice & (head + d1 + tail > 1.0 + WINDOW_FIX_TOL)
    if fixed_parallel is not None:
        forced |= problem.choice & fixed_parallel
    choice = problem.choice & ~forced
    if fixed_single is not None:
        choice &= ~fixed_single
    exclusive = problem.fixed_exclusive | forced
    base = np.where(forced, dp, d1)
    dy = np.where(choice, dp - d1, 0.0)
    b = MilpBuilder()

    col_T = int(b.add_cols(min(lower_s / scale, 1.0), 1.0, cost=1.0)[0])
    col_t = b.add_cols(head, latest_start)
    col_y = np.full(problem.n, -1, dtype=np.int64)
    col_y[choice] = b.add_cols(np.zeros(int(choice.sum())), 1.0, integer=True)

    src, dst = problem.reduced_edges
    b.add_rows([(col_t[src], 1.0), (col_t[dst], -1.0), (col_y[src], dy[src])], -np.inf, -base[src])
    sk = problem.sinks
    b.add_rows([(col_t[sk], 1.0), (col_T, -1.0), (col_y[sk], dy[sk])], -np.inf, -base[sk])

    def ends_before(i, j, col, sign):
        """Rows t_i + p_i - t_j <= M (1 - v) (sign +1) or <= M v (sign -1) for order variable v."""
        m = latest_finish[i] - head[j]
        rhs = m - base[i] if sign > 0 else -base[i]
        b.add_rows([(col_t[i], 1.0), (col_t[j], -1.0), (col_y[i], dy[i]), (col, sign * m)], -np.inf, rhs)

    o_parts, x_parts = [], []
    capacity = np.zeros(problem.n, dtype=np.int64)
    for r, cap in enumerate(problem.capacity.tolist()):
        ops = np.flatnonzero(problem.holds & (problem.resource == r))
        if not len(ops):
            continue
        width = int(problem.width[r])
        if cap > 1 and choice[ops].any():
            # Each operator's share of the unit: the unit cannot be more than fully shared.
            c_eff = float(min(cap, max(width, 1)))
            fixed = ops[~choice[ops]]
            ch = ops[choice[ops]]
            const = np.where(exclusive[fixed], dp[fixed], d1[fixed] / c_eff).sum() + (d1[ch] / c_eff).sum()
            _single_row(b, np.append(col_y[ch], col_T), np.append(dp[ch] - d1[ch] / c_eff, -1.0), -np.inf, -const)
        if len(ops) < 2:
            continue
        a, c = np.triu_indices(len(ops), k=1)
        I, J = ops[a], ops[c]
        order_ij = latest_finish[I] <= head[J] + WINDOW_ORDER_TOL
        order_ji = latest_finish[J] <= head[I] + WINDOW_ORDER_TOL
        free = ~problem.comparable[I, J] & ~order_ij & ~order_ji
        can_ij = head[I] + dmin[I] <= latest_start[J] + WINDOW_FIX_TOL
        can_ji = head[J] + dmin[J] <= latest_start[I] + WINDOW_FIX_TOL
        must = free & ((cap == 1) | exclusive[I] | exclusive[J])
        if must.any():
            oi, oj = I[must], J[must]
            lo = np.where(can_ij[must] & ~can_ji[must], 1.0, 0.0)
            hi = np.where(can_ji[must] & ~can_ij[must], 0.0, 1.0)
            o = b.add_cols(lo, hi, integer=True)
            ends_before(oi, oj, o, +1)
            ends_before(oj, oi, o, -1)
            o_parts.append((oi, oj, o))
        if cap == 1:
            _sequence_cuts(b, problem, ops, cap, width, col_t, col_T, col_y, dy, base, d1, dp, head, choice, exclusive, o_parts[-1] if must.any() else None, None)
            continue
        # Pairs that may overlap when both run single-mode.
        single_ok = ~exclusive[ops]
        in_core = np.zeros(len(ops), dtype=bool)
        if width > cap:
            overlap = np.zeros((len(ops), len(ops)), dtype=bool)
            overlap[a[free], c[free]] = True
            overlap |= overlap.T
            members = np.flatnonzero(single_ok)
            in_core[members] = _k_core(overlap[np.ix_(members, members)], cap)
        optional = free & ~must & (choice[I] | choice[J] | (in_core[a] & in_core[c]))
        xi, xj = I[optional], J[optional]
        x_ij = b.add_cols(np.zeros(len(xi)), can_ij[optional].astype(float), integer=True)
        x_ji = b.add_cols(np.zeros(len(xi)), can_ji[optional].astype(float), integer=True)
        ends_before(xi, xj, x_ij, +1)
        ends_before(xj, xi, x_ji, +1)
        x_parts.append((xi, xj, x_ij, x_ji))
        for op in ops[choice[ops]].tolist():
            mine = (xi == op) | (xj == op)
            k = int(mine.sum())
            if k:
                _single_row(b, np.concatenate([x_ij[mine], x_ji[mine], [col_y[op]]]), np.append(np.ones(2 * k), -k), 0.0, np.inf)
        _sequence_cuts(b, problem, ops, cap, width, col_t, col_T, col_y, dy, base, d1, dp, head, choice, exclusive, o_parts[-1] if must.any() else None, (xi, xj, x_ij, x_ji))
        capacity[ops[in_core]] = cap

    pair_col = {}
    for xi, xj, x_ij, x_ji in x_parts:
        for i_, j_, cij, cji in zip(xi.tolist(), xj.tolist(), x_ij.tolist(), x_ji.tolist()):
            pair_col[(i_, j_)] = (cij, cji)
    for members in cliques:
        ids = sorted(int(v) for v in members)
        pairs = [(i_, j_) for a_, i_ in enumerate(ids) for j_ in ids[a_ + 1:]]
        if all(pr in pair_col for pr in pairs):  # else some pair is always ordered: the cut is void
            cols = [c for pr in pairs for c in pair_col[pr]]
            _single_row(b, cols, np.ones(len(cols)), 1.0, np.inf)

    cat = lambda parts, k: np.concatenate([p[k] for p in parts]).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)  # noqa: E731
    layout = IlpLayout(
        scale_s=scale, col_T=col_T, col_t=col_t, col_y=col_y, forced_parallel=forced,
        o_i=cat(o_parts, 0), o_j=cat(o_parts, 1), col_o=cat(o_parts, 2),
        x_i=cat(x_parts, 0), x_j=cat(x_parts, 1), col_xij=cat(x_parts, 2), col_xji=cat(x_parts, 3),
        capacity=capacity,
    )
    model = b.build()
    return model, layout, warm_start(problem, layout, upper, model)


def _sequence_cuts(b, problem, ops, cap, width, col_t, col_T, col_y, dy, base, d1, dp, head, choice, exclusive, orient, xs):
    """For each operator k of one unit: t_k + p_k + (shares of what runs after k) <= T and
    t_k >= earliest head + (shares of what runs before k); "after" and "before" are dependencies
    or order variables (an operator overlapping k counts in neither)."""
    c_eff = float(min(cap, max(width, 1)))
    share = np.where(choice, np.minimum(dp, d1 / c_eff), np.where(exclusive | (cap == 1), base, d1 / c_eff))
    later = {}  # (k, j) -> (column, +1: j after k when the column is 1 / -1: when it is 0)
    if orient is not None:
        for i_, j_, c_ in zip(*(a.tolist() for a in orient)):
            later[(i_, j_)] = (c_, +1)
            later[(j_, i_)] = (c_, -1)
    if xs is not None:
        for i_, j_, cij, cji in zip(*(a.tolist() for a in xs)):
            later[(i_, j_)] = (cij, +1)
            later[(j_, i_)] = (cji, +1)
    on = ops.tolist()
    for k in on:
        for side in ("after", "before"):
            if side == "after":
                fixed = [j for j in on if problem.reach[k, j]]
                maybe = [later[(k, j)] + (j,) for j in on if (k, j) in later]
                cols, coefs, const = [col_t[k], col_T], [1.0, -1.0], base[k]
                if col_y[k] >= 0:
                    cols.append(col_y[k]), coefs.append(dy[k])
            else:
                fixed = [j for j in on if problem.reach[j, k]]
                maybe = [later[(j, k)] + (j,) for j in on if (j, k) in later]
                cols, coefs = [col_t[k]], [-1.0]
                const = min(head[fixed + [j for _, _, j in maybe] + [k]])
            const += share[fixed].sum()
            for col, sign, j in maybe:
                cols.append(col), coefs.append(sign * share[j])
                const += share[j] if sign < 0 else 0.0
            if fixed or maybe:
                _single_row(b, cols, coefs, -np.inf, -const)


def warm_start(problem: LayerProblem, layout: IlpLayout, upper: ListSchedule, model: MilpModel) -> np.ndarray:
    """The list schedule as a full column vector (orders from its times)."""
    x = np.zeros(model.n_cols)
    scale = layout.scale_s
    parallel = upper.parallel & problem.choice
    start = upper.start_s  # orders compared in seconds, where the list scheduler's sums are exact
    finish = start + problem.durations(parallel)
    x[layout.col_T] = upper.makespan_s / scale
    x[layout.col_t] = start / scale
    has_y = layout.col_y >= 0
    x[layout.col_y[has_y]] = parallel[has_y]
    x[layout.col_o] = finish[layout.o_i] <= start[layout.o_j]
    x[layout.col_xij] = finish[layout.x_i] <= start[layout.x_j]
    x[layout.col_xji] = finish[layout.x_j] <= start[layout.x_i]
    return np.clip(x, model.col_lo, model.col_hi)


def overloads(problem: LayerProblem, layout: IlpLayout, x: np.ndarray, tol: float = OVERLAP_TOL) -> list[np.ndarray]:
    """Sets of C + 1 single-mode operators that a solution runs at once on a C-core unit
    (overlaps shorter than `tol`, a fraction of U, are solver tolerance and are ignored)."""
    mode = layout.forced_parallel.copy()
    has_y = layout.col_y >= 0
    mode[has_y] = x[layout.col_y[has_y]] > 0.5
    start = x[layout.col_t]
    finish = start + problem.durations(mode & problem.choice) / layout.scale_s
    found = {}
    for r in range(len(RESOURCES)):
        ops = np.flatnonzero((layout.capacity > 0) & (problem.resource == r) & ~mode)
        if not len(ops):
            continue
        cap = int(problem.capacity[r])
        probe = start[ops] + tol
        running = (start[ops][None, :] <= probe[:, None]) & (finish[ops][None, :] > probe[:, None] + tol)
        for row in running:
            if row.sum() > cap:
                members = tuple(sorted(ops[row][: cap + 1].tolist()))
                found[members] = np.array(members)
    return list(found.values())


def decode(problem: LayerProblem, layout: IlpLayout, x: np.ndarray) -> ListSchedule:
    """The solution's modes, replayed by list scheduling in the order of the solver's start times.

    Taking operators in the order of a feasible schedule's starts, the list scheduler starts each
    one no later than that schedule does (by induction over the order: its predecessors and the
    operators it waits for all came earlier), so the replay is never longer than the solver's
    makespan, and it is exactly feasible even where the solver's times are so only within tolerance.
    """
    decision = layout.forced_parallel.copy()
    has_y = layout.col_y >= 0
    decision[has_y] = x[layout.col_y[has_y]] > 0.5
    order = topological(problem, x[layout.col_t])
    return list_schedule(problem, order, "earliest_finish", decision)
