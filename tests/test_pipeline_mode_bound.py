"""PHAZE's world (schedule.mode_search off) prunes with the mode search's bound before a layer's MILP, and only prunes:
the schedules, and so every value, stay the MILP's."""

import numpy as np
import pytest

from phaze.evaluation import refine as pipeline
from phaze.config import compose_config, model_job
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.pipeline import layer_latencies, load_workloads, placer
from phaze.schedule import mode_bound_s, schedule_layer
from phaze.schedule.bounds import problem_lower_bound_s
from phaze.schedule.heuristic import best_list_schedule
from phaze.schedule.instance import LayerProblem
from phaze.schema import ScheduleCfg
from phaze.search.evaluator import throughput_of

pytestmark = [pytest.mark.slow, pytest.mark.solver]

CHIP = dict(n_tc=4, tc_rows=256, tc_cols=256, n_vc=4, vc_width=256, glb_mib=4, hbm_gib=80)
"""A phaze_grid point near the llama2 optimum whose backward layer the list schedule leaves open: the headline search
met it, and the mode search's bound alone showed that it cannot beat the study."""


@pytest.fixture(scope="module")
def world(workload_cache):
    cfg = compose_config("model=llama2", f"cache_dir={workload_cache}", "train.mbs=[1]", "schedule.cache=false")
    grid = enumerate_space(cfg.hw)
    point = grid[np.logical_and.reduce([grid[name] == value for name, value in CHIP.items()])].reset_index(drop=True)
    assert len(point) == 1
    workloads, network = load_workloads(model_job(cfg)), Network.from_cfg(cfg.cluster)
    return cfg, point, workloads, network, placer(model_job(cfg), point, workloads, network)


def test_the_mode_bound_lies_between_the_closed_form_bound_and_the_schedule(world):
    cfg, point, workloads, network, place = world
    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    lazy.listed_bound(place)
    assert lazy.bounds_modes and lazy.pending
    key = max(lazy.pending, key=lazy._pending_gap)
    args = lazy.pending[key]
    problem = LayerProblem.build(*args, *lazy.cores)
    lower, listed = problem_lower_bound_s(problem), best_list_schedule(problem).makespan_s
    bound = mode_bound_s(problem, lower, listed)
    assert lower < bound
    found = schedule_layer(*args, *lazy.cores, ScheduleCfg(mode_search=False, cache=False))
    assert bound <= found.makespan_s < listed  # no schedule is shorter than the bound, and the MILP finds a shorter one


def test_the_mode_bound_prunes_without_a_milp_and_changes_no_value(world):
    """A cut-off between the list-schedule bound and the bound with the mode search's is met without any MILP (and
    with one when the mode bound is not used); below the value, the point's value is the MILP's either way."""
    cfg, point, workloads, network, place = world
    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    listed = throughput_of(lazy.listed_bound(place))
    for key in list(lazy.pending):
        if key not in lazy.mode_bounded:
            lazy.bound_modes(key, place, np.inf)  # nothing beats it: the split bound is computed too
    raised = throughput_of(place(lazy.values))
    assert raised < listed
    beat = 0.5 * (raised + listed)
    pruned = layer_latencies(model_job(cfg), point, workloads, network)
    bound, exact = pruned.best(place, beat)
    assert not exact and throughput_of(bound) <= beat and pruned.n_solved == 0 and pruned.mode_bounded
    without = layer_latencies(model_job(cfg), point, workloads, network)
    without.bounds_modes = False
    without.best(place, beat)
    assert without.milps  # a MILP ran (to its end, or until its bound refuted the cut-off)
    value = throughput_of(layer_latencies(model_job(cfg), point, workloads, network).best(place)[0])
    assert raised * (1 + 1e-12) >= value
    low = layer_latencies(model_job(cfg), point, workloads, network)
    result, exact = low.best(place, 0.9 * value)
    assert exact and low.n_solved > 0 and throughput_of(result) == value


def test_the_split_bound_runs_only_where_its_ceiling_could_prune(world, monkeypatch):
    """bound_modes computes a layer's split bound (its side MILPs) only where the split's ceiling would leave the point
    unable to beat the cut-off: against a cut-off every point beats it raises the layer to the mode bound alone."""
    cfg, point, workloads, network, place = world
    calls = []
    real = pipeline.split_bound_s
    monkeypatch.setattr(pipeline, "split_bound_s", lambda problem, settings: calls.append(1) or real(problem, settings))
    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    lazy.listed_bound(place)
    key = max(lazy.pending, key=lazy._pending_gap)
    args = lazy.pending[key]
    vi, ti, part, direction = key
    problem = LayerProblem.build(*args, *lazy.cores)
    mode_s = mode_bound_s(problem, float(lazy.values[part][f"{direction}_s"][vi, ti]), lazy.listed_s[key])
    lazy.bound_modes(key, place, 0.0)
    assert not calls and lazy.values[part][f"{direction}_s"][vi, ti] == mode_s
    again = layer_latencies(model_job(cfg), point, workloads, network)
    again.listed_bound(place)
    again.bound_modes(key, place, np.inf)
    assert calls and again.values[part][f"{direction}_s"][vi, ti] >= mode_s
