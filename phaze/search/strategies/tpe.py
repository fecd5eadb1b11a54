"""Optuna's tree-structured Parzen estimator (`search=tpe`) over the point index, for search.n_trials trials."""

from __future__ import annotations

import optuna

from phaze.search.strategies.base import Strategy


class TPEStrategy(Strategy):
    """TPE seeded with search.seed plus the worker's index."""

    name = "tpe"

    def sampler(self, search_cfg, evaluator, *, claims=None, seed_offset: int = 0) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(seed=int(search_cfg.seed) + seed_offset)
