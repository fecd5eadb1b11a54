"""The study's ranking: the value a point must beat to enter the top search.top_n, and the top N trials themselves."""

from __future__ import annotations

import optuna

from phaze.tracking import BOUND_PREFIX, INFEASIBLE, OBJECTIVE_METRICS, PRUNED, PRUNED_BY_TAG, STATUS_TAG

POINT_PARAM = "point"
"""The trial parameter holding the point's index in the sorted point table."""
RECORD_ATTR = "mlflow_record"
"""User attribute holding a finished trial's MLflow child run (params, metrics, tags), as logged."""


def top_n_of(search) -> int:
    """search.top_n (`search`: SearchCfg): how many best designs the study ranks exactly."""
    return int(search.top_n)


def value_to_beat(done: list[optuna.trial.FrozenTrial], n: int) -> float | None:
    """The objective value a point must exceed to enter the top n of the completed trials `done`: the n-th best value
    over their distinct points (a point a sampler proposed twice counts once), the best for n=1; None while fewer than n
    points completed (nothing to beat yet).

    A point whose bound is at most this value is pruned, ties included (as a study of its best always did): a point
    that ties the n-th best is left out for the one completed first, so the top n's values are exactly the space's n
    best and its points are the space's except among those tied at the n-th place."""
    values = sorted({t.params[POINT_PARAM]: t.values[0] for t in done}.values(), reverse=True)
    return values[n - 1] if len(values) >= n else None


def latest_nth(study: optuna.Study, n: int) -> float | None:
    """value_to_beat over the study's completed trials now (one query for its best where n=1)."""
    if n == 1:
        try:
            return study.best_value
        except ValueError:  # no trial completed yet
            return None
    return value_to_beat(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)), n)


def top_trials(done: list[optuna.trial.FrozenTrial], n: int) -> list[optuna.trial.FrozenTrial]:
    """The first completed trial of each of the n distinct points with the best values that fit (value > 0, and its
    record, where it has one, not `infeasible`: with several models, one model that fits nowhere), best first; among
    equal values the earlier trial first (as Optuna's best trial)."""
    first: dict[int, optuna.trial.FrozenTrial] = {}
    for t in sorted(done, key=lambda t: t.number):
        first.setdefault(t.params[POINT_PARAM], t)
    ranked = sorted((t for t in first.values() if t.values[0] > 0 and trial_status(t) != INFEASIBLE), key=lambda t: (-t.values[0], t.number))
    return ranked[:n]


def to_beat(search, best: float) -> float:
    """The objective value a point must exceed to matter: the best so far, raised by search.rel_gap (a
    study that stops proves its best within that fraction of the optimum, as a MILP's relative gap does)."""
    return best * (1.0 + float(search.rel_gap))


def pruned_by(trial: optuna.trial.FrozenTrial, objective: str = "throughput") -> tuple[float, str]:
    """(bound on the objective, stage) that pruned a trial, from its record; (NaN, "") for one that was not pruned."""
    record = trial.user_attrs.get(RECORD_ATTR) or {}
    if record.get("tags", {}).get(STATUS_TAG) != PRUNED:
        return float("nan"), ""
    return float(record["metrics"][f"{BOUND_PREFIX}{OBJECTIVE_METRICS[objective]}"]), str(record["tags"][PRUNED_BY_TAG])


def trial_status(trial: optuna.trial.FrozenTrial) -> str:
    """The trial's child-run status (evaluated, pruned, infeasible) from its record; its Optuna state without one."""
    record = trial.user_attrs.get(RECORD_ATTR) or {}
    return str(record.get("tags", {}).get(STATUS_TAG, trial.state.name.lower()))
