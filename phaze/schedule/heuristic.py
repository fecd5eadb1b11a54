"""List scheduling: a feasible schedule fast, used as the ILP's upper bound, big-M and warm start.

Serial schedule generation with insertion (Kolisch, EJOR 1996): operators are taken in a priority
list (a topological order) and each is put at the earliest time its dependencies allow and its
unit has the cores free for its whole duration (one core in single mode, all in parallel mode),
gaps left earlier included. Several priority lists and mode rules are tried, plus non-delay
(parallel) generation on a few of the lists; each schedule is improved by forward-backward passes,
and the shortest is kept. The generation schemes run as Numba kernels (sgs.py); reference.py is the
same scheduler in plain Python.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from phaze.schedule import sgs
from phaze.schedule.instance import TENSOR, LayerProblem

MODE_RULES = ("earliest_finish", "fastest", "least_work")
"""How an operator with a choice picks its mode: earliest finish time, shortest duration, or fewest
core-seconds; ties go to single mode (fewer cores held)."""

ORDER_RULES = ("index", "critical_path")
"""Priority lists: the given topological order, or longest remaining path first among ready ops."""

BLEND_ORDERS = 12
"""Priority lists blending earliest start (head) and latest start (longest path after), with the
weight on the head evenly spaced in [0, 1]: pure critical-path lists starve a bottleneck unit of
off-path work (weight-gradient matmuls) and leave it idle, pure earliest-start ones delay the path.
On Llama-2-7B backward layers they take the list schedule from 1-4% to within 0.1% of the MILP's;
fewer (8) leave it up to 5.6% above the bound where 12 leave 3.8%."""

NONDELAY_ORDERS = 4
"""Blended priorities (as BLEND_ORDERS) also run through non-delay generation; on 7 Llama-2-7B
backward layers of grid points where the MILP does not close, they shorten one list schedule by
about 2% (slightly below the best schedule Gurobi finds in 30 s) and no other; 12 weights find
nothing more."""

JUSTIFY_ROUNDS = 4
"""Forward-backward passes per schedule; improvements after the first two are rare."""

MODE_ORDERS = 4
"""Blended priority lists (weights evenly spaced in [0, 1]) tried on each tensor-unit mode assignment
that the mode search leaves open (best_with_modes); on Llama-2-7B backward layers the weight 1/3 finds
every shorter schedule that 12 weights and the critical-path list find."""

RANDOM_RESTARTS = 4
"""Randomised critical-path priority lists tried after the fixed rules (seeded: reproducible). With
the blended lists, more (16) left the same list schedules on 48 Llama-2-7B layer graphs at 2x the time."""

PRIORITY_NOISE = 0.3
"""Relative spread of the random factor applied to critical-path priorities in restarts."""


@dataclass(frozen=True, eq=False)
class ListSchedule:
    start_s: np.ndarray
    parallel: np.ndarray
    """Decision per operator (only meaningful for choice operators)."""
    makespan_s: float


def _ops(problem: LayerProblem) -> tuple:
    """The kernels' description of the operators: predecessors (CSR), resource, holds, choice, fixed mode,
    both durations, the capacities."""
    return (*problem.pred_csr, problem.resource, problem.holds, problem.choice, problem.fixed_exclusive, problem.dur_single,
            problem.dur_parallel, problem.capacity)


def _schedule(start: np.ndarray, parallel: np.ndarray, makespan: float) -> ListSchedule:
    return ListSchedule(start, parallel, float(makespan))


def critical_key(problem: LayerProblem, noise: np.ndarray | None = None) -> np.ndarray:
    """Priority, smallest first: minus the longest path from the operator's start (s), scaled by `noise`."""
    return -(problem.tail_s + problem.dur_min) * (1.0 if noise is None else noise)


def blend_key(problem: LayerProblem, head_weight: float) -> np.ndarray:
    """Priority, smallest first: head_weight * earliest start - (1 - head_weight) * path after (s)."""
    return head_weight * problem.head_s - (1.0 - head_weight) * (problem.tail_s + problem.dur_min)


def topological(problem: LayerProblem, key: np.ndarray) -> np.ndarray:
    """Kahn's algorithm taking the ready operator with the smallest (key, id) first."""
    return sgs.topological(np.asarray(key, dtype=np.float64), problem.pred_csr[0], *problem.succ_csr)


def list_schedule(problem: LayerProblem, order, mode_rule: str, modes: np.ndarray | None = None) -> ListSchedule:
    """Schedule operators one by one in `order`, each at its earliest start on free cores.

    `modes` (per op, True = parallel) fixes every decision; otherwise `mode_rule` picks them.
    """
    if mode_rule not in MODE_RULES:
        raise ValueError(f"unknown mode rule {mode_rule!r}; allowed: {MODE_RULES}")
    fixed = np.zeros(problem.n, dtype=np.bool_) if modes is None else np.asarray(modes, dtype=np.bool_)
    return _schedule(*sgs.serial_schedule(np.asarray(order, dtype=np.int64), MODE_RULES.index(mode_rule), fixed, modes is not None,
                                          *_ops(problem)))


def nondelay_schedule(problem: LayerProblem, key: np.ndarray) -> ListSchedule:
    """Parallel schedule generation (Kelley 1963): whenever cores free up, start the ready operators
    that fit now, smallest `key` first, each in its fastest mode that fits; a unit never idles while
    a ready operator fits on it (serial generation may, leaving a gap no listed operator fills)."""
    pred_ptr, pred_idx, *rest = _ops(problem)
    return _schedule(*sgs.nondelay_schedule(np.asarray(key, dtype=np.float64), pred_ptr, pred_idx, *problem.succ_csr, *rest))


def justify(problem: LayerProblem, sched: ListSchedule, mirrored: LayerProblem) -> ListSchedule:
    """Forward-backward improvement (Li & Willis, EJOR 1992; Valls et al., EJOR 2005): schedule the
    operators backwards in order of decreasing finish, then forwards in order of the resulting
    starts, with the modes kept; neither pass can lengthen the schedule."""
    return _schedule(*sgs.justify(sched.start_s, sched.parallel, sched.makespan_s, JUSTIFY_ROUNDS, *_ops(problem), *_ops(mirrored)))


def best_list_schedule(problem: LayerProblem, seed: int = 0, kernels=None) -> ListSchedule:
    """The shortest schedule over non-delay and serial generation with the fixed, randomised and
    blended priority lists, each justified. `kernels` (a module with topological, list_schedule,
    nondelay_schedule and justify) defaults to these Numba-backed ones; reference.py passes its own."""
    if problem.n == 0:
        return ListSchedule(np.zeros(0), np.zeros(0, dtype=bool), 0.0)
    k = kernels if kernels is not None else sys.modules[__name__]
    mirrored = problem.reversed()
    rng = np.random.default_rng(seed)
    orders = [np.arange(problem.n), k.topological(problem, critical_key(problem))]
    orders += [k.topological(problem, critical_key(problem, 1.0 + PRIORITY_NOISE * rng.random(problem.n))) for _ in range(RANDOM_RESTARTS)]
    orders += [k.topological(problem, blend_key(problem, weight)) for weight in np.linspace(0.0, 1.0, BLEND_ORDERS)]
    best = None
    for weight in np.linspace(0.0, 1.0, NONDELAY_ORDERS):
        cand = k.justify(problem, k.nondelay_schedule(problem, blend_key(problem, weight)), mirrored)
        if best is None or cand.makespan_s < best.makespan_s:
            best = cand
    for i, order in enumerate(orders):
        for mode_rule in MODE_RULES if i < len(ORDER_RULES) else ("earliest_finish",):
            cand = k.justify(problem, k.list_schedule(problem, order, mode_rule), mirrored)
            if best is None or cand.makespan_s < best.makespan_s:
                best = cand
    return best


def best_with_modes(problem: LayerProblem, assignments, best: ListSchedule) -> ListSchedule:
    """The shortest of `best` and the serial schedules of each tensor-unit mode assignment (parallel
    flags; the other units keep `best`'s modes) over MODE_ORDERS blended lists, each justified.

    The list scheduler picks modes one operator at a time, so it misses batches of single-mode
    operators that only pay off together; the mode search's open assignments name them."""
    if not len(assignments):
        return best
    mirrored = problem.reversed()
    orders = [topological(problem, blend_key(problem, weight)) for weight in np.linspace(0.0, 1.0, MODE_ORDERS)]
    tensor = problem.choice & (problem.resource == TENSOR)
    for parallel in assignments:
        modes = np.where(tensor, parallel, best.parallel)
        for order in orders:
            cand = justify(problem, list_schedule(problem, order, "earliest_finish", modes), mirrored)
            if cand.makespan_s < best.makespan_s:
                best = cand
    return best
