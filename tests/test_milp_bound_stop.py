"""A layer MILP asked only whether a point can still win stops once its bound says no (SolveParams.bound_stop,
schedule_layer's stop_s, LayerLatencies.stop_for): the answer and every value are those of the MILP run to its end."""

import time

import numpy as np
import pytest

from phaze.evaluation import refine as pipeline
from phaze.config import compose_config, model_job
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.pipeline import STOP_REL_TOL, LayerLatencies, layer_latencies, load_workloads, placer
from phaze.schedule import schedule_layer
from phaze.schedule.backends import SolveParams, SolveStatus, solve_milp
from phaze.schedule.bounds import problem_lower_bound_s
from phaze.schedule.heuristic import best_list_schedule
from phaze.schedule.ilp import build_ilp
from phaze.schedule.instance import LayerProblem
from phaze.schedule.layer import milp_schedule
from phaze.schema import ScheduleCfg
from phaze.search.evaluator import throughput_of

pytestmark = [pytest.mark.slow, pytest.mark.solver]

CHIP = dict(n_tc=4, tc_rows=256, tc_cols=256, n_vc=4, vc_width=256, glb_mib=8, hbm_gib=80)
"""A phaze_grid point of the headline search whose backward layer's MILP stops at its work limit, bound below its
schedule (experiments/results/milp_pruning.md, point 30578)."""

WORK = 2.0
"""Gurobi work units per MILP here: enough for its bound to rise well above the closed-form one."""


@pytest.fixture(scope="module")
def world(workload_cache):
    cfg = compose_config("model=llama2", f"cache_dir={workload_cache}", "train.mbs=[1]", "schedule.cache=false",
                         f"schedule.work_limit={WORK}")
    grid = enumerate_space(cfg.hw)
    point = grid[np.logical_and.reduce([grid[name] == value for name, value in CHIP.items()])].reset_index(drop=True)
    assert len(point) == 1
    workloads, network = load_workloads(model_job(cfg)), Network.from_cfg(cfg.cluster)
    place = placer(model_job(cfg), point, workloads, network)
    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    lazy.listed_bound(place)
    key = max(lazy.pending, key=lazy._pending_gap)
    return cfg, point, workloads, network, place, key, lazy.pending[key], lazy.cores


@pytest.fixture(scope="module")
def milp(world):
    *_, args, cores = world
    problem = LayerProblem.build(*args, *cores)
    best, lower = best_list_schedule(problem), problem_lower_bound_s(problem)
    model, layout, start = build_ilp(problem, best, lower, [])
    return model, start, lower / layout.scale_s


@pytest.mark.parametrize("backend", ["gurobi", "highs"])
def test_a_backend_stops_once_its_bound_reaches_the_stop(milp, backend):
    model, start, lower = milp
    full, _ = solve_milp(model, backend, SolveParams(0.01, 60.0, 1, WORK), start)
    assert full.status == SolveStatus.TIME_LIMIT and lower - 1e-9 <= full.bound < full.objective
    stop = lower + 0.5 * (full.bound - lower)
    stopped, _ = solve_milp(model, backend, SolveParams(0.01, 60.0, 1, WORK, bound_stop=stop), start)
    assert stopped.status == SolveStatus.BOUND_STOP and stopped.bound >= stop and not stopped.has_solution
    if backend == "gurobi":
        assert stopped.work < full.work
        never, _ = solve_milp(model, backend, SolveParams(0.01, 60.0, 1, WORK, bound_stop=2.0), start)  # above the list schedule
        assert (never.status, never.objective, never.bound, never.work) == (full.status, full.objective, full.bound, full.work)


def test_a_refuted_layer_is_not_cached_and_an_unreached_stop_changes_nothing(world, tmp_path):
    *_, args, cores = world
    cfg = ScheduleCfg(mode_search=False, work_limit=WORK, cache=True, cache_dir=str(tmp_path))
    uncached = ScheduleCfg(mode_search=False, work_limit=WORK, cache=False)
    full = schedule_layer(*args, *cores, uncached)
    problem = LayerProblem.build(*args, *cores)
    lower = problem_lower_bound_s(problem)
    milp_only = milp_schedule(problem, uncached, best_list_schedule(problem), lower, time.perf_counter())  # no split bound
    assert milp_only.status == "time_limit" and milp_only.bound_s < milp_only.makespan_s
    assert full.makespan_s == milp_only.makespan_s and full.bound_s >= milp_only.bound_s  # the split bound proves, never reschedules
    stop_s = lower + 0.5 * (milp_only.bound_s - lower)
    refuted = schedule_layer(*args, *cores, cfg, stop_s=stop_s)
    assert refuted.status == "refuted" and refuted.bound_s >= stop_s * (1 - 1e-9)
    assert not list(tmp_path.rglob("*.json"))
    unreached = schedule_layer(*args, *cores, cfg, stop_s=2 * full.makespan_s)
    assert (unreached.status, unreached.makespan_s, unreached.bound_s) == (full.status, full.makespan_s, full.bound_s)
    assert len(list(tmp_path.rglob("*.json"))) == 1


def test_the_stop_is_the_least_makespan_that_settles_the_point(world):
    cfg, point, workloads, network, place, key, *_ = world
    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    lazy.listed_bound(place)
    vi, ti, part, direction = key
    field = lazy.values[part][f"{direction}_s"]
    lower_s, listed_s = float(field[vi, ti]), lazy.listed_s[key]

    def at(makespan_s: float) -> float:
        kept = field[vi, ti]
        field[vi, ti] = makespan_s
        try:
            return throughput_of(place(lazy.values))
        finally:
            field[vi, ti] = kept

    beat = 0.5 * (at(lower_s) + at(listed_s))
    stop_s = lazy.stop_for(place, key, beat)
    assert lower_s < stop_s < listed_s
    assert at(stop_s) <= beat < at(stop_s * (1 - 2 * STOP_REL_TOL))
    assert lazy.stop_for(place, key, 1.01 * at(lower_s)) is not None and lazy.stop_for(place, key, None) is None
    assert lazy.stop_for(place, key, 0.99 * at(listed_s)) is None  # even the list schedule beats it


def test_searches_answer_as_they_would_with_milps_run_to_their_end(world, monkeypatch):
    """For cut-offs across the point's range, best() gives the same verdict (and, where exact, the same value) with the
    split bound, with the stops alone, and with every MILP run to its end; without the split bound, which settles
    these cut-offs before any MILP, some cut-off is settled by a refuted MILP, and the split bound solves fewer MILPs."""
    cfg, point, workloads, network, place, *_ = world
    value = throughput_of(layer_latencies(model_job(cfg), point, workloads, network).best(place)[0])
    listed = throughput_of(layer_latencies(model_job(cfg), point, workloads, network).listed_bound(place))
    beats = np.linspace(0.97 * value, listed, 7)

    def verdicts():
        out = []
        for beat in beats:
            lazy = layer_latencies(model_job(cfg), point, workloads, network)
            result, exact = lazy.best(place, beat)
            assert exact or throughput_of(result) <= beat  # pruned only when it cannot beat the cut-off
            out.append((exact, throughput_of(result) if exact else None, [m.status for m in lazy.milps]))
        return out

    with_split = verdicts()
    monkeypatch.setattr(pipeline, "split_bound_s", lambda problem, cfg: 0.0)
    with_stops = verdicts()
    monkeypatch.setattr(LayerLatencies, "stop_for", lambda self, place, key, beat: None)
    to_the_end = verdicts()
    for split, stops, full in zip(with_split, with_stops, to_the_end):
        assert split[:2] == stops[:2] == full[:2]
    assert any("refuted" in statuses for *_, statuses in with_stops)
    assert sum(len(statuses) for *_, statuses in with_split) < sum(len(statuses) for *_, statuses in with_stops)


def test_a_stop_beyond_what_fixed_modes_let_the_bound_prove_is_not_asked():
    """With the mode search's fixed modes the MILP's bound holds for every schedule only up to modes.below_s: a stop
    above it could never be proven, so the solver is not given one (and runs as it would without a stop)."""
    from phaze.schedule.layer import _bound_stop
    from phaze.schedule.modes import FixedModes

    modes = FixedModes(np.zeros(3, dtype=bool), np.zeros(3, dtype=bool), below_s=0.9)
    assert _bound_stop(0.8, 2.0, modes) == 0.4 and _bound_stop(0.8, 2.0, None) == 0.4
    assert _bound_stop(0.95, 2.0, modes) is None and _bound_stop(0.95, 2.0, None) == 0.475
    assert _bound_stop(None, 2.0, None) is None


def test_a_value_to_beat_read_again_prunes_as_soon_as_it_arrives(world):
    """best() reads a callable `beat` before every step (a value another worker found meanwhile): a constant one
    answers as the number does, and one that arrives after the first step stops the evaluation with fewer MILPs than
    none at all."""
    cfg, point, workloads, network, place, *_ = world
    full = layer_latencies(model_job(cfg), point, workloads, network)
    value = throughput_of(full.best(place)[0])
    beat = 1.001 * value
    as_number = layer_latencies(model_job(cfg), point, workloads, network).best(place, beat)
    as_callable = layer_latencies(model_job(cfg), point, workloads, network).best(place, lambda: beat)
    assert as_number[1] == as_callable[1] is False and throughput_of(as_number[0]) == throughput_of(as_callable[0]) <= beat
    reads = []

    def late() -> float | None:
        reads.append(1)
        return None if len(reads) <= 2 else beat

    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    result, exact = lazy.best(place, late)
    assert not exact and throughput_of(result) <= beat and len(reads) > 2
    assert len(lazy.milps) < len(full.milps)
