"""What scheduling one layer direction returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STATUSES = ("optimal", "time_limit", "heuristic", "refuted")
"""optimal: proven within the configured MIP gap (by the solver, or by the lower bound for the
heuristic's schedule); time_limit: the solver's best schedule when time ran out, gap above target;
heuristic: a list schedule with no optimality claim (only from `heuristic_schedule`); refuted: the solver
stopped once its bound reached the makespan it was asked to refute (schedule_layer's stop_s), so bound_s is
what it answers and the schedule is only the best found by then (never cached, never a layer's latency)."""


@dataclass(frozen=True, eq=False)
class LayerSchedule:
    """A feasible schedule: each operator's start and mode, its makespan and how it was found."""

    makespan_s: float
    start_s: np.ndarray
    parallel: np.ndarray
    backend: str
    """gurobi | highs: the solver that proved it; heuristic: the lower bound proved the list schedule."""
    status: str
    mip_gap: float
    """(makespan - bound) / makespan, with the best proven lower bound."""
    solve_s: float
    from_cache: bool = False
    bound_s: float = 0.0
    """Best proven lower bound on the optimal makespan (s)."""
    fallback: str = ""
    """Why the preferred backend did not solve it (e.g. Gurobi size limit), empty when it did."""
