"""HiGHS through highspy: always available (MIT licence, no size limit)."""

from __future__ import annotations

import time

import highspy
import numpy as np

from phaze.schedule.backends._base import MIP_ABS_GAP, Backend, SolveParams, SolveResult, SolveStatus
from phaze.schedule.problem import MilpModel

_STOPPED = {
    highspy.HighsModelStatus.kTimeLimit,
    highspy.HighsModelStatus.kIterationLimit,
    highspy.HighsModelStatus.kSolutionLimit,
    highspy.HighsModelStatus.kInterrupt,
}


def _lp(model: MilpModel) -> highspy.HighsLp:
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = model.n_cols
    lp.num_row_ = model.n_rows
    lp.col_cost_ = model.c
    lp.col_lower_ = np.where(np.isinf(model.col_lo), -inf, model.col_lo)
    lp.col_upper_ = np.where(np.isinf(model.col_hi), inf, model.col_hi)
    lp.row_lower_ = np.where(np.isinf(model.row_lo), -inf, model.row_lo)
    lp.row_upper_ = np.where(np.isinf(model.row_hi), inf, model.row_hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.n_cols
    lp.a_matrix_.num_row_ = model.n_rows
    lp.a_matrix_.start_ = model.A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = model.A.indices.astype(np.int32)
    lp.a_matrix_.value_ = model.A.data
    lp.integrality_ = [highspy.HighsVarType.kInteger if v else highspy.HighsVarType.kContinuous for v in model.integer]
    return lp


class HighsBackend(Backend):
    name = "highs"

    def solve(self, model: MilpModel, params: SolveParams, warm_start: np.ndarray | None = None) -> SolveResult:
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", float(params.mip_gap))
        h.setOptionValue("mip_abs_gap", MIP_ABS_GAP)
        h.setOptionValue("time_limit", float(params.effort_s))
        h.setOptionValue("threads", int(params.threads))
        h.setOptionValue("random_seed", 0)
        if h.passModel(_lp(model)) == highspy.HighsStatus.kError:
            return SolveResult(SolveStatus.ERROR, self.name, message="HiGHS rejected the model")
        if warm_start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = np.asarray(warm_start, dtype=np.float64).tolist()
            h.setSolution(sol)
        if params.bound_stop is not None:
            stop_at = float(params.bound_stop)

            def bound_reached(event) -> None:
                if event.data_out.mip_dual_bound >= stop_at:
                    event.interrupt()

            h.cbMipInterrupt.subscribe(bound_reached)
        t0 = time.perf_counter()
        h.run()
        wall = time.perf_counter() - t0
        status = h.getModelStatus()
        info = h.getInfo()
        has_sol = info.primal_solution_status == highspy.kSolutionStatusFeasible
        bound = float(info.mip_dual_bound)
        if status == highspy.HighsModelStatus.kOptimal and has_sol:
            kind = SolveStatus.OPTIMAL
        elif status == highspy.HighsModelStatus.kInterrupt and params.bound_stop is not None and bound >= params.bound_stop:
            kind = SolveStatus.BOUND_STOP
        elif status in _STOPPED:
            kind = SolveStatus.TIME_LIMIT if has_sol else SolveStatus.NO_SOLUTION
        elif status == highspy.HighsModelStatus.kInfeasible:
            kind = SolveStatus.INFEASIBLE
        else:
            kind = SolveStatus.ERROR
        if kind in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT):
            x = np.asarray(h.getSolution().col_value, dtype=np.float64)
            return SolveResult(kind, self.name, float(info.objective_function_value), bound, x, wall)
        return SolveResult(kind, self.name, bound=bound, wall_s=wall, message=f"HiGHS: {h.modelStatusToString(status)}")
