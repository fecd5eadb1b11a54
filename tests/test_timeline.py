"""The pipeline timeline (phaze.report.timeline) is laid out from the cost model that times the plan: its last block
ends at the plan's time per batch, for 1F1B and interleaved schedules and both step models."""

import numpy as np
import pytest

from phaze.placement import evaluate_fixed
from phaze.placement.plan import evaluate_plan
from phaze.report.timeline import plan_blocks, rank_order, schedule_blocks, timeline_figure
from tests.test_modern_parallelism import uniform_chain
from tests.test_placement_cost import chain


@pytest.mark.parametrize("pp, vp, m", [(1, 1, 4), (2, 1, 1), (4, 1, 3), (4, 1, 8), (2, 2, 4), (4, 2, 8), (4, 4, 4), (8, 3, 16)])
def test_megatron_schedule_takes_m_plus_p_minus_1_over_v_slots(pp, vp, m):
    """Forward 1 s and backward 2.3 s a microbatch, split over vp chunks: the last block ends at 3.3 (m + (p - 1) / v)."""
    blocks = schedule_blocks(pp, vp, m, 1.0, 2.3)
    assert max(b.end_s for b in blocks) == pytest.approx(3.3 * (m + (pp - 1) / vp), rel=1e-12)
    assert len(blocks) == 2 * pp * vp * m
    for rank in range(pp):  # no rank runs two blocks at once
        spans = sorted((b.start_s, b.end_s) for b in blocks if b.rank == rank)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))


def test_rank_order_is_megatrons_warm_up_then_one_forward_one_backward():
    # rank 0 of 4, vp 2, 8 microbatches: (4 - 0 - 1) x 2 + (2 - 1) x 4 = 10 warm-up forwards
    order = rank_order(0, 4, 2, 8)
    assert [k for k, _, _ in order[:11]] == ["F"] * 10 + ["F"]
    assert [k for k, _, _ in order[10:14]] == ["F", "B", "F", "B"]
    assert order[0] == ("F", 0, 0) and order[4] == ("F", 0, 1) and order[10] == ("F", 6, 0)
    assert sorted(order) == sorted({(k, mb, c) for k in "FB" for mb in range(8) for c in range(2)})


@pytest.mark.parametrize("inp, plan", [
    (chain(), dict(dp=2, pp=2, tp=1, mbs=1, recompute=False)),  # PHAZE's step: the all-reduce after the flush
    (uniform_chain(16, 4, 8), dict(dp=1, pp=4, tp=1, mbs=1, recompute="none", vp=2)),  # timeline step, interleaved
    (uniform_chain(16, 4, 8), dict(dp=1, pp=2, tp=1, mbs=1, recompute="full")),
])
def test_the_timeline_of_a_plan_ends_at_its_time_per_batch(inp, plan):
    result = evaluate_fixed(inp, **plan)
    cost = evaluate_plan(inp, result.strategy.to_plan())
    blocks = plan_blocks(cost)
    assert max(b.end_s for b in blocks) == pytest.approx(result.time_per_batch_s, rel=1e-12)
    assert np.isclose(cost.time_per_batch_s, result.time_per_batch_s)
    assert timeline_figure(cost).axes[0].get_xlabel() == "time in the step (s)"
