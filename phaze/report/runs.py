"""The study's best evaluated trials as their MLflow child runs recorded them: the parent run's top-N table and the
best plan's metrics (pruned and infeasible trials have no throughput to rank)."""

from __future__ import annotations

import math

import optuna
import pandas as pd

from phaze.search.study import RECORD_ATTR, top_trials, trial_status
from phaze.tracking import EVALUATED

BEST_PREFIX = "best."
TOP_TABLE = "top_plans.csv"
"""The parent run's table of the search.top_n best evaluated trials (chip, plan and metrics, best first)."""
BEST_TRIAL_TAG = "phaze.best_trial"
"""The parent run's tag naming the trial number of the best evaluated plan (its child run is trial-<n>)."""


def evaluated_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Completed trials whose record says evaluated, one per point (a duplicate proposal of a point is left out), best
    objective first (the first objective for NSGA-II), ties by trial number: the study's own ranking (top_trials)."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [t for t in top_trials(done, len(done)) if trial_status(t) == EVALUATED]


def top_trials_table(study: optuna.Study, n: int) -> pd.DataFrame:
    """The n best evaluated trials, one row each: rank, trial number, objective value, then the child run's params
    (chip and plan) and metrics under their MLflow names."""
    rows = []
    for rank, t in enumerate(evaluated_trials(study)[:n], start=1):
        record = t.user_attrs[RECORD_ATTR]
        rows.append({"rank": rank, "trial": t.number, "objective": t.values[0], **record["params"], **record["metrics"]})
    return pd.DataFrame(rows)


def best_metrics(study: optuna.Study) -> dict[str, float]:
    """The best evaluated trial's metrics, each prefixed `best.` (empty when no trial was evaluated)."""
    ranked = evaluated_trials(study)
    if not ranked:
        return {}
    return {f"{BEST_PREFIX}{k}": float(v) for k, v in ranked[0].user_attrs[RECORD_ATTR]["metrics"].items()}


def best_trial_number(study: optuna.Study) -> int | None:
    """The number of the best evaluated trial, None without one."""
    ranked = evaluated_trials(study)
    return ranked[0].number if ranked else None


def fitting_throughput(evaluation) -> float | None:
    """An evaluation's mean throughput (sequences/s), None where a model's plan does not fit: the 0 it counts then is
    not a measured throughput (e.g. a baseline chip's expert plan on too few devices)."""
    if evaluation is None or any(r is None or not r.feasible for r in evaluation.results.values()):
        return None
    return evaluation.throughput_seq_s


def finite(value: float | None) -> float | None:
    """The value, None where it is NaN or infinite (a speedup over a baseline that has no throughput)."""
    return value if value is not None and math.isfinite(value) else None
