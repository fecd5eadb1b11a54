"""tracking.*: the MLflow experiment name and tracking URI."""

from __future__ import annotations

import os

from phaze.checks.storage import check_database_url
from phaze.config_values import ConfigError

FILE_STORE_SCHEMES = ("", "file")
"""URI schemes of MLflow's filesystem tracking store, which MLflow 3 refuses to build unless MLFLOW_ALLOW_FILE_STORE=true
(mlflow/store/tracking/file_store.py; docs/dependencies.md §1.1)."""


def check_tracking(t) -> None:
    """The MLflow experiment name and tracking URI."""
    if not str(t.experiment).strip():
        raise ConfigError("tracking.experiment='': allowed values are non-empty names")
    if t.uri is not None and not str(t.uri).strip():
        raise ConfigError("tracking.uri='': allowed values are null ($MLFLOW_TRACKING_URI or mlruns/) or a tracking URI")
    uri = t.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if t.enabled and uri:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
        from mlflow.store.db.db_types import DATABASE_ENGINES
        from mlflow.utils.uri import get_uri_scheme

        field = "tracking.uri" if t.uri else "$MLFLOW_TRACKING_URI"
        allowed = "null (mlruns/mlflow.db here), sqlite:///path.db, postgresql://..., http(s)://<mlflow server>"
        scheme = get_uri_scheme(str(uri))
        if scheme in FILE_STORE_SCHEMES and not MLFLOW_ALLOW_FILE_STORE.get():
            raise ConfigError(f"{field}={str(uri)!r}: MLflow refuses a filesystem tracking store (unless MLFLOW_ALLOW_FILE_STORE=true); "
                              f"allowed: {allowed}")
        if scheme.split("+")[0] in DATABASE_ENGINES:
            check_database_url(str(uri), field, allowed)
