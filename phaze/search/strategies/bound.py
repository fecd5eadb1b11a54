"""Branch and bound (`search=bound`): the points by decreasing work bound, the first dominated one stops the study."""

from __future__ import annotations

from phaze.search.strategies.base import OrderedStrategy
from phaze.search.strategies.claimed_order import ClaimedOrderSampler


class BoundStrategy(OrderedStrategy):
    """Exact branch and bound: with several workers each point is claimed before its bound is computed, and points that
    share their layer schedules (HBM siblings) are left to the worker already at them (ClaimedOrderSampler)."""

    name = "bound"
    branch_and_bound = True

    def sampler(self, search_cfg, evaluator, *, claims=None, seed_offset: int = 0) -> ClaimedOrderSampler:
        several = int(search_cfg.n_workers) > 1
        return ClaimedOrderSampler(evaluator.order_by_bound(), claims, claim_first=several,
                                   siblings=evaluator.sibling_groups() if several else None)
