"""Search strategies by name (`search.sampler`), one module each: the only place where a sampler's name is read."""

from __future__ import annotations

import optuna

from phaze.search.strategies.base import OrderedStrategy, Strategy
from phaze.search.strategies.bound import BoundStrategy
from phaze.search.strategies.grid import GridStrategy
from phaze.search.strategies.nsga2 import NSGA2Strategy
from phaze.search.strategies.pareto import ParetoStrategy
from phaze.search.strategies.tpe import TPEStrategy

STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (BoundStrategy, GridStrategy, TPEStrategy, NSGA2Strategy, ParetoStrategy)}
SAMPLERS = tuple(STRATEGIES)
"""The allowed values of search.sampler."""


def strategy_of(name: str) -> Strategy:
    """The strategy named `name` (search.sampler, which SearchCfg checks against phaze.schema.choices.Sampler, the names of SAMPLERS)."""
    return STRATEGIES[name]()


def make_sampler(search_cfg, evaluator, claims=None, seed_offset: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler of the strategy search.sampler names, for the worker whose index is `seed_offset`."""
    return strategy_of(search_cfg.sampler).sampler(search_cfg, evaluator, claims=claims, seed_offset=seed_offset)


__all__ = ["BoundStrategy", "GridStrategy", "NSGA2Strategy", "OrderedStrategy", "ParetoStrategy", "SAMPLERS", "STRATEGIES",
           "Strategy", "TPEStrategy", "make_sampler", "strategy_of"]
