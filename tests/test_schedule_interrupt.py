"""Ctrl-C during a Gurobi solve: Gurobi's own handler stops the solve and keeps the signal from Python. The backend
hands the Ctrl-C on to Python's handler and, when the run goes on (a search's first Ctrl-C: stop after the running
trial), solves again, so the result is the one an uninterrupted solve gives; with Python's default handler the Ctrl-C
interrupts the run (before, the cut-short incumbent was returned as if the work limit had stopped it)."""

import signal

import numpy as np
import pytest
import scipy.sparse as sp

from phaze.schedule.backends._base import SolveParams, SolveStatus
from phaze.schedule.backends.gurobi import GurobiBackend, unavailable_reason
from phaze.schedule.problem import MilpModel

pytestmark = [pytest.mark.solver, pytest.mark.skipif(unavailable_reason() is not None, reason="no Gurobi licence")]

VALUES = np.array([23, 31, 29, 44, 53, 38, 63, 85, 89, 82, 17, 41, 57, 33, 27, 61], dtype=float)
WEIGHTS = np.array([92, 57, 49, 68, 60, 43, 67, 84, 87, 72, 21, 39, 55, 35, 30, 66], dtype=float)
CAPACITY = 400.0
PARAMS = SolveParams(mip_gap=0.0, time_limit_s=60.0, threads=1)


def knapsack() -> MilpModel:
    """Max value of items within the capacity, as min -value.x over binaries."""
    n = len(VALUES)
    return MilpModel(c=-VALUES, A=sp.csr_matrix(WEIGHTS[None, :]), row_lo=np.array([-np.inf]), row_hi=np.array([CAPACITY]),
                     col_lo=np.zeros(n), col_hi=np.ones(n), integer=np.ones(n, dtype=bool))


def brute_force_best() -> float:
    n, best = len(VALUES), 0.0
    for mask in range(1 << n):
        chosen = np.array([(mask >> i) & 1 for i in range(n)], dtype=bool)
        if WEIGHTS[chosen].sum() <= CAPACITY:
            best = max(best, VALUES[chosen].sum())
    return best


@pytest.fixture()
def first_solve_interrupted(monkeypatch):
    """Model.optimize whose first call is stopped as Gurobi's Ctrl-C handler stops it (status INTERRUPTED)."""
    import gurobipy as gp

    optimize, calls = gp.Model.optimize, []

    def interrupted_once(model, callback=None):
        calls.append(1)
        if len(calls) > 1:
            return optimize(model, callback)
        return optimize(model, lambda m, where: m.terminate())

    monkeypatch.setattr(gp.Model, "optimize", interrupted_once)
    return calls


def test_an_interrupted_solve_is_handed_on_and_solved_again(first_solve_interrupted):
    handled = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: handled.append(signum))  # a search's first Ctrl-C
    try:
        result = GurobiBackend().solve(knapsack(), PARAMS)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert handled == [signal.SIGINT] and len(first_solve_interrupted) == 2
    assert result.status == SolveStatus.OPTIMAL
    assert -result.objective == pytest.approx(brute_force_best())


def test_an_interrupted_solve_without_a_handler_interrupts_the_run(first_solve_interrupted):
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            GurobiBackend().solve(knapsack(), PARAMS)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(first_solve_interrupted) == 1
