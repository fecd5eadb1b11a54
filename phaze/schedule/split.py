"""The split bound: an operator divides its layer into what must end before it starts and what must start after it ends.

Every ancestor of an operator k finishes before k starts and every descendant starts after k ends; the ancestors'
part of any schedule is a schedule of the ancestors alone (fewer operators, the same units), and so is the
descendants'. So the makespan is at least the ancestors' least makespan + k's fastest duration + the descendants'
least makespan, and any valid lower bound of each side (a smaller layer problem, whose MILP closes in a fraction of
the whole layer's time) keeps the sum a proof. Split at the longest operator of a critical path (in Llama-2's backward
layer, the attention's vector chain), each side keeps what the closed-form bounds lose: how its tensor and vector
operators contend with each other before and after that operator (experiments/results/milp_optimality.md).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from phaze.schedule.instance import LayerProblem

SPLIT_CANDIDATES = 1
"""Operators tried as the split, longest first among those on a critical path. On the headline run's 18 distinct
layer MILPs the longest gave the best of the two longest every time (scratch measurement, 2026-11-29)."""

CRITICAL_REL_TOL = 1e-9
"""Relative slack within which an operator's head + fastest duration + tail counts as the critical path."""


def side(problem: LayerProblem, ops: np.ndarray) -> LayerProblem:
    """The layer problem of the operators `ops` alone (ascending ids, so topological), with the edges among them."""
    index = np.full(problem.n, -1, dtype=np.int64)
    index[ops] = np.arange(len(ops))
    keep = (index[problem.src] >= 0) & (index[problem.dst] >= 0)
    return LayerProblem(index[problem.src[keep]], index[problem.dst[keep]], problem.unit[ops], problem.single_s[ops],
                        problem.parallel_s[ops], problem.n_tc, problem.n_vc)


def split_candidates(problem: LayerProblem) -> np.ndarray:
    """Operators on a critical path (fastest durations), longest first, at most SPLIT_CANDIDATES."""
    through = problem.head_s + problem.dur_min + problem.tail_s
    critical = np.flatnonzero(through >= problem.critical_path_s * (1.0 - CRITICAL_REL_TOL))
    return critical[np.argsort(-problem.dur_min[critical], kind="stable")][:SPLIT_CANDIDATES]


def split_bound_s(problem: LayerProblem, side_bound_s: Callable[[LayerProblem], float]) -> float:
    """The largest split bound over the candidates (s); `side_bound_s` gives a valid lower bound of a side's makespan."""
    best = 0.0
    for k in split_candidates(problem).tolist():
        total = float(problem.dur_min[k])
        for ops in (np.flatnonzero(problem.reach[:, k]), np.flatnonzero(problem.reach[k])):
            if len(ops):
                total += side_bound_s(side(problem, ops))
        best = max(best, total)
    return best
