"""MILP backends behind one call, and the policy that picks one: `schedule.backend=auto|gurobi|highs`.

auto: Gurobi when it is installed, licensed and the model fits its licence; otherwise (or on any
Gurobi failure) HiGHS, and the reason is returned so callers can record the fallback.
"""

from __future__ import annotations

import numpy as np

from phaze.schedule.backends._base import Backend, SolveParams, SolveResult, SolveStatus
from phaze.schedule.backends.gurobi import GurobiBackend
from phaze.schedule.backends.highs import HighsBackend
from phaze.schedule.problem import MilpModel

_GUROBI = GurobiBackend()
_HIGHS = HighsBackend()
_CANNOT = (SolveStatus.UNAVAILABLE, SolveStatus.SIZE_LIMIT, SolveStatus.ERROR)


class BackendUnavailableError(RuntimeError):
    """schedule.backend=gurobi was asked for and Gurobi cannot solve this model."""


def solve_milp(model: MilpModel, backend: str, params: SolveParams, warm_start: np.ndarray | None = None) -> tuple[SolveResult, str]:
    """Solve with the configured backend (checked by phaze.schema.schedule.ScheduleCfg); returns (result, fallback
    reason or "")."""
    if backend == "highs":
        return _HIGHS.solve(model, params, warm_start), ""
    result = _GUROBI.solve(model, params, warm_start)
    if result.status not in _CANNOT:
        return result, ""
    if backend == "gurobi":
        raise BackendUnavailableError(f"schedule.backend=gurobi cannot solve this model: {result.message}")
    return _HIGHS.solve(model, params, warm_start), f"gurobi: {result.message}"


__all__ = ["Backend", "BackendUnavailableError", "SolveParams", "SolveResult", "SolveStatus", "solve_milp"]
