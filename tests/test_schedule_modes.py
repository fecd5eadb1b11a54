"""The mode search (phaze.schedule.modes): its refutations never cut off a schedule that exists, it is stronger than
the closed-form bound, and on a real backward layer it finds and proves a schedule the list scheduler misses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.config import typed_config
from phaze.inputs import execution_model
from phaze.schedule import LayerSchedule, Prepared, prepare_layer, schedule_layer
from phaze.schedule.bounds import problem_lower_bound_s
from phaze.schedule.checker import check_times
from phaze.schedule.heuristic import best_list_schedule
from phaze.schedule.instance import LayerProblem
from phaze.schedule.modes import BOUND_REL_TOL, ModeSearch
from phaze.schema import ScheduleCfg
from phaze.workload.extract import extract_workload
from tests.conftest import compose_cfg
from tests.schedule_cases import Case, brute_force_makespan, cases

MS = 1e-3
REL = 1e-9


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_ops=7))
def test_no_makespan_that_a_schedule_reaches_is_refuted(case):
    problem = LayerProblem.build(*case.args())
    optimum = brute_force_makespan(case)
    search = ModeSearch(problem)
    assert not search.refuted(optimum)
    upper = best_list_schedule(problem).makespan_s
    assert search.lower_bound_s(problem_lower_bound_s(problem), upper) <= optimum * (1 + REL) + 1e-15


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_ops=7, sparse=True))
def test_the_optimal_tensor_modes_are_among_the_leaves(case):
    """Every assignment that reaches the optimum survives: the leaves at the optimum include one (or the
    enumeration stopped early), on wide graphs where single-mode operators share the cores."""
    problem = LayerProblem.build(*case.args())
    optimum = brute_force_makespan(case)
    leaves, complete = ModeSearch(problem).leaves(optimum)
    assert leaves or not complete


def three_tensor_ops() -> Case:
    """x -> z on the tensor unit and y beside them, 4 cores; single 2.5 ms, parallel 1.5 ms each.

    Closed-form bound: each operator's share is min(1.5, 2.5 / 2) = 1.25 ms (two can run at once), 3.75 ms in all.
    Optimum 4 ms: x and y single together (2.5), then z parallel (1.5); or x parallel, then z and y single.
    Every other assignment is longer: all parallel 4.5; x and z single form a chain of 5."""
    return Case(edges=[(0, 1)], unit=["tc", "tc", "tc"], single_s=np.full(3, 2.5 * MS), parallel_s=np.full(3, 1.5 * MS),
                n_tc=4, n_vc=1)


def test_single_mode_time_and_chains_lift_the_bound_to_the_optimum():
    case = three_tensor_ops()
    problem = LayerProblem.build(*case.args())
    assert brute_force_makespan(case) == pytest.approx(4.0 * MS, rel=REL)
    assert problem_lower_bound_s(problem) == pytest.approx(3.75 * MS, rel=REL)
    search = ModeSearch(problem)
    assert search.refuted(3.99 * MS) and not search.refuted(4.0 * MS)
    bound = search.lower_bound_s(problem_lower_bound_s(problem), 4.5 * MS)
    assert 4.0 * MS * (1 - BOUND_REL_TOL) <= bound <= 4.0 * MS
    leaves, complete = search.leaves(4.0 * MS)
    assert complete
    # x, z, y parallel flags: (single, parallel, single) and (parallel, single, single), nothing else
    assert sorted(tuple(bool(v) for v in leaf) for leaf in leaves) == [(False, True, False), (True, False, False)]


def llama2_backward_layer(workload_cache, **chip) -> tuple:
    """schedule_layer's arguments for Llama-2-7B's backward layer (t=1, microbatch 1) on the phaze_grid point `chip`."""
    cfg = compose_cfg("model=llama2")
    grid = enumerate_space(cfg.hw)
    point = grid[np.logical_and.reduce([grid[name] == value for name, value in chip.items()])]
    assert len(point) == 1
    workload = extract_workload(cfg.model, 1, cfg.train.bytes_per_elem, (1,), cache_dir=workload_cache)
    compute = workload.part(1, "layer").bwd.without_views()
    lat = op_latencies(compute.ops, point, Network.from_cfg(cfg.cluster), 1)
    return compute, lat.unit, lat.single_s[:, 0], lat.parallel_s[:, 0], chip["n_tc"], chip["n_vc"]


def test_the_modes_all_open_assignments_share_are_the_fixed_ones():
    search = ModeSearch(LayerProblem.build(*three_tensor_ops().args()))
    leaves, complete = search.leaves(4.0 * MS)
    fixed = search.common_modes(leaves, 4.0 * MS)
    assert complete and fixed.below_s == 4.0 * MS
    assert fixed.parallel.tolist() == [False, False, False] and fixed.single.tolist() == [False, False, True]


@pytest.mark.solver
def test_a_backward_layer_closes_on_a_batch_of_single_mode_matmuls(workload_cache):
    """8 cores of 32x128 tensor units, 16 vector cores: the list scheduler runs every matmul parallel; the mode
    search's leaves batch weight-gradient matmuls in single mode, 3.7% shorter, and prove it within the gap."""
    args = llama2_backward_layer(workload_cache, n_tc=8, tc_rows=32, tc_cols=128, n_vc=16, vc_width=128, glb_mib=128, hbm_gib=64)
    problem = LayerProblem.build(*args)
    listed = best_list_schedule(problem)
    assert (listed.makespan_s - problem_lower_bound_s(problem)) / listed.makespan_s > 0.15
    found = schedule_layer(*args, cfg=ScheduleCfg(mode_search=True, cache=False))
    assert found.status == "optimal" and found.backend == "heuristic" and found.mip_gap <= 0.01
    assert found.makespan_s < 0.97 * listed.makespan_s
    assert not found.parallel[problem.choice & (problem.unit == "tc")].all()
    check_times(problem, found.start_s, found.parallel, found.makespan_s)


@pytest.mark.solver
def test_a_backward_layer_closes_with_the_tensor_modes_fixed_in_the_milp(workload_cache):
    """64 tensor cores of 64x16: one tensor-unit assignment survives at the gap, so the MILP runs with every
    tensor-core mode fixed, and its answer (no shorter schedule keeps them, or one within the gap) closes the layer."""
    args = llama2_backward_layer(workload_cache, n_tc=64, tc_rows=64, tc_cols=16, n_vc=2048, vc_width=16, glb_mib=8, hbm_gib=32)
    problem = LayerProblem.build(*args)
    search = ModeSearch(problem)
    listed = best_list_schedule(problem)
    leaves, complete = search.leaves(listed.makespan_s * 0.99)
    assert complete and len(leaves) == 1
    fixed = search.common_modes(leaves, listed.makespan_s * 0.99)
    assert (fixed.parallel | fixed.single).sum() == search.branch.sum() == 18
    found = schedule_layer(*args, cfg=ScheduleCfg(mode_search=True, cache=False))
    assert found.status == "optimal" and found.backend in ("gurobi", "highs") and found.mip_gap <= 0.01
    check_times(problem, found.start_s, found.parallel, found.makespan_s)


@pytest.mark.solver
def test_a_prepared_layer_is_scheduled_as_from_scratch(workload_cache):
    """prepare_layer stops before the MILP: its bound lies between the closed-form bound and the schedule's makespan
    (above the closed form: the mode search proved more), and schedule_layer from it returns the very schedule it
    finds from scratch; a layer the mode search closes comes back scheduled, as schedule_layer returns it."""
    cfg = ScheduleCfg(mode_search=True, cache=False)
    args = llama2_backward_layer(workload_cache, n_tc=64, tc_rows=64, tc_cols=16, n_vc=2048, vc_width=16, glb_mib=8, hbm_gib=32)
    prepared = prepare_layer(*args, cfg)
    assert isinstance(prepared, Prepared)
    fresh = schedule_layer(*args, cfg=cfg)
    again = schedule_layer(*args, cfg=cfg, prepared=prepared)
    assert problem_lower_bound_s(prepared.problem) < prepared.lower_s <= fresh.makespan_s
    assert again.makespan_s == fresh.makespan_s and again.status == fresh.status and again.bound_s == fresh.bound_s
    assert np.array_equal(again.start_s, fresh.start_s) and np.array_equal(again.parallel, fresh.parallel)
    closing = llama2_backward_layer(workload_cache, n_tc=8, tc_rows=32, tc_cols=128, n_vc=16, vc_width=128, glb_mib=128, hbm_gib=64)
    done = prepare_layer(*closing, cfg)
    assert isinstance(done, LayerSchedule) and done.makespan_s == schedule_layer(*closing, cfg=cfg).makespan_s


def test_the_training_preset_decides_a_null_mode_search():
    assert execution_model(typed_config(compose_cfg("train=phaze"))).schedule.mode_search is False
    assert execution_model(typed_config(compose_cfg("train=megatron"))).schedule.mode_search is True
    assert execution_model(typed_config(compose_cfg("train=phaze", "schedule.mode_search=true"))).schedule.mode_search is True
    assert execution_model(typed_config(compose_cfg("train=megatron", "schedule.mode_search=false"))).schedule.mode_search is False
