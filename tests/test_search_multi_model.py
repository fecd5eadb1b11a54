"""Several models in one study (`model=[a,b]`, PHAZE's common architecture): the objective is their
mean throughput, the bounds stay true, pruning keeps the optimum, and each model keeps its own config."""

import numpy as np
import optuna
import pytest

from phaze.config import compose_config, models_of, study_spec
from phaze.search import run_study, trials_frame
from phaze.search.evaluator import SpaceEvaluator

from tests.test_search_study import TINY_MODEL

pytestmark = pytest.mark.slow

SINGLE = [o for o in TINY_MODEL if not o.startswith("model=")] + ["model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    cache = tmp_path_factory.mktemp("multi-cache")
    return SINGLE + ["hw=tiny_grid", "hw.inter_op_parallel=false", f"cache_dir={cache}", "search.storage=memory", "tracking.enabled=false"]


def grid_values(base, model: str):
    out = run_study(study_spec(compose_config(*base, f"model={model}", "search=grid", "search.prune=false")), progress=False)
    return trials_frame(out).set_index("point").value.sort_index()


def test_models_are_composed_one_by_one():
    cfg = compose_config("model=[llama2,gpt2]", "model.num_layers=3")
    names = [(c.model.name, c.model.family, c.model.num_layers, c.model.expert.pp) for c in models_of(cfg)]
    assert names == [("llama2", "llama", 3, 8), ("gpt2", "gpt2", 3, 32)]


def test_common_architecture_maximises_the_mean_throughput(base):
    per_model = [grid_values(base, m) for m in ("gpt2", "opt")]
    mean = (per_model[0] + per_model[1]) / 2
    for sampler in ("grid", "bound"):
        out = run_study(study_spec(compose_config(*base, "model=[gpt2,opt]", f"search={sampler}")), progress=False)
        assert out.evaluator.model_names == ["gpt2", "opt"]
        assert out.best.throughput_seq_s == pytest.approx(mean.max(), rel=1e-9)
        assert [out.best.results[m].throughput_seq_s for m in ("gpt2", "opt")] == pytest.approx([v.loc[out.best_index] for v in per_model], rel=1e-9)
        assert all(out.baseline.results[m].throughput_seq_s > 0 for m in ("gpt2", "opt"))
        ratios = [out.best.results[m].throughput_seq_s / out.baseline.results[m].throughput_seq_s for m in ("gpt2", "opt")]
        assert out.speedup == pytest.approx(np.mean(ratios), rel=1e-12)
        df = trials_frame(out)
        pruned = df[df.state == "PRUNED"]
        assert (mean.loc[pruned.point].to_numpy() <= pruned.bound.to_numpy() * (1 + 1e-12)).all()
        if sampler == "bound":  # each model capped by its own optimum, from its own study
            assert out.evaluator.caps == pytest.approx([v.max() for v in per_model], rel=1e-12)
            assert (out.evaluator.work_bound <= np.mean([v.max() for v in per_model]) * (1 + 1e-12)).all()


THREE = "model=[gpt2,opt,bertlarge]"


def test_early_stopped_model_bounds_stay_above_the_mean_and_keep_the_optimum(base):
    """A several-model bound or evaluation stopped early (the models bounded so far plus the rest at their
    bounds cannot beat `beat`) is still at least the exact mean at every point and every level, never more
    than `beat` when it stops, and the branch-and-bound study finds the exhaustive optimum while it skips models."""
    exhaustive = SpaceEvaluator(study_spec(compose_config(*base, THREE)))
    exact = np.array([exhaustive.evaluate(i).throughput_seq_s for i in range(len(exhaustive))])
    assert exhaustive.models_skipped == 0
    for level in (0.8, 1.0, 1.2):
        ev = SpaceEvaluator(study_spec(compose_config(*base, THREE)))
        beat = level * exact.max()
        placement = np.array([ev.placement_bound(i, beat) for i in range(len(ev))])
        listed = np.array([ev.schedule_bound(i, beat) for i in range(len(ev))])
        evaluations = [ev.evaluate(i, beat) for i in range(len(ev))]
        value = np.array([e.throughput_seq_s for e in evaluations])
        stopped = np.array([not e.exact for e in evaluations])
        for upper in (placement, listed, value):
            assert (upper >= exact * (1 - 1e-12)).all()
        assert (value[stopped] <= beat * (1 + 1e-12)).all()
        assert value[~stopped] == pytest.approx(exact[~stopped], rel=1e-12)
        if level > 1:  # nothing beats it: every evaluation stops once the mean is shown to be at most beat
            assert stopped.all() and ev.models_skipped > 0
    # the study of the best alone: a top-5 study of this small space completes 5 points before it has a value to beat
    out = run_study(study_spec(compose_config(*base, THREE, "search=bound", "search.model_caps=false", "search.top_n=1")), progress=False)
    assert out.best.throughput_seq_s == pytest.approx(exact.max(), rel=1e-12)
    assert out.evaluator.models_skipped > 0 and np.isinf(out.evaluator.caps).all()


def test_common_study_reuses_the_models_own_studies(base, tmp_path):
    """With search.model_caps the common study takes each model's cap from that model's own study in the same storage:
    studies run before are resumed as they are (no new trial), and their best values are the caps."""
    shared = [o for o in base if not o.startswith("search.storage=")] + [f"search.storage=sqlite:///{tmp_path / 'studies.db'}", "search=bound"]
    own = {m: run_study(study_spec(compose_config(*shared, f"model={m}")), progress=False) for m in ("gpt2", "opt")}
    out = run_study(study_spec(compose_config(*shared, "model=[gpt2,opt]")), progress=False)
    assert out.evaluator.caps == pytest.approx([own[m].best.throughput_seq_s for m in ("gpt2", "opt")], rel=1e-12)
    studies = optuna.get_all_study_summaries(f"sqlite:///{tmp_path / 'studies.db'}")
    assert sorted(s.study_name.split("-")[0] for s in studies) == ["gpt2", "gpt2+opt", "opt"]  # the models' studies, not new ones
    assert {s.study_name: s.n_trials for s in studies if "+" not in s.study_name} == {o.evaluator.spec.name: o.n_trials for o in own.values()}
