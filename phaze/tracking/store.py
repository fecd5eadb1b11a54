"""Where runs go and how a finished job is logged.

MLflow 3 refuses a plain `./mlruns` file store (docs/dependencies.md §1.1), so the default store is an
SQLite database inside the project's `mlruns/` folder, with artifacts beside it.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

DEFAULT_DIR = "mlruns"
DB_NAME = "mlflow.db"
ARTIFACTS_DIR = "artifacts"


def resolve_tracking_uri(uri: str | None, root: Path | None = None) -> str:
    """The configured URI, else $MLFLOW_TRACKING_URI, else sqlite:///<root>/mlruns/mlflow.db."""
    if uri:
        return uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    folder = (root or Path.cwd()) / DEFAULT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(folder / DB_NAME).resolve()}"


SQLITE_PREFIX = "sqlite:///"


@contextmanager
def sqlite_creation_lock(uri: str):
    """Hold an exclusive file lock beside an SQLite store while it may be created: MLflow's schema
    migrations fail when two processes create the same fresh database at once (measured:
    `table _alembic_tmp_experiments already exists`, docs/dependencies.md §1.3). Other URIs need no lock."""
    if not uri.startswith(SQLITE_PREFIX):
        yield
        return
    lock_path = Path(uri[len(SQLITE_PREFIX):]).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
CLASSIC_ML_KIND = "custom_model_development"
"""The experiment tag MLflow 3's UI reads to choose an experiment's page, and its value for the classic machine-learning
view (runs table, charts, compare): without it the UI infers the GenAI view (traces, evaluations, the assistant)."""


def experiment_id(client, name: str, uri: str) -> str:
    """The experiment's id, creating it with artifacts under mlruns/artifacts for a local SQLite store, and tagged to open
    in MLflow's classic machine-learning view (an existing experiment is tagged too).

    `client` is the `mlflow` module or an `MlflowClient`: both offer these calls. Callers that may
    create the store hold `sqlite_creation_lock(uri)` around the client's first use.
    """
    from mlflow.exceptions import MlflowException

    existing = client.get_experiment_by_name(name)
    if existing is None:
        artifact_location = None
        if uri.startswith(SQLITE_PREFIX):
            artifact_location = (Path(uri[len(SQLITE_PREFIX):]).parent / ARTIFACTS_DIR).resolve().as_uri()
        try:
            client.create_experiment(name, artifact_location=artifact_location, tags={EXPERIMENT_KIND_TAG: CLASSIC_ML_KIND})
        except MlflowException:  # another worker created it first (the name is unique)
            pass
        existing = client.get_experiment_by_name(name)
        if existing is None:
            raise MlflowException(f"experiment {name!r} could not be created in {uri}")
    if existing.tags.get(EXPERIMENT_KIND_TAG) != CLASSIC_ML_KIND:
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=uri).set_experiment_tag(existing.experiment_id, EXPERIMENT_KIND_TAG, CLASSIC_ML_KIND)
    return existing.experiment_id


def log_summary_run(uri: str, experiment: str, run_name: str, params: dict, metrics: dict, config_yaml: str, tags: dict | None = None,
                    tables: dict | None = None, figures: dict | None = None) -> str:
    """Log one run (params, metrics, tags, the resolved config as `config.yaml`, pandas tables as CSV and
    matplotlib figures as PNG, each under its file name); returns its run id."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    with sqlite_creation_lock(uri):
        exp_id = experiment_id(mlflow, experiment, uri)
    with mlflow.start_run(experiment_id=exp_id, run_name=run_name) as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        mlflow.set_tags(tags or {})
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(config_yaml)
            mlflow.log_artifact(str(path))
            for name, frame in (tables or {}).items():
                frame.to_csv(Path(tmp) / name, index=False)
                mlflow.log_artifact(str(Path(tmp) / name))
            for name, fig in (figures or {}).items():
                fig.savefig(Path(tmp) / name, dpi=120, bbox_inches="tight")
                mlflow.log_artifact(str(Path(tmp) / name))
        return run.info.run_id
