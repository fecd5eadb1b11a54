"""Optuna's NSGA-II (`search=nsga2`): throughput against chip area, for search.n_trials trials."""

from __future__ import annotations

import optuna

from phaze.search.strategies.base import Strategy


class NSGA2Strategy(Strategy):
    """NSGA-II seeded with search.seed plus the worker's index; a point is pruned when a finished one dominates its bound."""

    name = "nsga2"
    multi_objective = True

    def sampler(self, search_cfg, evaluator, *, claims=None, seed_offset: int = 0) -> optuna.samplers.NSGAIISampler:
        return optuna.samplers.NSGAIISampler(seed=int(search_cfg.seed) + seed_offset)
