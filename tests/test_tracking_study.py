"""MLflow study tracking: one parent run, one child per trial, no duplicates on resume; every child says what its numbers
are (status evaluated, pruned or infeasible); the parent tells studies apart (name, params, resolved config, top plans);
experiments open in MLflow's classic machine-learning view."""

import io
import subprocess
import sys

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from phaze.config import compose_config, study_spec
from phaze.report.study import scatter_figure
from phaze.search import run_study
from phaze.search.study import tracker_for
from phaze.tracking import StudyTracker, TrialRecord
from phaze.tracking.store import CLASSIC_ML_KIND, EXPERIMENT_KIND_TAG
from tests.test_search_study import TINY_MODEL

CHILD_METRICS = ["throughput_seq_s", "area_mm2", "time_per_batch_s", "mfu", "memory_per_device_gib", "ilp_s", "dp_s"]


def _record(n: int, pruned: bool = False) -> TrialRecord:
    metrics = {m: float(n + i) for i, m in enumerate(CHILD_METRICS)}
    params = {"hw.n_tc": 2**n, "hw.tc_rows": 128, "train.mbs": 2, "train.recompute": False, "placement.dp": 4, "placement.pp": 2,
              "placement.tp": 1}
    return TrialRecord(n, params, metrics, {"status": "pruned" if pruned else "evaluated"})


@pytest.fixture()
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_one_child_run_per_trial_with_the_columns(uri):
    tracker = StudyTracker(uri, "phaze-test", "study-a", flush_every=3)
    for n in range(7):
        tracker.log_trial(_record(n, pruned=n % 2 == 1))
    tracker.finish({"best.throughput_seq_s": 6.0, "n_trials": 7})
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["phaze-test"], filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}'")
    assert len(runs) == 7
    assert sorted(pd.to_numeric(runs["params.trial_number"]).tolist()) == list(range(7))
    for column in [f"metrics.{m}" for m in CHILD_METRICS] + ["params.hw.n_tc", "params.placement.dp", "params.placement.pp", "params.placement.tp",
                                                              "params.train.mbs", "tags.status"]:
        assert column in runs.columns, column
    assert runs["tags.status"].eq("pruned").sum() == 3
    parent = mlflow.get_run(tracker.parent_id)
    assert parent.data.metrics["best.throughput_seq_s"] == 6.0
    assert tracker.overhead_per_trial_s > 0


def test_resumed_study_does_not_log_a_trial_twice(uri):
    first = StudyTracker(uri, "phaze-test", "study-b", flush_every=100)
    for n in range(4):
        first.log_trial(_record(n))
    first.flush()  # the process dies here: no finish()
    second = StudyTracker(uri, "phaze-test", "study-b")
    assert second.parent_id == first.parent_id
    for n in range(6):  # the resumed loop re-reports finished trials 0..3 and adds 4, 5
        second.log_trial(_record(n))
    second.finish({"n_trials": 6})
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["phaze-test"], filter_string=f"tags.mlflow.parentRunId = '{first.parent_id}'")
    assert sorted(pd.to_numeric(runs["params.trial_number"]).tolist()) == [0, 1, 2, 3, 4, 5]


def test_experiments_open_in_the_classic_view(uri):
    """MLflow 3's UI opens an experiment without the kind tag in its GenAI view: a new experiment gets the tag, and so
    does an existing one that lacked it."""
    client = MlflowClient(tracking_uri=uri)
    old = client.create_experiment("made-elsewhere")
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old).tags
    assert StudyTracker(uri, "made-elsewhere", "study-c").experiment_id == old
    fresh = StudyTracker(uri, "phaze-new", "study-d").experiment_id
    for experiment in (old, fresh):
        assert client.get_experiment(experiment).tags[EXPERIMENT_KIND_TAG] == CLASSIC_ML_KIND == "custom_model_development"


HUGE_VOCAB = ["model.vocab_size=2000000", "hw.hbm_gib=[1,32]"]
"""The tiny model with a 2M-token vocabulary on chips of 1 or 32 GiB: the tied embedding alone holds 2e6 x 256 x 2 B =
0.95 GiB of weights and as much gradient, so no plan fits in 1 GiB; the 32 GiB chips fit (the best plan needs 2.9 GiB)."""


@pytest.mark.slow
def test_every_child_run_says_what_its_numbers_are(tmp_path):
    """A real pruned grid study: every child has a status; evaluated runs carry throughput_seq_s (the value the study
    scored) and no bound; pruned runs a bound and the stage that pruned them, never a throughput; points where no plan
    fits are infeasible, with neither (the study scores them 0, which is not a throughput)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config(*TINY_MODEL, *HUGE_VOCAB, "hw=tiny_grid", "hw.inter_op_parallel=false", "search=grid", "search.storage=memory",
                         f"cache_dir={tmp_path / 'cache'}", f"schedule.cache_dir={tmp_path / 'cache' / 'schedule'}", "tracking.enabled=true",
                         f"tracking.uri={uri}")
    tracker = tracker_for(study_spec(cfg))
    out = run_study(study_spec(cfg), tracker, progress=False)
    tracker.finish({"n_trials": out.n_trials})
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_ids=[tracker.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}'")
    assert len(runs) == out.n_trials == len(out.evaluator)
    assert set(runs["tags.status"]) == {"evaluated", "pruned", "infeasible"}
    values = {t.number: t.value for t in out.study.trials}
    trial = pd.to_numeric(runs["params.trial_number"])
    evaluated, pruned, infeasible = (runs[runs["tags.status"] == s] for s in ("evaluated", "pruned", "infeasible"))
    assert evaluated["metrics.throughput_seq_s"].tolist() == [values[n] for n in trial[evaluated.index]]
    assert (evaluated["metrics.throughput_seq_s"] > 0).all() and evaluated["metrics.bound_throughput_seq_s"].isna().all()
    assert (evaluated["params.hw.hbm_gib"] == "32").all() and evaluated["params.placement.dp"].notna().all()
    assert pruned["metrics.throughput_seq_s"].isna().all() and pruned["tags.pruned_by"].isin(["work_bound", "placement_bound"]).all()
    best = evaluated["metrics.throughput_seq_s"].max()
    assert (pruned["metrics.bound_throughput_seq_s"] <= best).all()  # each was pruned against a best no better than the last
    assert len(infeasible) and (infeasible["params.hw.hbm_gib"] == "1").all()
    assert infeasible[["metrics.throughput_seq_s", "metrics.perf_per_tdp", "metrics.bound_throughput_seq_s", "params.placement.dp"]].isna().all().all()
    assert [values[n] for n in trial[infeasible.index]] == [0.0] * len(infeasible)
    assert infeasible["metrics.area_mm2"].notna().all() and infeasible["metrics.dp_s"].notna().all()
    # throughput_vs_area.png: evaluated throughputs on the left panel, pruned points' bounds on the right, never mixed;
    # the infeasible points only as ticks along the left panel's bottom
    left, right = scatter_figure(out).axes
    (shown_values,), (shown_bounds,) = ([c.get_offsets()[:, 1] for c in ax.collections] for ax in (left, right))
    assert sorted(shown_values) == sorted(evaluated["metrics.throughput_seq_s"])
    assert sorted(shown_bounds) == pytest.approx(sorted(pruned["metrics.bound_throughput_seq_s"]), rel=1e-12)
    ticks = [line for line in left.get_lines() if line.get_label().startswith("infeasible")]
    assert len(ticks) == 1 and len(ticks[0].get_xdata()) == len(infeasible)


STUDY_CLI = [*TINY_MODEL, "hw=tiny_grid", "hw.inter_op_parallel=false", "train=megatron", "search=grid", "search.top_n=3"]


@pytest.mark.slow
def test_the_parent_run_tells_the_study_apart(tmp_path):
    """`python -m phaze.run`: the parent is named after model, space, cluster and train preset and carries the preset's
    step model, optimizer and precision, the devices, global batch and area budget as params, the resolved config as
    config.yaml, the best evaluated plan's metrics and the top-N table (the N best evaluated child runs, best first)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run([sys.executable, "-m", "phaze.run", *STUDY_CLI, f"tracking.uri={uri}", f"cache_dir={tmp_path / 'cache'}",
                           f"schedule.cache_dir={tmp_path / 'cache' / 'schedule'}", f"search.storage=sqlite:///{tmp_path / 'studies.db'}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mlflow.set_tracking_uri(uri)
    parent = mlflow.search_runs(experiment_names=["phaze"], filter_string="tags.phaze_role = 'study'", output_format="list")
    assert len(parent) == 1
    run = parent[0]
    assert run.info.run_name == "gpt2 train=megatron hw=tiny_grid cluster=phaze_1024"
    expected = {"model": "gpt2", "hw": "tiny_grid", "cluster": "phaze_1024", "train": "megatron", "train.step_model": "timeline",
                "train.optimizer": "adam", "train.precision": "bf16", "train.bytes_per_elem": "2", "train.global_batch": "64",
                "cluster.devices": "16", "hw.area_budget_mm2": "6.5", "hw.power_budget_w": "None", "search.sampler": "grid",
                "search.top_n": "3"}
    assert {k: run.data.params[k] for k in expected} == expected
    client = MlflowClient(tracking_uri=uri)
    logged = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
    config_yaml = open(logged).read()
    assert config_yaml == OmegaConf.to_yaml(compose_config(*STUDY_CLI, f"tracking.uri={uri}", f"cache_dir={tmp_path / 'cache'}",
                                                           f"schedule.cache_dir={tmp_path / 'cache' / 'schedule'}",
                                                           f"search.storage=sqlite:///{tmp_path / 'studies.db'}"), resolve=True)
    children = mlflow.search_runs(experiment_names=["phaze"], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}' and tags.status = 'evaluated'",
                                  order_by=["metrics.throughput_seq_s DESC", "params.trial_number ASC"])
    assert len(children) >= 3
    top = pd.read_csv(io.StringIO(open(client.download_artifacts(run.info.run_id, "top_plans.csv", str(tmp_path))).read()))
    assert top["rank"].tolist() == [1, 2, 3]
    assert top["throughput_seq_s"].tolist() == pytest.approx(children["metrics.throughput_seq_s"].head(3).tolist(), rel=1e-12)
    assert top["objective"].tolist() == pytest.approx(top["throughput_seq_s"].tolist(), rel=1e-12)
    assert (top["placement.dp"] * top["placement.pp"] * top["placement.tp"] * top["placement.cp"] <= 16).all()
    best = children.iloc[0]
    assert run.data.metrics["best.throughput_seq_s"] == best["metrics.throughput_seq_s"]
    assert run.data.metrics["best.area_mm2"] == best["metrics.area_mm2"] and run.data.metrics["best.mfu"] == best["metrics.mfu"]
    assert run.data.tags["phaze.best_trial"] == str(top["trial"].iloc[0])
    # gpt2's expert plan (pp=32 x dp=32, conf/model/gpt2.yaml) needs 1024 devices, not 16: the baseline has no throughput to log
    assert not {"baseline.throughput_seq_s", "speedup_vs_baseline"} & set(run.data.metrics)
