"""MLflow runs of a search: one parent run per study, one child run per trial.

Children are written with `MlflowClient.log_batch` (one call for all of a trial's params, metrics
and tags: ~15 ms per run on SQLite against ~21 ms for the fluent API, docs/dependencies.md §1.3), by the
process that ran the trial, before Optuna records the trial's end (`flush_every=1`), so no other
process ever has to log it and a finished trial always has its run; a larger `flush_every`
buffers for a single process. The time spent is measured and reported. A child carries the
Optuna trial number (param `trial_number`, and a tag set when the run is created), so a trial is
never logged twice, and the run of a trial that died (its process killed after logging, or
mid-write) is closed as FAILED when the study marks the trial failed. Several workers share one
parent: the earliest-started parent of the study wins and a later duplicate, created by a worker
that raced it, is deleted.

Every child says what its numbers are in its tag `status`: `evaluated` (metric `throughput_seq_s`),
`pruned` (tag `pruned_by`: which bound; metric `bound_throughput_seq_s`, an upper bound, never a
throughput) or `infeasible` (fully evaluated, but no placement fits in memory: no throughput).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from phaze.tracking.store import experiment_id, sqlite_creation_lock

PARAM_LOG_ATTEMPTS = 2
"""Workers sharing a study log its params at once: the one whose batch collides with another's reads again and logs
what is left."""

PARENT_TAG = "mlflow.parentRunId"
STUDY_TAG = "phaze.study"
TRIAL_PARAM = "trial_number"
TRIAL_TAG = "phaze.trial_number"
RUN_NAME_TAG = "mlflow.runName"
ROLE_TAG = "phaze_role"
STATUS_TAG = "status"
EVALUATED, PRUNED, INFEASIBLE = "evaluated", "pruned", "infeasible"
"""Values of a child run's STATUS_TAG."""
PRUNED_BY_TAG = "pruned_by"
BOUND_PREFIX = "bound_"
"""A pruned trial's bound is logged as BOUND_PREFIX + the metric it bounds (bound_throughput_seq_s)."""
OBJECTIVE_METRICS = {"throughput": "throughput_seq_s", "throughput_per_tdp": "perf_per_tdp"}
"""The child-run metric that is each search.objective's value."""
CONFIG_ARTIFACT = "config.yaml"
MAX_CHILDREN = 50000
"""search_runs page size; MLflow's SQL store accepts up to 50,000 results per call."""


@dataclass
class TrialRecord:
    number: int
    params: dict
    metrics: dict
    tags: dict = field(default_factory=dict)


class StudyTracker:
    """The parent run of a study and its buffered child runs.

    `run_name` names a parent this tracker creates (default: the study's name); `params` are logged on the parent
    (those it lacks), `config_yaml` as its artifact config.yaml when it has none.
    """

    def __init__(self, uri: str, experiment: str, study_name: str, flush_every: int = 50, run_name: str | None = None,
                 params: dict | None = None, config_yaml: str | None = None):
        from mlflow import MlflowClient

        with sqlite_creation_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            self.experiment_id = experiment_id(self.client, experiment, uri)
        self.study_name = study_name
        self.run_name = run_name or study_name
        self.flush_every = flush_every
        self.buffer: list[TrialRecord] = []
        self.logging_s = 0.0
        self.logged = 0
        self.parent_id = self._parent_run()
        self.known = self._logged_trials()
        if params:
            self.log_params(params)
        if config_yaml is not None and not self.client.list_artifacts(self.parent_id, CONFIG_ARTIFACT):
            self.client.log_text(self.parent_id, config_yaml, CONFIG_ARTIFACT)

    def _parents(self) -> list:
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{STUDY_TAG}` = '{self.study_name}' and tags.{ROLE_TAG} = 'study'",
            order_by=["attributes.start_time ASC", "attributes.run_id ASC"],
        )

    def _parent_run(self) -> str:
        """The study's parent run: the existing one when the study is resumed or shared, else a new one."""
        found = self._parents()
        if not found:
            mine = self.client.create_run(self.experiment_id, run_name=self.run_name, tags={STUDY_TAG: self.study_name, ROLE_TAG: "study"})
            found = self._parents()
            if found[0].info.run_id != mine.info.run_id:  # a worker created one first: keep the earliest
                self.client.delete_run(mine.info.run_id)
        run_id = found[0].info.run_id
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def _children(self) -> list:
        return self.client.search_runs([self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{self.parent_id}'", max_results=MAX_CHILDREN)

    @staticmethod
    def _number(run) -> int | None:
        number = run.data.params.get(TRIAL_PARAM, run.data.tags.get(TRIAL_TAG))
        return None if number is None else int(number)

    def _logged_trials(self) -> set[int]:
        """Trial numbers that have a child run (finished, or closed as failed)."""
        return {n for n in map(self._number, self._children()) if n is not None}

    def close_failed(self, numbers: set[int]) -> int:
        """Mark the child runs of these failed trials FAILED (they died after or while logging); returns how many."""
        closed = 0
        for run in self._children():
            if self._number(run) in numbers and run.info.status != "FAILED":
                self.client.set_terminated(run.info.run_id, status="FAILED")
                closed += 1
        return closed

    def log_params(self, params: dict) -> None:
        """Study-level params on the parent run (values already logged with the same value are fine)."""
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException

        for attempt in range(PARAM_LOG_ATTEMPTS):
            existing = self.client.get_run(self.parent_id).data.params
            new = [Param(k, str(v)) for k, v in params.items() if k not in existing]
            if not new:
                return
            try:
                self.client.log_batch(self.parent_id, params=new)
                return
            except MlflowException:
                if attempt == PARAM_LOG_ATTEMPTS - 1:
                    raise

    def log_trial(self, record: TrialRecord) -> None:
        """Queue one finished or pruned trial; written with the next flush."""
        if record.number in self.known:
            return
        self.known.add(record.number)
        self.buffer.append(record)
        if len(self.buffer) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        from mlflow.entities import Metric, Param

        start = time.perf_counter()
        now_ms = int(time.time() * 1000)
        for rec in self.buffer:
            tags = {PARENT_TAG: self.parent_id, STUDY_TAG: self.study_name, TRIAL_TAG: str(rec.number), ROLE_TAG: "trial",
                    **{k: str(v) for k, v in rec.tags.items()}}
            run_id = self.client.create_run(self.experiment_id, run_name=f"trial-{rec.number}", tags=tags).info.run_id
            params = [Param(TRIAL_PARAM, str(rec.number))] + [Param(k, str(v)) for k, v in rec.params.items()]
            metrics = [Metric(k, float(v), now_ms, 0) for k, v in rec.metrics.items() if v is not None]
            self.client.log_batch(run_id, metrics=metrics, params=params)
            self.client.set_terminated(run_id)
        self.logged += len(self.buffer)
        self.buffer.clear()
        self.logging_s += time.perf_counter() - start

    def finish(self, metrics: dict, tables: dict | None = None, figures: dict | None = None, tags: dict | None = None) -> None:
        """Flush the children, then log the study's metrics, tags, tables (pandas: CSV for a name ending .csv, which
        MLflow's UI shows as a table, else JSON) and figures on the parent."""
        from mlflow.entities import Metric, RunTag

        self.flush()
        now_ms = int(time.time() * 1000)
        self.client.log_batch(self.parent_id, metrics=[Metric(k, float(v), now_ms, 0) for k, v in metrics.items() if v is not None],
                              tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()])
        with tempfile.TemporaryDirectory() as tmp:
            for name, frame in (tables or {}).items():
                path = Path(tmp) / name
                if name.endswith(".csv"):
                    frame.to_csv(path, index=False)
                else:
                    frame.to_json(path, orient="split", index=False)
                self.client.log_artifact(self.parent_id, str(path))
            for name, fig in (figures or {}).items():
                path = Path(tmp) / name
                fig.savefig(path, dpi=120, bbox_inches="tight")
                self.client.log_artifact(self.parent_id, str(path))
        self.client.set_terminated(self.parent_id)

    @property
    def overhead_per_trial_s(self) -> float:
        return self.logging_s / self.logged if self.logged else 0.0
