"""Optuna samplers by name (`search.sampler`), under the names their callers import: the strategies' registry
(phaze.search.strategies) and the claimed-order sampler that grid and branch and bound share."""

from phaze.search.strategies import SAMPLERS, make_sampler
from phaze.search.strategies.claimed_order import BOUND_STOP_ATTR, ClaimedOrderSampler, SpaceExhausted

__all__ = ["BOUND_STOP_ATTR", "SAMPLERS", "ClaimedOrderSampler", "SpaceExhausted", "make_sampler"]
