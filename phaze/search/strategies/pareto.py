"""Exact Pareto fronts (`search=pareto`): throughput against area and TDP, computed by phaze.search.pareto."""

from __future__ import annotations

from phaze.search.strategies.base import Strategy


class ParetoStrategy(Strategy):
    """The exact fronts visit the points by cost themselves (phaze.search.pareto.exact_front): no Optuna sampler."""

    name = "pareto"

    def sampler(self, search_cfg, evaluator, *, claims=None, seed_offset: int = 0):
        raise ValueError("search.sampler='pareto' computes exact fronts (phaze.search.pareto.exact_fronts), not an Optuna study")
