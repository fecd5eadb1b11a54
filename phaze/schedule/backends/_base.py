"""The interface every MILP backend implements, with a status vocabulary shared by all of them."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from phaze.schedule.problem import MilpModel

MIP_ABS_GAP = 1e-9
"""Absolute gap in model units; the schedule model's objective is ~1 (scaled by its upper bound),
so this is negligible next to any relative gap and lets mip_gap=0 mean "optimal"."""


class SolveStatus(enum.Enum):
    OPTIMAL = "optimal"          # proven within the requested gap
    TIME_LIMIT = "time_limit"    # stopped by the time limit, with an incumbent
    BOUND_STOP = "bound_stop"    # stopped once its bound reached SolveParams.bound_stop (an incumbent or not)
    NO_SOLUTION = "no_solution"  # stopped by the time limit before any incumbent
    INFEASIBLE = "infeasible"
    SIZE_LIMIT = "size_limit"    # the licence cannot hold the model (Gurobi pip licence)
    UNAVAILABLE = "unavailable"  # not installed or no licence
    ERROR = "error"


@dataclass(frozen=True)
class SolveParams:
    mip_gap: float
    time_limit_s: float
    threads: int
    work_limit: float | None = None
    """Deterministic effort limit (Gurobi work units, about a second of one core each): the same model
    stops at the same point on every run. Backends without one (HiGHS) take it as seconds, so a layer too large
    for Gurobi's size-limited licence gets about the same effort as one that fits (not deterministic)."""
    bound_stop: float | None = None
    """Stop as soon as the best bound reaches this objective value (model units): the caller asks only whether the
    optimum is at least that. A termination test alone: a solve that never reaches it runs as it would without it."""

    @property
    def effort_s(self) -> float:
        """Seconds a backend without work units may spend: the time limit, capped by the work limit read as seconds."""
        return min(self.time_limit_s, self.work_limit) if self.work_limit is not None else self.time_limit_s


@dataclass(frozen=True, eq=False)
class SolveResult:
    status: SolveStatus
    backend: str
    objective: float = float("nan")
    bound: float = float("-inf")
    x: np.ndarray | None = None
    wall_s: float = 0.0
    message: str = ""
    work: float = 0.0
    """Work units spent (backends with a work limit), else 0."""

    @property
    def has_solution(self) -> bool:
        """Only then may objective and x be read."""
        return self.status in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT) and self.x is not None


class Backend(ABC):
    """Solves a MilpModel; never raises for solver-side failures, it reports them in the status."""

    name: str

    @abstractmethod
    def solve(self, model: MilpModel, params: SolveParams, warm_start: np.ndarray | None = None) -> SolveResult:
        ...
