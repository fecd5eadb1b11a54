"""The bounds a search asked for against a value to beat, counted and timed by kind: a study's progress costs the
points still ahead by them (phaze.search.ahead)."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager

PLACEMENT = "placement"
"""A placement DP on a point's lower-bound latencies (SpaceEvaluator.placement_bound)."""
SCHEDULE = "schedule"
"""A placement on a point's list schedules (SpaceEvaluator.schedule_bound)."""


class BoundClock:
    """Counts and seconds of the bounds of each kind asked for against a value to beat (without one, a placement bound
    looks for every placement, many times slower, and says nothing of the bounds that come after)."""

    def __init__(self):
        self.count: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()

    @contextmanager
    def timing(self, kind: str, beat: float | None):
        """Time the block as one bound of `kind` when there is a value to beat (`beat` not None)."""
        start = time.perf_counter()
        yield
        if beat is not None:
            self.count[kind] += 1
            self.seconds[kind] += time.perf_counter() - start

    def mean_s(self, kind: str) -> float | None:
        """Mean seconds of a bound of `kind` so far; None before the first."""
        return self.seconds[kind] / self.count[kind] if self.count[kind] else None
