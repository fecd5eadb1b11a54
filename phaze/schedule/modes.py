"""Refuting a layer makespan over the tensor unit's mode decisions (destructive lower bound).

A makespan T is refuted when no schedule of the layer fits in T. For one set of mode decisions
(`par`, `sing`: choice operators fixed to parallel or to single mode; the rest free) these tests
refute it, each valid for every schedule that respects the decisions:
* heads and tails: an operator starts no earlier than any ancestor's head + duration + the shares,
  on the busiest unit, of the operators between them (bounds.energetic_heads_tails_s, with the
  fixed durations); T < head + duration + tail refutes;
* per unit and set S = {its operators with head >= a}, taken by decreasing tail: a + work(S) + the
  smallest tail > T refutes, where work(S) is the least unit time S needs: the sum of its shares on
  the network; on a multi-core unit, parallel mode holds every core, so it adds its duration, and
  single-mode operators share the unit with each other only, so the time they hold it is at least
  the longest single duration among them, the sum of their shares d1 / k (k: bounds.concurrency)
  and, on the tensor unit, the longest dependency chain of them; a relaxation minimised over that
  longest duration L holds whatever the free operators choose (_single_time_refutes);
* propagation: a free operator whose single duration cannot fit head + d1 + tail <= T runs parallel.
Branching on the free tensor-unit choices (longest single duration first, parallel first) until
every one is decided or refuted gives the assignments left (leaves): none left means T is refuted.
A makespan between the refuted T and the best schedule is the bound; the leaves are mode
assignments worth list-scheduling, since only they can beat T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from phaze.schedule.bounds import concurrency
from phaze.schedule.instance import TENSOR, LayerProblem

REFUTE_TOL = 1e-9
"""Relative margin a bound must clear before it refutes T (round-off in the sums of durations)."""

MAX_NODES = 4000
"""Branching nodes one enumeration may visit before it gives up (T is then not refuted). On Llama-2-7B backward
layers of 60 random phaze_grid points, the 19 of 20 open ones that finish take at most 1,941 nodes (0.5 s); the one
that does not has 2 tensor cores, where hardly any assignment is refuted."""

MAX_LEAVES = 256
"""Open assignments list-scheduled per round (the first in branching order, most parallel first); on the same
layers every shorter schedule came from one of the first 64."""

LAMBDAS = np.linspace(0.0, 1.0, 9)
"""Weights of the single-time relaxation tried per set (_single_time_refutes): each gives a valid bound (the exact
relaxation is the largest over all weights in [0, 1]); nine evenly spaced ones keep the test cheap."""

BOUND_REL_TOL = 1e-3
"""Relative width at which the bisection for the largest refuted makespan stops."""


@njit(cache=True)
def _heads_tails(reach, reach_f, resource, share, dur):
    """Energetic heads and tails (s) for the given shares and durations (operators in topological order)."""
    n = len(dur)
    before = np.zeros(n)
    after = np.zeros(n)
    between = np.zeros((n, n))
    for r in range(3):
        on_r = np.where(resource == r, share, 0.0)
        between = np.maximum(between, np.dot(reach_f * on_r, reach_f))
        before = np.maximum(before, np.dot(on_r, reach_f))
        after = np.maximum(after, np.dot(reach_f, on_r))
    head = before.copy()
    for k in range(n):
        for a in range(k):
            if reach[a, k]:
                head[k] = max(head[k], head[a] + dur[a] + between[a, k])
    tail = after.copy()
    for j in range(n - 1, -1, -1):
        for d in range(j + 1, n):
            if reach[j, d]:
                tail[j] = max(tail[j], tail[d] + dur[d] + between[j, d])
    return head, tail


@njit(cache=True)
def _shares_refute(on, head, tail, share, limit):
    """The one-machine test with each operator's share of the unit (bounds.one_machine_bound_s)."""
    order = on[np.argsort(-tail[on])]
    for a in np.unique(head[on]):
        work = 0.0
        for i in order:
            if head[i] >= a:
                work += share[i]
                if a + work + tail[i] > limit:
                    return True
    return False


@njit(cache=True)
def _single_time_refutes(on, head, tail, d1, dp, share_single, excl, free, fsingle, limit, reach, chains):
    """The work test with single time on one multi-core unit's operators `on`: True when some set {head >= a}
    cannot fit (`chains`: also the longest chain of fixed singles, on the tensor unit where modes are branched on).

    For a cap L on the longest single duration, with P the parallel time of the operators that must run parallel
    (exclusive ones, free ones longer than L), Q0 the shares of the fixed-single ones, C the longest dependency
    chain of fixed-single ones and free ones i <= L choosing single (x_i = 1) or parallel, the least work is
    min_x P + sum (1 - x_i) dp_i + max(L, C, Q0 + sum x_i s_i) >= P + (1 - lam) max(L, C) + lam Q0 + sum min(dp_i, lam s_i)
    for every lam in [0, 1] (max(u, v) >= (1 - lam) u + lam v); the test takes the best lam of LAMBDAS, then the
    least over L.
    """
    n_lam = len(LAMBDAS)
    in_set = np.zeros(len(d1), dtype=np.bool_)
    ends = np.zeros(len(d1))
    order = on[np.argsort(-tail[on])]
    cand = [0.0]
    for i in on:
        if free[i] or fsingle[i]:
            cand.append(d1[i])
    lengths = np.unique(np.array(cand))
    n_l = len(lengths)
    for a in np.unique(head[on]):
        par_s = np.zeros(n_l)
        gain = np.zeros((n_l, n_lam))
        bad = np.zeros(n_l, dtype=np.bool_)
        fixed_single_s = 0.0
        in_set[:] = False
        chain = 0.0
        for i in order:
            if head[i] < a:
                continue
            in_set[i] = True
            if fsingle[i]:
                fixed_single_s += share_single[i]
            if fsingle[i] and chains:
                for j in on:  # operator ids are topological: the longest chain of the set's fixed singles, again
                    ends[j] = 0.0
                    if in_set[j] and fsingle[j]:
                        longest = 0.0
                        for h in on:
                            if h < j and in_set[h] and fsingle[h] and reach[h, j]:
                                longest = max(longest, ends[h])
                        ends[j] = longest + d1[j]
                        chain = max(chain, ends[j])
            for li in range(n_l):
                cap = lengths[li]
                if excl[i] or (free[i] and d1[i] > cap):
                    par_s[li] += dp[i]
                elif fsingle[i]:
                    if d1[i] > cap:
                        bad[li] = True
                else:
                    for lj in range(n_lam):
                        gain[li, lj] += min(dp[i], LAMBDAS[lj] * share_single[i])
            work = np.inf
            for li in range(n_l):
                if bad[li]:
                    continue
                single = max(lengths[li], chain)
                best = 0.0
                for lj in range(n_lam):
                    lam = LAMBDAS[lj]
                    best = max(best, (1.0 - lam) * single + lam * fixed_single_s + gain[li, lj])
                work = min(work, par_s[li] + best)
            if a + work + tail[i] > limit:
                return True
    return False


@njit(cache=True)
def _refutes(limit, par, sing, reach, reach_f, resource, holds, choice, fixed_exclusive, d1, dp, dmin, k, capacity):
    """True when the tests refute a makespan `limit` under the decisions; `par` gains the forced ones."""
    n = len(d1)
    share_single = d1 / k
    while True:
        excl = fixed_exclusive | (choice & par)
        free = choice & ~par & ~sing
        fsingle = holds & ~excl & ~free
        dur = np.where(choice & par, dp, np.where(choice & sing, d1, dmin))
        share = np.where(holds, np.where(excl, dp, np.where(fsingle, share_single, np.minimum(share_single, dp))), 0.0)
        head, tail = _heads_tails(reach, reach_f, resource, share, dur)
        for i in range(n):
            if head[i] + dur[i] + tail[i] > limit:
                return True
        for r in range(3):
            on = np.flatnonzero(holds & (resource == r))
            if capacity[r] > 1:
                if _single_time_refutes(on, head, tail, d1, dp, share_single, excl, free, fsingle, limit, reach, r == TENSOR):
                    return True
            elif _shares_refute(on, head, tail, share, limit):
                return True
        changed = False
        for i in range(n):
            if free[i] and head[i] + d1[i] + tail[i] > limit:
                par[i] = True
                changed = True
        if not changed:
            return False


@dataclass(frozen=True, eq=False)
class FixedModes:
    """Tensor-unit modes that every schedule shorter than `below_s` keeps (choice-operator masks)."""

    parallel: np.ndarray
    single: np.ndarray
    below_s: float


class ModeSearch:
    """The refutation tests and the branching over tensor-unit modes for one problem."""

    def __init__(self, problem: LayerProblem) -> None:
        self.problem = problem
        p = problem
        self._arrays = (
            np.ascontiguousarray(p.reach), np.ascontiguousarray(p.reach, dtype=np.float64), p.resource.astype(np.int64),
            p.holds, p.choice, p.fixed_exclusive, p.dur_single, p.dur_parallel, p.dur_min, concurrency(p).astype(np.float64),
            p.capacity.astype(np.int64),
        )
        self.branch = p.choice & (p.resource == TENSOR)

    def refutes(self, limit_s: float, par: np.ndarray, sing: np.ndarray) -> bool:
        """The tests at one node; `par` gains the operators they force to parallel mode."""
        return bool(_refutes(limit_s * (1.0 + REFUTE_TOL), par, sing, *self._arrays))

    def leaves(self, limit_s: float, max_nodes: int = MAX_NODES, max_leaves: int = MAX_LEAVES,
               first_only: bool = False) -> tuple[list[np.ndarray], bool]:
        """Parallel flags of the tensor-unit assignments the tests leave at makespan `limit_s` (at most max_leaves),
        and whether that is all of them (False: a limit stopped the enumeration). `first_only` stops at one."""
        n = self.problem.n
        stack = [(np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_))]
        found, nodes = [], 0
        d1 = self.problem.dur_single
        while stack:
            nodes += 1
            if nodes > max_nodes:
                return found, False
            par, sing = stack.pop()
            if self.refutes(limit_s, par, sing):
                continue
            open_ = np.flatnonzero(self.branch & ~par & ~sing)
            if not len(open_):
                found.append(par)
                if first_only or len(found) >= max_leaves:
                    return found, False
                continue
            i = open_[np.argmax(d1[open_])]
            single, parallel = sing.copy(), par.copy()  # a node's tests add to its own `par`, never to `sing`
            single[i] = True
            parallel[i] = True
            stack.append((par, single))
            stack.append((parallel, sing))
        return found, True

    def refuted(self, limit_s: float, max_nodes: int = MAX_NODES) -> bool:
        """No schedule of the layer is as short as `limit_s` (proven by exhausting the branching)."""
        found, complete = self.leaves(limit_s, max_nodes, first_only=True)
        return complete and not found

    def lower_bound_s(self, lower_s: float, upper_s: float) -> float:
        """The largest makespan in [lower_s, upper_s] found refuted by bisection (lower_s when none is)."""
        lo, hi = lower_s, upper_s
        if not self.refuted(lo):
            return lower_s
        while hi - lo > BOUND_REL_TOL * hi:
            mid = 0.5 * (lo + hi)
            if self.refuted(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def common_modes(self, leaves: list[np.ndarray], limit_s: float) -> FixedModes:
        """The modes all of a complete enumeration's `leaves` at `limit_s` share: no schedule of at most limit_s breaks them."""
        stacked = np.array(leaves, dtype=np.bool_).reshape(len(leaves), self.problem.n)
        return FixedModes(self.branch & stacked.all(axis=0), self.branch & ~stacked.any(axis=0), limit_s)
