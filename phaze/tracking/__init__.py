"""MLflow front for the rest of phaze: the only package that imports mlflow."""

from phaze.tracking.store import log_summary_run, resolve_tracking_uri

__all__ = ["log_summary_run", "resolve_tracking_uri"]
