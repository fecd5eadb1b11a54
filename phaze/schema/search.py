"""search= and tracking=: the Optuna study over the architecture space and where MLflow logs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class SearchCfg:
    """The Optuna study over the architecture space."""

    sampler: str = "tpe"  # bound | grid | tpe | nsga2 | pareto (phaze.search.strategies.SAMPLERS)
    n_trials: int = 200
    # Stop proposing trials after this many seconds of search (null: no limit); a resumed study runs again as long.
    timeout_s: Optional[float] = None
    seed: int = 0
    objective: str = "throughput"  # throughput | throughput_per_tdp
    prune: bool = True
    # Branch and bound keeps only points that could beat the best by more than this fraction: 0 finds the optimum
    # (of the scheduled latencies); 0.01 proves the answer within 1% of it, as a MILP's relative gap does.
    rel_gap: float = 0.0
    # The study's answer is its N best designs, exactly: branch and bound prunes against the N-th best value found (1:
    # the best alone, the cheapest). nsga2 and pareto answer with a Pareto front instead and take 1 (conf/search).
    top_n: int = 5
    # A common study (several models, search=bound) first runs each model's own study and caps the model's
    # throughput at every point by its optimum: far tighter than the work bound, at the cost of those studies.
    model_caps: bool = True
    storage: Optional[str] = None
    study_name: Optional[str] = None
    # Worker processes on this machine running the study; more machines may join the same storage.
    n_workers: int = 1
    # A running trial's heartbeat period; a trial silent for the grace period belongs to a dead process
    # and is failed and retried (phaze/search/resume.py). Trials take ~0.1-10 s, so a dead worker is
    # noticed within half a minute while a live one, slowed by a loaded machine, is never mistaken for dead.
    heartbeat_interval_s: int = 5
    grace_period_s: int = 30
    placement: str = "searched"  # searched (placement DP per point) | expert (model.expert held fixed: hardware-only search)


@dataclass
class TrackingCfg:
    """Where MLflow logs; null uri: $MLFLOW_TRACKING_URI, else an SQLite file inside mlruns/."""

    uri: Optional[str] = None
    experiment: str = "phaze"
    enabled: bool = True
