"""MLflow front for the rest of phaze: the only package that imports mlflow."""

from phaze.tracking.store import experiment_id, log_summary_run, resolve_tracking_uri
from phaze.tracking.params import dashboard_url, parent_run_name, study_params
from phaze.tracking.study import (BOUND_PREFIX, EVALUATED, INFEASIBLE, OBJECTIVE_METRICS, PRUNED, PRUNED_BY_TAG, STATUS_TAG, StudyTracker,
                                  TrialRecord)

__all__ = ["BOUND_PREFIX", "EVALUATED", "INFEASIBLE", "OBJECTIVE_METRICS", "PRUNED", "PRUNED_BY_TAG", "STATUS_TAG", "StudyTracker",
           "TrialRecord", "dashboard_url", "experiment_id", "log_summary_run", "parent_run_name", "resolve_tracking_uri", "study_params"]
