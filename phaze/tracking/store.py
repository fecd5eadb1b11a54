"""Where runs go and how a finished job is logged.

MLflow 3 refuses a plain `./mlruns` file store (ecosystem.md §1.1), so the default store is an
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
    `table _alembic_tmp_experiments already exists`, ecosystem.md §1). Other URIs need no lock."""
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


def experiment_id(client, name: str, uri: str) -> str:
    """The experiment's id, creating it with artifacts under mlruns/artifacts for a local SQLite store.

    `client` is the `mlflow` module or an `MlflowClient`: both offer these two calls. Callers that may
    create the store hold `sqlite_creation_lock(uri)` around the client's first use.
    """
    from mlflow.exceptions import MlflowException

    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    artifact_location = None
    if uri.startswith(SQLITE_PREFIX):
        artifact_location = (Path(uri[len(SQLITE_PREFIX):]).parent / ARTIFACTS_DIR).resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except MlflowException:  # another worker created it first (the name is unique)
        existing = client.get_experiment_by_name(name)
        if existing is None:
            raise
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
