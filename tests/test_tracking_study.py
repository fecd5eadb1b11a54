"""MLflow study tracking: one parent run, one child per trial, no duplicates on resume."""

import mlflow
import pandas as pd
import pytest

from phaze.tracking import StudyTracker, TrialRecord

CHILD_METRICS = ["throughput_seq_s", "area_mm2", "time_per_batch_s", "mfu", "memory_per_device_gib", "ilp_s", "dp_s"]


def _record(n: int, pruned: bool = False) -> TrialRecord:
    metrics = {m: float(n + i) for i, m in enumerate(CHILD_METRICS)}
    params = {"hw.n_tc": 2**n, "hw.tc_rows": 128, "train.mbs": 2, "train.recompute": False, "place.dp": 4, "place.pp": 2, "place.tp": 1}
    return TrialRecord(n, params, metrics, {"pruned": pruned})


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
    for column in [f"metrics.{m}" for m in CHILD_METRICS] + ["params.hw.n_tc", "params.place.dp", "params.place.pp", "params.place.tp", "params.train.mbs", "tags.pruned"]:
        assert column in runs.columns, column
    assert runs["tags.pruned"].eq("True").sum() == 3
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
