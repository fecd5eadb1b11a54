"""search.*: sampler, objective, placement, trial and worker counts, heartbeats and the study's storage."""

from __future__ import annotations

from phaze.checks.storage import check_storage
from phaze.checks.values import choice, positive
from phaze.config_values import ConfigError, positive_ints
from phaze.search.evaluator import PLACEMENTS
from phaze.search.strategies import SAMPLERS
from phaze.search.study import OBJECTIVES, storage_url

MEMORY = "memory"
"""search.storage of a study kept in this process's memory (Optuna's InMemoryStorage): no other worker can share it."""
FRONT_SAMPLERS = ("nsga2", "pareto")
"""Samplers whose answer is a Pareto front (throughput against area, TDP), so search.top_n ranks nothing there."""


def check_top_n(s) -> None:
    """search.top_n: a positive integer, and 1 for the samplers whose answer is a Pareto front, not a ranking."""
    if isinstance(s.top_n, bool) or not isinstance(s.top_n, int) or s.top_n <= 0:
        raise ConfigError(f"search.top_n={s.top_n!r}: allowed values are positive integers (the designs the study ranks exactly)")
    if s.sampler in FRONT_SAMPLERS and s.top_n != 1:
        raise ConfigError(f"search.top_n={s.top_n}: allowed with search={s.sampler}: 1 (its answer is a Pareto front, not a ranking)")


def check_search(cfg) -> None:
    """Sampler, objective, trial and worker counts, heartbeats, and a storage the workers can share."""
    s = cfg.search
    choice(s.sampler, "search.sampler", SAMPLERS)
    choice(s.objective, "search.objective", OBJECTIVES)
    choice(s.placement, "search.placement", PLACEMENTS)
    if s.get("timeout_s") is not None:
        positive(s.timeout_s, "search.timeout_s")
    if s.sampler == "pareto" and s.objective != "throughput":
        raise ConfigError(f"search.objective={s.objective!r}: search=pareto trades throughput against area and TDP; allowed: throughput")
    if s.objective == "throughput_per_tdp" and s.sampler == "nsga2":
        raise ConfigError("search.objective=throughput_per_tdp: allowed with samplers bound, grid, tpe (nsga2 optimises throughput vs area)")
    positive_ints(s.n_trials, "search.n_trials")
    check_top_n(s)
    positive_ints(s.n_workers, "search.n_workers")
    positive_ints(s.heartbeat_interval_s, "search.heartbeat_interval_s")
    positive_ints(s.grace_period_s, "search.grace_period_s")
    if s.grace_period_s <= s.heartbeat_interval_s:
        raise ConfigError(f"search.grace_period_s={s.grace_period_s}: allowed values are > search.heartbeat_interval_s={s.heartbeat_interval_s} "
                          "(a live trial beats at least once per grace period)")
    positive(s.seed, "search.seed", allow_zero=True)
    if not (isinstance(s.rel_gap, (int, float)) and 0 <= s.rel_gap < 1):
        raise ConfigError(f"search.rel_gap={s.rel_gap!r}: allowed values are numbers in [0, 1)")
    if s.study_name is not None and not str(s.study_name).strip():
        raise ConfigError("search.study_name='': allowed values are null (derived from the config) or a non-empty name")
    if s.storage == MEMORY and s.n_workers > 1:
        raise ConfigError(f"search.n_workers={s.n_workers}: needs a shared search.storage (sqlite:///..., postgresql://...), not memory")
    check_storage(storage_url(cfg) if s.storage != MEMORY else None)
