"""What a branch-and-bound study's progress reads of the points still to decide (phaze.search.progress.Ahead), and the
probe that prices a placement bound before there is a value to beat: the study's side of its time left."""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import pandas as pd

from phaze.search.bound_clock import LOOKUP, OWN_DP, SCHEDULE, TOP_DP, dp_s
from phaze.search.dominance import HBM_AXIS, undominated
from phaze.search.progress import RATE_WINDOW_S, Ahead, kinds_ahead, trial_chance
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
        known, beat = evaluator.known_bounds(points), to_beat(search, value) / scales[points] if value is not None else scales[points]
        fresh, bounded = kinds_ahead(known, evaluator.work_bound[points], beat, signatures[points])
        clock = evaluator.bound_clock
        evaluated = np.isin(signatures[points], signatures[np.asarray(list(seen["evaluated"]), dtype=np.int64)])
        return Ahead(cursor, fresh, bounded, bound_s=dp_s(evaluator.models, TOP_DP, math.inf), evaluations=evaluations,
                     groups=signatures[points], schedule_bound_s=clock.recent_mean_s(SCHEDULE, RATE_WINDOW_S),
                     least_fresh=least_fresh(evaluator, points, fresh, bounded, signatures[points]), evaluated=evaluated,
                     own_bound_s=dp_s(evaluator.models, OWN_DP, math.inf), lookup_s=clock.recent_mean_s(LOOKUP, RATE_WINDOW_S),
                     trials=trials_ahead(beat, known, bounded & ~evaluated, signatures[points], clock.tightenings))

    return read


def trials_ahead(beat: np.ndarray, known: np.ndarray, open_: np.ndarray, signatures: np.ndarray, tightenings: list[float]) -> float:
    """How many of the signatures of the `open_` points (bounds `known` above the values to beat `beat`) will take a
    trial: each at its trial_chance, from the lowest threshold of its points (the value to beat over the bound: a list
    schedule that takes less than that off the bound leaves the point open, and one open point is a trial)."""
    if not open_.any():
        return 0.0
    lowest = pd.Series(beat[open_] / known[open_]).groupby(signatures[open_]).min().to_numpy()
    return float(trial_chance(lowest, np.asarray(tightenings)).sum())


def least_fresh(evaluator, points: np.ndarray, fresh: np.ndarray, bounded: np.ndarray, signatures: np.ndarray) -> int:
    """How many of the fresh signatures among `points` (kinds_ahead) no other point still open dominates
    (DominatingBounds): each needs a placement bound of its own, while a bound on one that another dominates may come
    from its neighbour's. A signature counts at its largest HBM, where its placement bound is found; the open points
    bounded so far count at their own. Each model's expert placement held fixed bounds by signature only: all of them."""
    is_fresh = fresh > 0
    if evaluator.fixed_placement or not is_fresh.any():
        return len(np.unique(signatures[is_fresh]))
    dominance = evaluator.models[0].dominance
    _, first = np.unique(signatures[is_fresh], return_index=True)
    tops, open_ = points[is_fresh][first], points[bounded]
    at_top = dominance.more[tops].copy()
    at_top[:, HBM_AXIS] = evaluator.models[0].max_hbm_gib
    return undominated(np.vstack([at_top, dominance.more[open_]]), np.concatenate([dominance.group[tops], dominance.group[open_]]),
                       np.arange(len(tops) + len(open_)) < len(tops))


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
