"""The pipeline timeline (phaze.report.timeline) is laid out from the cost model that times the plan: its last block
ends at the plan's time per batch, for 1F1B and interleaved schedules and both step models."""

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from phaze.placement import evaluate_fixed
from phaze.placement.breakdown import step_tail
from phaze.placement.plan import evaluate_plan
from phaze.report.timeline import COLORS, ROW_IN, plan_blocks, rank_order, schedule_blocks, timeline_figure
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


def one_stage_input():
    """Four layers (forward 1 s, backward 2 s at TP 1 or 2) with TP communication, 1 GB of weights each and an Adam
    update reading 25 bytes per weight byte at 1e11 B/s: every part of a one-stage step is there."""
    ones = np.ones((1, 2, 4))
    return uniform_chain(4, 4, 8, tp_values=np.array([1, 2]), fwd_s=ones, bwd_s=2 * ones, tp_comm_fwd_s=0.1 * ones,
                         tp_comm_bwd_s=0.1 * ones, param_bytes=1e9 * ones, saved_bytes=ones, input_bytes=0 * ones,
                         output_bytes=0 * ones, optimizer="adam", hbm_bytes_s=1e11,
                         update_bytes_per_param_byte=25.0)


def test_a_one_stage_plan_draws_its_forward_backward_communication_and_optimizer():
    """pp = 1 (data and tensor parallel only): one row of m forward and m backward blocks, then the step's tail, whose
    bars of each kind add up to the stage's modelled time of that kind, and to the time per batch."""
    inp = one_stage_input()
    cost = evaluate_plan(inp, evaluate_fixed(inp, dp=2, pp=1, tp=2, mbs=1, recompute="none", zero=1).strategy.to_plan())
    parts, tail, m = cost.stage_time_parts[0], step_tail(cost), cost.microbatches
    assert m == 4 and parts["tp"] > 0 and tail["dp_comm_s"] > 0 and tail["optimizer_s"] > 0
    expected_s = {"forward": m * parts["fwd"], "backward": m * parts["bwd"],
                  "communication": m * (parts["tp"] + parts["p2p"] + parts["zero"]) + tail["dp_comm_s"], "optimizer": tail["optimizer_s"]}
    ax = timeline_figure(cost).axes[0]
    bars = {c.get_label(): c for c in ax.collections}
    assert set(bars) == set(expected_s)
    for kind, collection in bars.items():
        assert tuple(collection.get_facecolor()[0]) == pytest.approx(to_rgba(COLORS[kind]))
        widths = [path.get_extents().width for path in collection.get_paths()]
        assert sum(widths) == pytest.approx(expected_s[kind], abs=1e-9), kind
    assert len(bars["forward"].get_paths()) == len(bars["backward"].get_paths()) == m
    assert len(bars["optimizer"].get_paths()) == 1 and len(bars["communication"].get_paths()) == 2 * m + 1
    assert sum(expected_s.values()) == pytest.approx(cost.time_per_batch_s, abs=1e-9)
    height = ax.get_window_extent().height / ax.figure.dpi
    assert height >= ROW_IN  # the row is drawn, not squeezed out by the title and the time axis
