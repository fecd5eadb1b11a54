"""The bounds a search asked for against a value to beat, counted and timed by kind: a study's progress costs the
points still ahead by them (phaze.search.ahead)."""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from contextlib import contextmanager

PLACEMENT = "placement"
"""A placement DP on a point's lower-bound latencies (SpaceEvaluator.placement_bound)."""
SCHEDULE = "schedule"
"""A placement on a point's list schedules (SpaceEvaluator.schedule_bound)."""
TOP_DP = "top_dp"
"""A placement DP at a signature's largest HBM, its bound for every HBM sibling (ModelEvaluator.placement_bound): one per
fresh signature (phaze.search.progress.kinds_ahead)."""
OWN_DP = "own_dp"
"""A placement DP at a point's own HBM, below its signature's bound: one per bounded point."""
LOOKUP = "lookup"
"""A point's bound read from the bounds found so far, without a DP (SpaceEvaluator.known_bound, or a placement bound
that the bounds found so far answer): the branch-and-bound walk asks one of every point it passes, thousands a second
on the headline run, so it is not free either."""


class BoundClock:
    """Counts and seconds of the bounds of each kind asked for against a value to beat (without one, a placement bound
    looks for every placement, many times slower, and says nothing of the bounds that come after)."""

    def __init__(self):
        self.ends: dict[str, list[tuple[float, float]]] = {}
        """By kind, (when it ended, seconds) of each bound, in time order: its counts and means follow from it."""
        self.tightenings: list[float] = []
        """Of each point's first list-schedule bound against a value to beat, its ratio to the point's bound before it
        (at most 1): what a bounded point's list schedules take off its bound, so whether they leave it a trial. The
        first only: a trial asks again for the bound the walk found, and gets it back unchanged. A list, appended to
        only, so that a study's progress reads it from another thread as it grows."""
        self.tightened_points: set[int] = set()
        """The points whose ratio is in `tightenings`."""

    @contextmanager
    def timing(self, kind: str, beat: float | None):
        """Time the block as one bound of `kind` when there is a value to beat (`beat` not None)."""
        start = time.perf_counter()
        yield
        self.add(kind, beat, time.perf_counter() - start)

    def add(self, kind: str, beat: float | None, seconds: float) -> None:
        """One bound of `kind` that took `seconds`, counted when there is a value to beat (`beat` not None)."""
        if beat is not None:
            self.ends.setdefault(kind, []).append((time.monotonic(), seconds))

    def tightened(self, index: int, beat: float | None, bound: float, before: float) -> None:
        """Point `index`'s list-schedule bound came out at `bound` where its bound before it was `before`; their ratio is
        kept when there is a value to beat (`beat` not None), `before` is a bound (positive and finite: a point no plan
        fits has 0) and it is the point's first."""
        if beat is not None and 0.0 < before < math.inf and index not in self.tightened_points:
            self.tightened_points.add(index)
            self.tightenings.append(float(bound / before))

    @property
    def count(self) -> Counter[str]:
        """Bounds of each kind so far."""
        return Counter({kind: len(ends) for kind, ends in self.ends.items()})

    def total(self) -> int:
        """Bounds of every kind so far."""
        return sum(len(ends) for ends in self.ends.values())

    def mean_s(self, kind: str) -> float | None:
        """Mean seconds of a bound of `kind` so far; None before the first."""
        return self.recent_mean_s(kind, math.inf)

    def recent_mean_s(self, kind: str, window_s: float) -> float | None:
        """Mean seconds of the bounds of `kind` that ended within `window_s` of the latest one; None before the first.
        Read from another thread (a study's progress) while bounds are added: up to the length read first, found by
        bisection on the end times, without copying the list."""
        ends = self.ends.get(kind)
        if not ends:
            return None
        n = len(ends)
        first = bisect.bisect_left(ends, ends[n - 1][0] - window_s, hi=n, key=lambda end: end[0])
        return float(sum(seconds for _, seconds in ends[first:n]) / (n - first))


def dps_run(models) -> int:
    """Placement DPs these models (ModelEvaluator, each with its dp_clock) ran against a value to beat so far."""
    return sum(m.dp_clock.total() for m in models)


def dp_s(models, kind: str, window_s: float) -> float | None:
    """Seconds of a placement DP of `kind` (TOP_DP, OWN_DP) on one point, every model's: the sum of their means over the
    latest `window_s` (BoundClock.recent_mean_s); None before any model ran one."""
    means = [m.dp_clock.recent_mean_s(kind, window_s) for m in models]
    return None if all(v is None for v in means) else float(sum(v for v in means if v is not None))
