"""MLflow front for the rest of phaze: the only package that imports mlflow."""

from phaze.tracking.store import experiment_id, log_summary_run, resolve_tracking_uri
from phaze.tracking.study import StudyTracker, TrialRecord

__all__ = ["StudyTracker", "TrialRecord", "experiment_id", "log_summary_run", "resolve_tracking_uri"]
