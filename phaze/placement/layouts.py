"""Which layers per pipeline stage a training framework can run (train.stage_layers), as the placement DP searches them.

- any: every contiguous split of the chain (PHAZE's search; torchtitan's pipeline split points).
- even_middle: Megatron-Core's uneven pipeline (--decoder-first-pipeline-num-layers /
  --decoder-last-pipeline-num-layers): the first and last stages hold any number (>= 1) of layers, every stage
  between them the same number (megatron/core/transformer/transformer_config.py: "Middle layers must be divisible
  by middle PP stage count", the first and last counts > 0); the even split is one such plan.
- even: every stage the same number of layers (MaxText's num_layers_per_pipeline_stage; DeepSpeed's pipeline engine
  balancing equal transformer layers).

The embedding and loss parts ride with the first and last stages. A constrained rule is searched one layout at a
time: a Layout fixes the middle stages' layer count and says which stages (first part i .. last part j) may occur.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from phaze.schema.choices import StageLayers

STAGE_LAYER_RULES = StageLayers.values()
"""train.stage_layers values."""


@dataclass(frozen=True)
class Layout:
    """The stages a DP run may use: allowed[i, j] for the stage of parts i..j, last_part[i] the last j allowed
    from i (-1: none); middle_layers is the count every stage between the first and last holds (0: any), and no plan
    of the layout has more than max_stages stages. A search counts the layout's plans of at least min_stages stages
    (the fewer-stage plans every layout holds are counted in the first), each with a stage of middle_layers layers."""

    middle_layers: int
    max_stages: int
    min_stages: int
    allowed: np.ndarray = field(repr=False, compare=False)
    last_part: np.ndarray = field(repr=False, compare=False)


def stage_layer_counts(bounds: Sequence[tuple[int, int]], num_pre: int, num_layers: int) -> tuple[int, ...]:
    """Transformer layers in each stage of part ranges `bounds` (parts num_pre .. num_pre + num_layers - 1 are layers)."""
    return tuple(max(0, min(b, num_pre + num_layers - 1) - max(a, num_pre) + 1) for a, b in bounds)


def rule_breach(layers: Sequence[int], rule: str) -> str | None:
    """Why stages holding `layers` transformer layers (in order) break the rule, None when they keep it."""
    if rule == "any" or len(layers) == 1:
        return None
    counts = list(layers)
    if rule == "even":
        return None if len(set(counts)) == 1 else f"layers per stage {counts} are not all equal"
    if min(counts[0], counts[-1]) < 1:
        return f"layers per stage {counts}: the first and last stages need at least one layer"
    if len(set(counts[1:-1])) > 1:
        return f"layers per stage {counts}: the stages between the first and last must hold the same number"
    return None


def layouts(num_pre: int, num_layers: int, num_parts: int, rule: str) -> tuple[Layout, ...]:
    """The layouts whose runs together search exactly the splits the rule allows (one of STAGE_LAYER_RULES: phaze.checks.train)."""
    return _layouts(int(num_pre), int(num_layers), int(num_parts), rule)


@functools.lru_cache(maxsize=256)
def _layouts(num_pre: int, num_layers: int, num_parts: int, rule: str) -> tuple[Layout, ...]:
    """layouts() on plain integers, memoised: every placement DP of a search asks for the same few."""
    if rule == "any":
        return (_layout(num_pre, num_layers, num_parts, rule, 0, 1),)
    if rule == "even":
        counts = [c for c in range(1, num_layers + 1) if num_layers % c == 0]
    else:
        counts = list(range(1, max(num_layers - 2, 1) + 1))
    shared = 1 if rule == "even" else 2  # the plans every layout holds: one stage (even), or the first and last alone
    return tuple(_layout(num_pre, num_layers, num_parts, rule, c, 1 if i == 0 else shared + 1) for i, c in enumerate(counts))


def _layout(num_pre: int, num_layers: int, num_parts: int, rule: str, middle: int, min_stages: int) -> Layout:
    """The Layout of the rule whose middle stages hold `middle` layers (rule any: every stage allowed), counting its
    plans of min_stages stages or more."""
    n = num_parts
    allowed = np.zeros((n, n), dtype=np.bool_)
    for i in range(n):
        for j in range(i, n):
            if rule == "any" or (i == 0 and j == n - 1):
                allowed[i, j] = True
                continue
            layers = stage_layer_counts(((i, j),), num_pre, num_layers)[0]
            if i == 0 or j == n - 1:
                allowed[i, j] = layers == middle if rule == "even" else layers >= 1
            else:
                allowed[i, j] = num_pre <= i and j < num_pre + num_layers and layers == middle
    last = np.array([int(np.nonzero(row)[0].max()) if row.any() else -1 for row in allowed], dtype=np.int64)
    edges = 2 if rule == "even_middle" else 0
    stages = num_parts if rule == "any" else max(1, min(num_layers, edges + (num_layers - edges) // middle))
    return Layout(middle, stages, min_stages, allowed, last)
