"""search= and tracking=: the Optuna study over the architecture space and where MLflow logs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from phaze.config_values import ConfigError, choice, positive, positive_ints
from phaze.schema.choices import Objective, PlacementSearch, Sampler

MEMORY = "memory"
"""search.storage of a study kept in this process's memory (Optuna's InMemoryStorage): no other worker can share it."""
FRONT_SAMPLERS = (Sampler.nsga2, Sampler.pareto)
"""Samplers whose answer is a Pareto front (throughput against area, TDP), so search.top_n ranks nothing there."""


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

    def __post_init__(self) -> None:
        """The study's own rules: a known sampler, objective and placement that go together, positive counts, a grace
        period longer than a heartbeat, a gap in [0, 1), and a shared storage for several workers."""
        choice(self.sampler, "search.sampler", Sampler.values())
        choice(self.objective, "search.objective", Objective.values())
        choice(self.placement, "search.placement", PlacementSearch.values())
        if self.timeout_s is not None:
            positive(self.timeout_s, "search.timeout_s")
        if self.sampler == Sampler.pareto and self.objective != Objective.throughput:
            raise ConfigError(f"search.objective={self.objective!r}: search=pareto trades throughput against area and TDP; allowed: throughput")
        if self.objective == Objective.throughput_per_tdp and self.sampler == Sampler.nsga2:
            raise ConfigError("search.objective=throughput_per_tdp: allowed with samplers bound, grid, tpe (nsga2 optimises throughput vs area)")
        positive_ints(self.n_trials, "search.n_trials")
        if isinstance(self.top_n, bool) or not isinstance(self.top_n, int) or self.top_n <= 0:
            raise ConfigError(f"search.top_n={self.top_n!r}: allowed values are positive integers (the designs the study ranks exactly)")
        if self.sampler in FRONT_SAMPLERS and self.top_n != 1:
            raise ConfigError(f"search.top_n={self.top_n}: allowed with search={self.sampler}: 1 (its answer is a Pareto front, not a ranking)")
        positive_ints(self.n_workers, "search.n_workers")
        positive_ints(self.heartbeat_interval_s, "search.heartbeat_interval_s")
        positive_ints(self.grace_period_s, "search.grace_period_s")
        if self.grace_period_s <= self.heartbeat_interval_s:
            raise ConfigError(f"search.grace_period_s={self.grace_period_s}: allowed values are > search.heartbeat_interval_s="
                              f"{self.heartbeat_interval_s} (a live trial beats at least once per grace period)")
        positive(self.seed, "search.seed", allow_zero=True)
        if not (isinstance(self.rel_gap, (int, float)) and 0 <= self.rel_gap < 1):
            raise ConfigError(f"search.rel_gap={self.rel_gap!r}: allowed values are numbers in [0, 1)")
        if self.study_name is not None and not str(self.study_name).strip():
            raise ConfigError("search.study_name='': allowed values are null (derived from the config) or a non-empty name")
        if self.storage == MEMORY and self.n_workers > 1:
            raise ConfigError(f"search.n_workers={self.n_workers}: needs a shared search.storage (sqlite:///..., postgresql://...), not memory")


@dataclass
class TrackingCfg:
    """Where MLflow logs; null uri: $MLFLOW_TRACKING_URI, else an SQLite file inside mlruns/."""

    uri: Optional[str] = None
    experiment: str = "phaze"
    enabled: bool = True
