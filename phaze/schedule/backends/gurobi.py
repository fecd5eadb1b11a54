"""Gurobi through gurobipy, imported lazily; the pip licence's size limit is detected, not assumed.

docs/dependencies.md §4.1: the PyPI licence refuses models over 2,000 variables or 2,000
linear constraints with GurobiError errno 10010 at optimize(); a full licence (GRB_LICENSE_FILE)
has no such limit.
"""

from __future__ import annotations

import signal
import time

import numpy as np

from phaze.schedule.backends._base import MIP_ABS_GAP, Backend, SolveParams, SolveResult, SolveStatus
from phaze.schedule.problem import MilpModel

PIP_MAX_VARS = 2000
"""Largest variable count of the size-limited pip licence (docs/dependencies.md §4.1)."""
PIP_MAX_CONSTRS = 2000
"""Largest linear-constraint count of the size-limited pip licence (docs/dependencies.md §4.1)."""
SIZE_LIMIT_ERRNO = 10010
"""GRB.Error.SIZE_LIMIT_EXCEEDED."""

_env = None
_env_error: str | None = None
_size_limited: bool | None = None


def gurobi_env():
    """A started, silent Gurobi environment, or None (with the reason in `unavailable_reason`)."""
    global _env, _env_error
    if _env is None and _env_error is None:
        try:
            import gurobipy as gp

            env = gp.Env(empty=True)
            env.setParam("OutputFlag", 0)
            env.start()
            _env = env
        except Exception as e:  # ImportError, or GurobiError for a missing or expired licence
            _env_error = f"{type(e).__name__}: {e}"
    return _env


def unavailable_reason() -> str | None:
    gurobi_env()
    return _env_error


def is_size_limited() -> bool:
    """True when the licence refuses a model one variable over the pip limit (probed once)."""
    global _size_limited
    if _size_limited is None:
        import gurobipy as gp

        probe = gp.Model(env=gurobi_env())
        try:
            probe.addMVar(PIP_MAX_VARS + 1)
            probe.optimize()
            _size_limited = False
        except gp.GurobiError as e:
            _size_limited = e.errno == SIZE_LIMIT_ERRNO
        finally:
            probe.dispose()
    return _size_limited


def fits_licence(model: MilpModel) -> bool:
    return model.n_cols <= PIP_MAX_VARS and model.n_rows <= PIP_MAX_CONSTRS or not is_size_limited()


class GurobiBackend(Backend):
    name = "gurobi"

    def solve(self, model: MilpModel, params: SolveParams, warm_start: np.ndarray | None = None) -> SolveResult:
        env = gurobi_env()
        if env is None:
            return SolveResult(SolveStatus.UNAVAILABLE, self.name, message=f"Gurobi unavailable ({_env_error})")
        if not fits_licence(model):
            return SolveResult(
                SolveStatus.SIZE_LIMIT, self.name,
                message=f"model has {model.n_cols} variables and {model.n_rows} constraints; the size-limited "
                f"licence allows {PIP_MAX_VARS} and {PIP_MAX_CONSTRS}",
            )
        import gurobipy as gp
        from gurobipy import GRB

        m = gp.Model(env=env)
        try:
            x = m.addMVar(model.n_cols, lb=model.col_lo, ub=model.col_hi, vtype=np.where(model.integer, GRB.INTEGER, GRB.CONTINUOUS))
            m.setObjective(model.c @ x, GRB.MINIMIZE)
            eq = model.row_lo == model.row_hi
            le = ~eq & np.isfinite(model.row_hi)
            ge = ~eq & np.isfinite(model.row_lo)
            for mask, sense, rhs in ((eq, "=", model.row_hi), (le, "<", model.row_hi), (ge, ">", model.row_lo)):
                if mask.any():
                    m.addMConstr(model.A[mask], x, sense, rhs[mask])
            m.Params.MIPGap = float(params.mip_gap)
            m.Params.MIPGapAbs = MIP_ABS_GAP
            m.Params.TimeLimit = float(params.time_limit_s)
            if params.work_limit is not None:
                m.Params.WorkLimit = float(params.work_limit)
            m.Params.Threads = int(params.threads)
            m.Params.Seed = 0
            if params.bound_stop is not None:
                m.Params.BestBdStop = float(params.bound_stop)
            if warm_start is not None:
                x.Start = np.asarray(warm_start, dtype=np.float64)
            t0 = time.perf_counter()
            try:
                m.optimize()
                while m.Status == GRB.INTERRUPTED:
                    # Gurobi's own Ctrl-C handler stopped the solve at a random moment and kept the Ctrl-C from Python.
                    # Hand it on (a search's first Ctrl-C stops after the running trial; a second, or none installed,
                    # raises KeyboardInterrupt here) and, if the run goes on, solve again from the same start so that
                    # the layer's schedule is the one the deterministic work limit gives.
                    signal.raise_signal(signal.SIGINT)
                    m.reset()
                    m.optimize()
            except gp.GurobiError as e:
                kind = SolveStatus.SIZE_LIMIT if e.errno == SIZE_LIMIT_ERRNO else SolveStatus.ERROR
                return SolveResult(kind, self.name, wall_s=time.perf_counter() - t0, message=f"GurobiError {e.errno}: {e}")
            wall = time.perf_counter() - t0
            has_sol = m.SolCount > 0
            if m.Status == GRB.OPTIMAL and has_sol:
                kind = SolveStatus.OPTIMAL
            elif m.Status == GRB.USER_OBJ_LIMIT:  # BestBdStop, the only objective limit set
                kind = SolveStatus.BOUND_STOP
            elif m.Status in (GRB.TIME_LIMIT, GRB.WORK_LIMIT, GRB.NODE_LIMIT, GRB.SOLUTION_LIMIT):
                kind = SolveStatus.TIME_LIMIT if has_sol else SolveStatus.NO_SOLUTION
            elif m.Status in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
                kind = SolveStatus.INFEASIBLE
            else:
                kind = SolveStatus.ERROR
            bound = float(m.ObjBound) if m.Status != GRB.INFEASIBLE else float("-inf")
            if kind in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT):
                return SolveResult(kind, self.name, float(m.ObjVal), bound, np.asarray(x.X, dtype=np.float64), wall, work=float(m.Work))
            return SolveResult(kind, self.name, bound=bound, wall_s=wall, message=f"Gurobi status {m.Status}", work=float(m.Work))
        finally:
            m.dispose()
