"""The exhaustive grid (`search=grid`): every point once, in a seeded random order shared by all workers."""

from __future__ import annotations

import numpy as np

from phaze.search.strategies.base import OrderedStrategy
from phaze.search.strategies.claimed_order import ClaimedOrderSampler


def grid_order(n_points: int, seed: int) -> np.ndarray:
    """The exhaustive grid's visiting order: a seeded permutation of the points (as Optuna's GridSampler)."""
    return np.random.default_rng(seed).permutation(n_points)


class GridStrategy(OrderedStrategy):
    """Every point, each claimed by one trial; the order is search.seed's, the same in every worker."""

    name = "grid"

    def sampler(self, search_cfg, evaluator, *, claims=None, seed_offset: int = 0) -> ClaimedOrderSampler:
        return ClaimedOrderSampler(grid_order(len(evaluator), int(search_cfg.seed)), claims)
