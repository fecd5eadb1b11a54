"""What a branch-and-bound study's progress reads of the points still to decide (phaze.search.progress.Ahead), and the
probe that prices a placement bound before there is a value to beat: the study's side of its time left."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from phaze.search.bound_clock import PLACEMENT, SCHEDULE
from phaze.search.progress import Ahead, kinds_ahead
from phaze.search.ranking import to_beat


def progress_total(search, evaluator, best: float | None) -> int:
    """What a branch-and-bound study still has to decide: the points whose work bound (on the objective) beats the
    value to beat so far (`best`: the N-th best, value_to_beat; `search`: SearchCfg), every point before there is one. The order visits them
    first; the next one stops the study."""
    if best is None:
        return len(evaluator)
    return int(np.count_nonzero(evaluator.work_bound * evaluator.objective_scale() > to_beat(search, best)))


def reading_value(nth: float | None, values: list[float]) -> float | None:
    """The value the points ahead are read against: the study's value to beat `nth`, before there is one the lowest of
    the values completed so far, None before the first."""
    return nth if nth is not None else min(values, default=None)


def points_ahead(search, evaluator, sampler, top_n: int, seen: dict) -> Callable[[], Ahead]:
    """For a branch-and-bound study's progress: a callable reading what is known of the points still to decide
    (phaze.search.progress.Ahead), from the value to beat and the values completed that the study's loop keeps in `seen`
    ("nth", "values") and the bounds found so far (SpaceEvaluator.known_bounds). Before there is a value to beat, the
    points are read against the lowest value completed so far (none before the first: only the evaluations are left)."""
    order, signatures, scales = np.asarray(sampler.order), evaluator.sibling_groups(), evaluator.objective_scale()

    def read() -> Ahead:
        nth, values, cursor = seen["nth"], list(seen["values"]), sampler.cursor
        evaluations = 0 if nth is not None else max(top_n - len(values), 0)
        value = reading_value(nth, values)
        points = order[cursor:progress_total(search, evaluator, value)] if value is not None else order[:0]
        fresh, bounded = kinds_ahead(evaluator.known_bounds(points), evaluator.work_bound[points],
                                     to_beat(search, value) / scales[points] if value is not None else scales[points], signatures[points])
        clock = evaluator.bound_clock
        return Ahead(cursor, fresh, bounded, clock.mean_s(PLACEMENT), evaluations, signatures[points], clock.mean_s(SCHEDULE))

    return read


def bound_probe(search, evaluator, sampler, seen: dict) -> Callable[[], float | None]:
    """For a branch-and-bound study's progress before there is a value to beat: a callable timing one placement bound
    (each model's DP at the largest HBM, cut off at the lowest value completed) on the first point ahead that only its
    work bound bounds, as the walk after the value to beat will run one per such signature. It calls the DP directly
    and records nothing, so the study's bounds and decisions stay as they are; None when no such point is ahead."""
    order, scales = np.asarray(sampler.order), evaluator.objective_scale()

    def probe() -> float | None:
        value = reading_value(seen["nth"], list(seen["values"]))
        if value is None:
            return None
        points = order[sampler.cursor:progress_total(search, evaluator, value)]
        fresh = points[evaluator.known_bounds(points) >= evaluator.work_bound[points]]
        if not len(fresh):
            return None
        index = int(fresh[0])
        beat = to_beat(search, value) / scales[index]
        start = time.perf_counter()
        for model in evaluator.models:
            point = evaluator.point(index).assign(hbm_gib=model.max_hbm_gib)
            model.dp_placer(point, evaluator.fixed_placement, None, beat)(model.lower_bounds.at(index))
        return time.perf_counter() - start

    return probe
