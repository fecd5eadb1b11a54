"""Framework presets search only plans their framework can launch (train.per_stage_tp, train.stage_layers): the
constrained placement DP against brute force over the constrained space, and every plan it returns keeps the rule."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from phaze.placement import optimize, reference
from phaze.placement.layouts import layouts, rule_breach, stage_layer_counts
from phaze.placement.solve import Space
from tests.test_placement_dp import chains, time_of
from tests.test_placement_space import modern_chains, spaces


def with_embedding_parts(inp, pre: int, post: int):
    """The chain with its first `pre` and last `post` parts taken as the embedding and the loss (not layers)."""
    if inp.num_parts - pre - post < 1:
        return inp
    return dataclasses.replace(inp, num_pre=pre, num_layers=inp.num_parts - pre - post)


def assert_keeps_rule(inp, result, space: Space) -> None:
    s = result.strategy
    assert len(set(s.tp_per_stage)) == 1 and isinstance(s.tp, int)
    assert rule_breach(stage_layer_counts(s.stage_bounds, inp.num_pre, inp.num_layers), space.stage_layers) is None


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), rule=st.sampled_from(["even_middle", "even"]), pre=st.integers(0, 1), post=st.integers(0, 1))
def test_constrained_dp_equals_brute_force(data, rule, pre, post):
    inp = with_embedding_parts(data.draw(chains(max_parts=7)), pre, post)
    space = Space(per_stage_tp=False, stage_layers=rule)
    expected = reference.brute_force(inp, space=space)
    fast = optimize(inp, space=space)
    assert time_of(fast) == pytest.approx(time_of(expected), rel=1e-12)
    assert time_of(reference.optimize(inp, space=space)) == pytest.approx(time_of(expected), rel=1e-12)
    assert time_of(fast) >= time_of(optimize(inp, space=Space(per_stage_tp=False))) * (1 - 1e-12)
    if fast is not None:
        event(f"{rule}: {fast.strategy.pp} stages")
        assert_keeps_rule(inp, fast, space)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=modern_chains(max_parts=6), space=spaces(), rule=st.sampled_from(["even_middle", "even"]), pre=st.integers(0, 1))
def test_constrained_dp_equals_brute_force_over_the_enlarged_space(inp, space, rule, pre):
    inp = with_embedding_parts(inp, pre, pre)
    space = dataclasses.replace(space, per_stage_tp=False, stage_layers=rule)
    expected = reference.brute_force(inp, space=space)
    fast = optimize(inp, space=space)
    assert time_of(fast) == pytest.approx(time_of(expected), rel=1e-12)
    if fast is not None:
        assert_keeps_rule(inp, fast, space)


def test_layouts_allow_exactly_the_rules_splits():
    """Megatron's rule on 8 layers behind an embedding part and before a loss part: first and last stages free (>= 1
    layer), the middle ones one count per layout; the even rule one layout per divisor."""
    even_middle = layouts(1, 8, 10, "even_middle")
    assert [lay.middle_layers for lay in even_middle] == [1, 2, 3, 4, 5, 6]
    three = even_middle[2]
    assert three.allowed[0, 0] == False  # noqa: E712  (the embedding alone: Megatron's first stage needs a layer)
    assert three.allowed[0, 1] and three.allowed[0, 7] and three.allowed[9 - 1, 9]
    assert three.allowed[2, 4] and not three.allowed[2, 3] and not three.allowed[2, 5]
    assert three.allowed[0, 9]  # one stage holds everything
    assert [lay.middle_layers for lay in layouts(1, 8, 10, "even")] == [1, 2, 4, 8]
    two = layouts(1, 8, 10, "even")[1]
    assert two.allowed[0, 2] and not two.allowed[0, 3] and two.allowed[7, 9] and not two.allowed[6, 9]
    assert rule_breach([14, 14, 13, 13, 13, 13], "even_middle") is not None
    assert rule_breach([13, 14, 14, 14, 14, 11], "even_middle") is None
    assert rule_breach([0, 40, 40], "even_middle") is not None
    assert rule_breach([20, 20, 20, 20], "even") is None and rule_breach([21, 20, 20, 19], "even") is not None
