"""The best plan a placement search has found so far: its time and what rebuilding it as a plan takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from phaze.placement.layouts import Layout
from phaze.placement.plan import Plan
from phaze.placement.runs import Group
from phaze.placement.space import Config


@dataclass(frozen=True)
class Candidate:
    """The best plan found so far: its time, the front point and everything needed to rebuild it."""

    time_per_batch_s: float
    config: Config
    tp_idx: tuple[int, ...]
    same_node: bool
    group: Group
    dp: int
    stages: int
    devices_per_pipeline: int
    load_s: float
    tail: float
    plan: Plan | None = field(default=None)
    """Set for enumerated (interleaved) plans."""
    layout: Layout | None = field(default=None)
    """The stages the kernel run allowed (None: any)."""
