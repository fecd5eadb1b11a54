"""The search on hw=tiny_grid: every sampler with pruning finds the exhaustive grid's best, and
pruning only ever removes points that the unpruned grid shows to be no better."""

import mlflow
import numpy as np
import optuna
import pandas as pd
import pytest

from phaze.config import compose_config, model_job, study_spec
from phaze.cores import usable_cores
from phaze.cost.chip import COST_COLUMNS
from phaze.hardware import enumerate_space
from phaze.pipeline import evaluate_point
from phaze.report.study import final_table
from phaze.search import run_study, trials_frame
from phaze.search.evaluator import MORE_IS_FASTER, SpaceEvaluator
from phaze.search.pareto import COSTS, exact_front, known_values, recorder
from phaze.search.claims import PASSED_OVER, claims_for
from phaze.search.study import baseline_beside, baselines, progress_total, storage_url, tracker_for

pytestmark = pytest.mark.slow

TINY_MODEL = [
    "model=gpt2", "model.num_layers=2", "model.hidden_size=256", "model.num_heads=4", "model.num_kv_heads=4",
    "model.ffn_hidden_size=1024", "model.seq_len=128", "model.max_position_embeddings=128", "model.vocab_size=1000",
    "model.max_tp=2", "train.mbs=[1,2]", "train.tp_widths=[1,2]", "train.global_batch=64", "cluster.devices=16",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    cache = tmp_path_factory.mktemp("search-cache")
    return TINY_MODEL + ["hw=tiny_grid", "hw.inter_op_parallel=false", f"cache_dir={cache}", f"schedule.cache_dir={cache}/schedule",
                         "search.storage=memory", "tracking.enabled=false", "search.seed=3",
                         "search.top_n=1"]  # a study of its best alone (tests/test_top_n.py: the top N)


def study(base, *overrides):
    return run_study(study_spec(compose_config(*base, *overrides)), progress=False)


@pytest.fixture(scope="module")
def exhaustive(base):
    """Every point fully evaluated: the ground truth."""
    out = study(base, "search=grid", "search.prune=false")
    df = trials_frame(out)
    assert (df.state == "COMPLETE").all() and len(df) == len(out.evaluator)
    return df.set_index("point").value


@pytest.mark.parametrize("sampler,trials", [("grid", 0), ("bound", 0), ("tpe", 120), ("nsga2", 120)])
def test_pruned_study_finds_the_exhaustive_best(base, exhaustive, sampler, trials):
    out = study(base, f"search={sampler}", f"search.n_trials={trials or 1}")
    df = trials_frame(out)
    assert out.best.throughput_seq_s == pytest.approx(exhaustive.max(), rel=1e-12)
    pruned = df[df.state == "PRUNED"]
    assert len(pruned) > 0
    # every pruned point is one the exhaustive grid shows to be no better than the best found
    assert (exhaustive.loc[pruned.point].to_numpy() <= out.best.throughput_seq_s * (1 + 1e-12)).all()
    # and its recorded bound really bounds its value
    assert (exhaustive.loc[pruned.point].to_numpy() <= pruned.bound.to_numpy() * (1 + 1e-12)).all()
    if sampler == "bound":
        assert out.n_full_evals < len(out.evaluator) / 4
        # points never proposed (passed over on their placement bound, or after the work-bound stop) are no better either
        unvisited = sorted(set(range(len(out.evaluator))) - set(df.point))
        assert (exhaustive.loc[unvisited].to_numpy() <= out.best.throughput_seq_s * (1 + 1e-12)).all()
        passed_over = set(np.flatnonzero(out.evaluator.work_bound > out.best.throughput_seq_s).tolist()) & set(unvisited)
        assert out.n_skipped == len(passed_over)
        # a point its placement or list-schedule bound dismisses is passed over, not made a trial
        assert set(pruned.pruned_by) <= {"work_bound", "ilp_bound"}


def test_the_bound_order_breaks_ties_by_capacity(base):
    """Points of equal work bound come by decreasing HBM capacity, buffer and HBM bandwidth, then by index: a point
    with more of each comes before the points it dominates."""
    ev = study(base, "search=bound").evaluator
    order = ev.order_by_bound()
    key = np.column_stack([-ev.work_bound, *[-ev.points[c].to_numpy(dtype=np.float64) for c in ("hbm_gib", "glb_mib", "hbm_gbps")],
                           np.arange(len(ev))])[order]
    assert sorted(order.tolist()) == list(range(len(ev)))
    assert all(tuple(a) <= tuple(b) for a, b in zip(key[:-1], key[1:]))
    ties = np.diff(ev.work_bound[order]) == 0
    assert ties.any() and (np.diff(ev.points.hbm_gib.to_numpy()[order])[ties] < 0).any()


@pytest.mark.parametrize("sampler", ["bound", "grid"])
def test_a_relative_gap_proves_the_best_within_it(base, exhaustive, sampler):
    """search.rel_gap=0.2: the study ends with a best within 20% of the exhaustive optimum and every point it
    did not complete is within 20% of that best; the grid order, which meets good points late, evaluates fewer."""
    loose = study(base, f"search={sampler}", "search.rel_gap=0.2")
    best = loose.best.throughput_seq_s
    assert best * 1.2 >= exhaustive.max() and best == pytest.approx(exhaustive.loc[loose.best_index], rel=1e-12)
    df = trials_frame(loose)
    undecided = sorted(set(range(len(loose.evaluator))) - set(df[df.state == "COMPLETE"].point))
    assert (exhaustive.loc[undecided].to_numpy() <= best * 1.2 * (1 + 1e-12)).all()
    if sampler == "grid":
        assert loose.n_full_evals < study(base, "search=grid").n_full_evals
    assert study_spec(compose_config(*base, "search.rel_gap=0.2")).name != study_spec(compose_config(*base)).name


def test_bounds_are_true_bounds(base, exhaustive):
    out = study(base, "search=grid", "search.prune=false")
    ev = out.evaluator
    values = exhaustive.sort_index().to_numpy()
    assert (ev.work_bound >= values * (1 - 1e-12)).all()
    placement = np.array([ev.placement_bound(i) for i in range(len(ev))])
    assert (placement >= values * (1 - 1e-12)).all()
    assert (ev.work_bound >= placement * (1 - 1e-12)).all()


def test_study_logs_one_child_per_trial(base, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config(*base, "search=tpe", "search.n_trials=25", "tracking.enabled=true", f"tracking.uri={uri}")
    tracker = tracker_for(study_spec(cfg))
    out = run_study(study_spec(cfg), tracker, progress=False)
    tracker.finish({"n_trials": out.n_trials})
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[cfg.tracking.experiment], filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}'")
    assert len(runs) == out.n_trials == 25
    assert sorted(pd.to_numeric(runs["params.trial_number"]).tolist()) == list(range(25))
    assert runs["tags.status"].isin(["evaluated", "pruned"]).all()  # every plan of the tiny model fits: none infeasible
    full = runs[runs["tags.status"] == "evaluated"]
    for column in ["metrics.throughput_seq_s", "metrics.area_mm2", "metrics.time_per_batch_s", "metrics.mfu",
                   "metrics.memory_per_device_gib", "metrics.ilp_s", "metrics.dp_s", "params.hw.n_tc", "params.placement.dp",
                   "params.placement.pp", "params.placement.tp", "params.train.mbs", "params.train.recompute"]:
        assert column in runs.columns and full[column].notna().all(), column


def test_local_workers_share_the_study(base, exhaustive, tmp_path):
    """search.n_workers=2 on SQLite: this process and a spawned one run every point once and find the exhaustive best."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config(*base, "search=grid", "search.n_workers=2", f"search.storage=sqlite:///{tmp_path / 'studies.db'}",
                         "tracking.enabled=true", f"tracking.uri={uri}")
    tracker = tracker_for(study_spec(cfg))
    out = run_study(study_spec(cfg), tracker, progress=False)
    df = trials_frame(out)
    finished = df[df.state.isin(["COMPLETE", "PRUNED"])]
    assert sorted(finished.point) == list(range(len(out.evaluator)))  # each point once across the workers
    assert out.best.throughput_seq_s == pytest.approx(exhaustive.max(), rel=1e-12)
    workers = {t.user_attrs["mlflow_record"]["tags"]["worker"] for t in out.study.trials if t.state.name in ("COMPLETE", "PRUNED")}
    assert 1 <= len(workers) <= 2  # this process (worker 0) and the spawned one, whichever got to the points first
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[cfg.tracking.experiment], filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}'")
    assert sorted(pd.to_numeric(runs["params.trial_number"])) == sorted(finished.trial)


def test_local_workers_share_the_branch_and_bound_walk(base, exhaustive, tmp_path):
    """search=bound with two workers: the exhaustive best; a point is passed over by one worker only (its claim kept as
    PASSED_OVER, never also a trial's), and every point passed over or never proposed is no better than the best."""
    cfg = compose_config(*base, "search=bound", "search.n_workers=2", f"search.storage=sqlite:///{tmp_path / 'studies.db'}")
    out = run_study(study_spec(cfg), progress=False)
    best = out.best.throughput_seq_s
    assert best == pytest.approx(exhaustive.max(), rel=1e-12)
    owners = claims_for(storage_url(cfg.search), study_spec(cfg).name).owners_by_point()
    df = trials_frame(out)
    trial_points = set(df.point.dropna().astype(int))
    passed = {p for p, owner in owners.items() if owner == PASSED_OVER}
    assert passed and not passed & trial_points
    assert {p for p, owner in owners.items() if owner != PASSED_OVER} == trial_points
    unvisited = sorted(set(range(len(out.evaluator))) - trial_points)
    assert (exhaustive.loc[unvisited].to_numpy() <= best * (1 + 1e-12)).all()
    above = set(np.flatnonzero(out.evaluator.work_bound > best).tolist())
    assert out.n_skipped == len(above & set(unvisited))


@pytest.mark.parametrize("sampler", ["bound", "grid"])
def test_throughput_per_tdp_finds_the_exhaustive_best(base, exhaustive, sampler):
    """search.objective=throughput_per_tdp: the pruned study's best is the best throughput / TDP over all points
    (the bound order sorts by the work bound per watt, so its early stop stays exact)."""
    out = study(base, f"search={sampler}", "search.objective=throughput_per_tdp")
    key = out.evaluator.work_bound / out.evaluator.points.tdp_w.to_numpy()
    assert (np.diff(key[out.evaluator.order_by_bound()]) <= 0).all()
    tdp_w = out.evaluator.points.tdp_w.to_numpy()
    per_w = exhaustive.sort_index().to_numpy() / tdp_w
    assert out.study.best_value == pytest.approx(per_w.max(), rel=1e-12)
    assert out.best_index == int(np.argmax(per_w)) or per_w[out.best_index] == pytest.approx(per_w.max(), rel=1e-12)


def test_modern_space_search_is_exact(base):
    """train=megatron (ZeRO, SP, CP, interleaving, selective recompute, the timeline step): the bounds still
    bound every point's value and branch and bound finds the exhaustive grid's best."""
    modern = [*base, "train=megatron"]
    grid = study(modern, "search=grid", "search.prune=false")
    values = trials_frame(grid).set_index("point").value.sort_index().to_numpy()
    ev = grid.evaluator
    placement = np.array([ev.placement_bound(i) for i in range(len(ev))])
    assert (placement >= values * (1 - 1e-12)).all() and (ev.work_bound >= values * (1 - 1e-12)).all()
    bound = study(modern, "search=bound")
    assert bound.best.throughput_seq_s == pytest.approx(values.max(), rel=1e-12)
    assert bound.best.throughput_seq_s > study(base, "search=bound").best.throughput_seq_s  # more plans, overlaps


@pytest.mark.parametrize("sampler", ["bound", "grid"])
def test_one_point_space_runs_one_trial(base, tmp_path, sampler):
    """Optuna answers a one-value suggestion without asking the sampler: the study must still stop."""
    out = study(base, "hw=a100", f"search={sampler}", f"search.storage=sqlite:///{tmp_path / 'studies.db'}")
    assert len(out.evaluator) == 1
    assert [t.state for t in out.study.get_trials(deepcopy=False)] == [optuna.trial.TrialState.COMPLETE]


def test_a_point_with_more_of_every_faster_column_bounds_the_other(base, exhaustive):
    """MORE_IS_FASTER: on every pair of tiny_grid points that agree in the other cost columns, the point with at least
    the other's vector cores, buffer and HBM has at least its placement bound and its exhaustive value, so a bound
    found on one may dismiss the other."""
    ev = study(base, "search=grid", "search.prune=false").evaluator
    model = ev.models[0]
    points = ev.points
    same = [c for c in COST_COLUMNS if c in points.columns and c not in MORE_IS_FASTER]
    bound = np.array([model._bound(ev.point(i), model.lower_bounds.at(i), False, None)[0] for i in range(len(ev))])
    values = exhaustive.sort_index().to_numpy()
    pairs = 0
    for _, group in points.groupby(same):
        more = group[list(MORE_IS_FASTER)].to_numpy()
        for a, ia in enumerate(group.index):
            for b, ib in enumerate(group.index):
                if a != b and np.all(more[a] >= more[b]):
                    pairs += 1
                    assert bound[ib] <= bound[ia] * (1 + 1e-12) and values[ib] <= values[ia] * (1 + 1e-12)
    assert pairs > 20


def test_a_cutoff_only_skips_plans_that_cannot_beat_it(base):
    """optimize(cutoff_s=...) returns the unrestricted optimum when it beats the cutoff and nothing otherwise."""
    ev = study(base, "search=grid", "search.prune=false").evaluator
    model = ev.models[0]
    for i in (0, len(ev) // 2, len(ev) - 1):
        point, bounds = ev.point(i), model.lower_bounds.at(i)
        best = model.placer(point, False)(bounds)
        assert best is not None
        above = model.placer(point, False, beat=best.throughput_seq_s * 0.999)(bounds)
        assert above.time_per_batch_s == pytest.approx(best.time_per_batch_s, rel=1e-12)
        assert model.placer(point, False, beat=best.throughput_seq_s * 1.001)(bounds) is None


def test_the_baseline_computed_beside_the_study_is_the_launchers(base):
    """run_study has a process beside the study compute the baseline chip: the same placement and time as this process
    computes on the same evaluator (the TPUv4-like chip with the expert placement)."""
    out = study(base, "model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1")
    assert baseline_beside(out.evaluator.spec) == (usable_cores() > 1)
    here, searched = baselines(out.evaluator)
    assert searched is None and out.baseline_searched is None
    assert out.baseline.result.time_per_batch_s == here.result.time_per_batch_s
    assert out.baseline.result.strategy == here.result.strategy
    assert (out.baseline.result.strategy.dp, out.baseline.result.strategy.pp) == (8, 2)


def test_with_a_worker_per_core_the_last_worker_computes_the_baseline(base, tmp_path, monkeypatch):
    """Two workers on two cores: no side process; the last worker computes the baseline before its share of the study
    (WorkerPool.run_first), the same placement and time as this process computes on the same evaluator."""
    monkeypatch.setattr("phaze.search.study.usable_cores", lambda: 2)
    cfg = compose_config(*base, "model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1", "search.n_workers=2",
                         f"search.storage=sqlite:///{tmp_path / 'studies.db'}")
    assert not baseline_beside(study_spec(cfg))

    def not_here(*args, **kwargs):
        raise AssertionError("the launcher computed the baseline")

    monkeypatch.setattr(SpaceEvaluator, "baseline", not_here)  # this process only: the worker imports the real one
    out = run_study(study_spec(cfg), progress=False)
    monkeypatch.undo()
    here, searched = baselines(out.evaluator)
    assert searched is None and out.baseline_searched is None
    assert out.baseline.result.time_per_batch_s == here.result.time_per_batch_s
    assert (out.baseline.result.strategy.dp, out.baseline.result.strategy.pp) == (8, 2)


def test_the_baseline_goes_beside_the_study_only_on_a_spare_core(base):
    """A side process computes the baseline only where the workers leave a core idle, and never when the baseline
    needs the study's optimum (compat.baseline_in_optimum_run)."""
    cores = usable_cores()
    assert baseline_beside(study_spec(compose_config(*base, "search.n_workers=1"))) == (cores > 1)
    assert not baseline_beside(study_spec(compose_config(*base, f"search.n_workers={cores}", "search.storage=sqlite:///unused.db")))
    assert not baseline_beside(study_spec(compose_config(*base, "search.n_workers=1", "compat.baseline_in_optimum_run=true")))


def test_a_preset_baseline_is_the_preset_evaluated_alone(base):
    """hw.baseline=tpuv4_modern: the study's baseline rows are that chip on this cluster with the expert placement
    and with its searched one, exactly as phaze.pipeline.evaluate_point gives them on the preset itself."""
    expert = ["model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1"]
    out = study(base, *expert, "hw.baseline=tpuv4_modern")
    searched = evaluate_point(model_job(compose_config(*base, *expert, "hw=tpuv4_modern")), enumerate_space(compose_config("hw=tpuv4_modern").hw))
    assert out.baseline_searched.result.throughput_seq_s == pytest.approx(searched.throughput_seq_s, rel=1e-12)
    assert out.baseline.result.throughput_seq_s <= searched.throughput_seq_s * (1 + 1e-12)
    assert (out.baseline.result.strategy.dp, out.baseline.result.strategy.pp) == (8, 2)
    assert out.speedup_searched == pytest.approx(out.best.throughput_seq_s / searched.throughput_seq_s, rel=1e-12)
    table = final_table(out)
    assert list(table.design) == ["searched", "tpuv4_modern + expert placement", "tpuv4_modern + searched placement"]


def test_the_progress_total_is_what_the_bound_order_visits(base):
    """The bar of a branch-and-bound study counts to the points whose work bound beats the best value: the order visits
    exactly those (each claimed by a trial or passed over), then the next one stops the study."""
    out = study(base, "search=bound")
    total = progress_total(out.evaluator.spec.config.search, out.evaluator, out.best.throughput_seq_s)
    assert total == int(np.count_nonzero(out.evaluator.work_bound > out.best.throughput_seq_s))
    assert 0 < total < len(out.evaluator)
    assert out.study.sampler.cursor == total + 1
    assert progress_total(out.evaluator.spec.config.search, out.evaluator, None) == len(out.evaluator)


@pytest.mark.parametrize("cost", COSTS)
def test_the_exact_front_is_the_exhaustive_grids_front(base, exhaustive, cost):
    """search=pareto on tiny_grid: the front of throughput against area (and TDP) found by branch and bound is the
    front of every point fully evaluated, with far fewer evaluations; a resumed run evaluates nothing again."""
    ev = SpaceEvaluator(study_spec(compose_config(*base)))
    values = exhaustive.sort_index().to_numpy()
    costs = ev.points[cost].to_numpy()
    expected, best = [], 0.0
    for i in np.lexsort((-values, costs)):  # cheapest first, the fastest of equal cost first
        if values[i] > best:
            best = values[i]
            expected.append((costs[i], values[i]))
    study = optuna.create_study(direction="maximize")
    front = exact_front(ev, cost, record=recorder(study, len(ev)))
    assert np.column_stack([front.table[cost], front.table.throughput_seq_s]) == pytest.approx(np.array(expected), rel=1e-12)
    assert front.n_evaluated == len(known_values(study)) < len(ev) / 2
    again = exact_front(ev, cost, known=known_values(study))
    assert again.n_evaluated == 0 and again.table.point.tolist() == front.table.point.tolist()


def test_a_trial_reports_how_its_layer_milps_ended():
    """Evaluation.milp_metrics, logged with every full evaluation: MILPs run, those left above the gap, those stopped on
    a refuted cut-off (whose gap is no schedule's), the largest gap and the median solve time."""
    from phaze.schedule import LayerSchedule
    from phaze.search.evaluator import Evaluation

    def milp(status, gap, seconds):
        return LayerSchedule(1.0, np.zeros(1), np.zeros(1, dtype=bool), "gurobi", status, gap, seconds)

    e = Evaluation({}, 0.0, 0.0, milps=(milp("optimal", 0.004, 0.5), milp("time_limit", 0.12, 4.0), milp("optimal", 0.0, 1.5),
                                        milp("refuted", 0.3, 0.25), milp("optimal", 0.0, 2.0)))
    assert e.milp_metrics() == {"milp.count": 5, "milp.open": 1, "milp.refuted": 1, "milp.max_gap": 0.12, "milp.median_s": 1.5}
    assert Evaluation({}, 0.0, 0.0).milp_metrics() == {"milp.count": 0}


def test_full_evaluations_carry_their_milp_metrics(base):
    from phaze.search.study import RECORD_ATTR

    trials = study(base, "search=grid", "search.prune=false").study.get_trials(deepcopy=False)
    assert trials and all(t.user_attrs[RECORD_ATTR]["metrics"]["milp.count"] == 0 for t in trials)  # hw.inter_op_parallel=false: no MILP
