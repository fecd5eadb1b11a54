"""Backend policy (auto | gurobi | highs, the pip licence's size limit) and the solved-layer cache."""

from __future__ import annotations

import time

import numpy as np
import pytest

from phaze.schedule import schedule_layer
from phaze.schedule.backends import BackendUnavailableError, SolveParams, SolveStatus, solve_milp
from phaze.schedule.backends.gurobi import PIP_MAX_VARS, is_size_limited, unavailable_reason
from phaze.schedule.problem import MilpBuilder
from phaze.schema import ScheduleCfg

PARAMS = SolveParams(mip_gap=0.0, time_limit_s=30.0, threads=1)


def knapsack_cover(n_cols: int):
    """min sum x over n binaries with x_k + x_{k+1} >= 1 (optimum floor(n / 2)), as a MilpModel."""
    b = MilpBuilder()
    cols = b.add_cols(np.zeros(n_cols), 1.0, integer=True, cost=1.0)
    b.add_rows([(cols[:-1], 1.0), (cols[1:], 1.0)], 1.0, np.inf)
    return b.build()


def need_size_limited_gurobi():
    if unavailable_reason() is not None:
        pytest.skip(f"Gurobi unavailable: {unavailable_reason()}")
    if not is_size_limited():
        pytest.skip("a full Gurobi licence is installed: no size limit to hit")


@pytest.mark.solver
@pytest.mark.parametrize("backend", ["auto", "highs", "gurobi"])
def test_small_model_same_optimum_on_every_backend(backend):
    if backend == "gurobi" and unavailable_reason() is not None:
        pytest.skip(f"Gurobi unavailable: {unavailable_reason()}")
    result, fallback = solve_milp(knapsack_cover(9), backend, PARAMS)
    assert result.status == SolveStatus.OPTIMAL
    assert result.objective == pytest.approx(4.0)  # x1, x3, x5, x7 cover the 8 adjacent pairs
    expected = "highs" if backend == "highs" or unavailable_reason() is not None else "gurobi"
    assert result.backend == expected
    assert (fallback != "") == (backend == "auto" and expected == "highs")


@pytest.mark.solver
def test_gurobi_over_the_pip_size_limit_raises():
    need_size_limited_gurobi()
    with pytest.raises(BackendUnavailableError, match="2000"):
        solve_milp(knapsack_cover(PIP_MAX_VARS + 1), "gurobi", PARAMS)


@pytest.mark.solver
def test_auto_over_the_pip_size_limit_falls_back_to_highs():
    need_size_limited_gurobi()
    result, fallback = solve_milp(knapsack_cover(PIP_MAX_VARS + 1), "auto", PARAMS)
    assert result.backend == "highs" and result.status == SolveStatus.OPTIMAL
    assert result.objective == pytest.approx(1000.0)  # every other of 2001 binaries
    assert fallback.startswith("gurobi:") and "2001 variables" in fallback


def wide_layer(n_ops: int, seed: int = 0):
    """n operators (a few dependencies) on 4 + 4 cores with a real mode choice; n=80 gives a MILP of 3,281 columns."""
    rng = np.random.default_rng(seed)
    src = np.arange(0, n_ops - 10, 10)
    dst = src + 5
    unit = np.where(np.arange(n_ops) % 2 == 0, "tc", "vc")
    single = rng.integers(4, 40, n_ops) * 1e-4
    parallel = single / rng.uniform(1.5, 4.0, n_ops)
    return (src, dst), unit, single, parallel, 4, 4


@pytest.mark.solver
def test_schedule_layer_records_the_fallback():
    need_size_limited_gurobi()
    args = wide_layer(80)
    cfg = ScheduleCfg(backend="auto", mip_gap=1e-3, time_limit_s=3.0, cache=False)  # list schedule 0.33% above the bound
    sched = schedule_layer(*args, cfg=cfg)
    assert sched.backend == "highs"
    assert sched.fallback.startswith("gurobi:") and "size-limited" in sched.fallback
    with pytest.raises(BackendUnavailableError):
        schedule_layer(*args, cfg=ScheduleCfg(backend="gurobi", mip_gap=1e-3, time_limit_s=3.0, cache=False))


@pytest.mark.solver
def test_the_milp_keeps_its_time_limit_after_a_slow_start(monkeypatch):
    """The time limit is the MILP's: a mode search that takes it all (a cold Numba cache does) still leaves one round."""
    import phaze.schedule.layer as layer

    cfg = ScheduleCfg(backend="highs", mip_gap=1e-3, time_limit_s=0.5, cache=False)
    slow = layer.mode_search

    def mode_search_taking_the_limit(*args):
        start = time.perf_counter()
        out = slow(*args)
        time.sleep(max(0.0, cfg.time_limit_s - (time.perf_counter() - start)))
        return out

    monkeypatch.setattr(layer, "mode_search", mode_search_taking_the_limit)
    assert schedule_layer(*wide_layer(80), cfg=cfg).backend == "highs"


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="schedule.backend='cplex'"):
        schedule_layer(([], []), ["tc"], [1.0], [0.5], 2, 1, ScheduleCfg(backend="cplex"))


# Three tensor-core operators 0 -> 2, 1 free; parallel is a real choice, so the MILP runs.
CACHE_CASE = (([0], [2]), ["tc", "tc", "tc"], np.array([4e-3, 3e-3, 5e-3]), np.array([1.5e-3, 2e-3, 2e-3]))


def cached_cfg(tmp_path, backend="highs") -> ScheduleCfg:
    return ScheduleCfg(backend=backend, mip_gap=0.0, cache=True, cache_dir=str(tmp_path))


@pytest.mark.solver
def test_second_identical_solve_is_a_cache_hit(tmp_path):
    first = schedule_layer(*CACHE_CASE, 2, 1, cached_cfg(tmp_path))
    second = schedule_layer(*CACHE_CASE, 2, 1, cached_cfg(tmp_path))
    assert not first.from_cache and second.from_cache
    assert second.makespan_s == first.makespan_s == pytest.approx(5.5e-3)  # all parallel, one after another: 1.5 + 2 + 2 ms
    assert np.array_equal(second.start_s, first.start_s)


@pytest.mark.solver
def test_equivalent_chip_and_other_backend_hit_the_cache(tmp_path):
    first = schedule_layer(*CACHE_CASE, 8, 2, cached_cfg(tmp_path))
    # 16 cores: like 8, more cores than the unit has operators; and the key ignores the backend.
    again = schedule_layer(*CACHE_CASE, 16, 4, cached_cfg(tmp_path, backend="auto"))
    assert again.from_cache and again.makespan_s == first.makespan_s


@pytest.mark.solver
def test_chip_with_fewer_cores_than_operators_misses(tmp_path):
    schedule_layer(*CACHE_CASE, 2, 1, cached_cfg(tmp_path))
    assert not schedule_layer(*CACHE_CASE, 3, 1, cached_cfg(tmp_path)).from_cache
    assert schedule_layer(*CACHE_CASE, 3, 1, cached_cfg(tmp_path)).from_cache


@pytest.mark.solver
def test_auto_without_gurobi_falls_back_and_gurobi_raises(monkeypatch):
    """As on a machine without gurobipy or a licence: auto solves with HiGHS and says why."""
    from phaze.schedule.backends import gurobi as gurobi_module

    monkeypatch.setattr(gurobi_module, "_env", None)
    monkeypatch.setattr(gurobi_module, "_env_error", "ImportError: No module named 'gurobipy'")
    result, fallback = solve_milp(knapsack_cover(9), "auto", PARAMS)
    assert result.backend == "highs" and result.objective == pytest.approx(4.0)
    assert fallback == "gurobi: Gurobi unavailable (ImportError: No module named 'gurobipy')"
    with pytest.raises(BackendUnavailableError, match="Gurobi unavailable"):
        solve_milp(knapsack_cover(9), "gurobi", PARAMS)


def test_cache_serves_a_limited_solve_only_to_no_more_effort(tmp_path):
    """A schedule that stopped on its limits answers requests for at most that time and work, not more."""
    from phaze.schedule.cache import ScheduleCache
    from phaze.schedule.result import LayerSchedule

    from phaze.schedule.instance import LayerProblem

    problem = LayerProblem.build(([], []), ["tc", "vc"], [2.0, 2.0], [2.0, 2.0], 1, 1)  # two 2 s operators side by side
    store = ScheduleCache(tmp_path)
    stopped = LayerSchedule(makespan_s=2.0, start_s=np.zeros(2), parallel=np.zeros(2, dtype=bool), backend="gurobi",
                            status="time_limit", mip_gap=0.1, solve_s=1.0, bound_s=1.8)
    store.save("k" * 16, stopped, time_limit_s=60.0, work_limit=1.0)
    fresh = ScheduleCache(tmp_path)  # from disk, not memory
    assert fresh.load("k" * 16, problem, 60.0, 1.0).makespan_s == 2.0
    assert fresh.load("k" * 16, problem, 30.0, 0.5) is not None
    assert fresh.load("k" * 16, problem, 60.0, 5.0) is None
    assert fresh.load("k" * 16, problem, 60.0, None) is None
    assert fresh.load("k" * 16, problem, 120.0, 1.0) is None
