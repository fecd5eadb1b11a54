"""Optuna samplers by name (`search.sampler`): bound-ordered branch and bound, exhaustive grid, TPE, NSGA-II."""

from __future__ import annotations

from typing import Callable

import numpy as np
import optuna

from phaze.search.claims import PASSED_OVER

SAMPLERS = ("bound", "grid", "tpe", "nsga2", "pareto")
"""pareto: the exact fronts of throughput against area and TDP (phaze.search.pareto), not an Optuna sampler."""
ORDERED = ("bound", "grid")
"""Samplers that visit every point once in a fixed order, each point claimed by exactly one trial."""


class SpaceExhausted(Exception):
    """Every point is claimed by some trial: this trial has nothing left to evaluate."""


class ClaimedOrderSampler(optuna.samplers.BaseSampler):
    """Proposes the points in a fixed order, each to exactly one trial of all workers (grid, branch and bound).

    A point goes to the trial that wins its claim (phaze.search.claims); the order is deterministic,
    so a resumed study continues it. For branch and bound the order is decreasing work bound: with
    the study's pruning, once a point's bound cannot beat the best value no later point can.
    `skip` (set by the search for branch and bound) makes a predicate, once per proposal, telling
    which points a cheap true bound already shows unable to beat the study: those are passed over
    without a trial. With `claim_first` (several workers) a point is claimed before its bound is
    computed, so no two workers compute the same one, and a point passed over keeps its claim as
    PASSED_OVER; otherwise passed-over points are not claimed (a later pass over released points
    may still propose them).
    """

    def __init__(self, order: np.ndarray, claims, param: str = "point", claim_first: bool = False):
        self.order = [int(i) for i in order]
        self.claims = claims
        self.param = param
        self.claim_first = claim_first
        self.cursor = 0
        self.taken: set[int] | None = None
        self.skip: Callable[[optuna.Study], Callable[[int], bool]] | None = None
        self.n_skipped = 0

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    @property
    def exhausted(self) -> bool:
        """Whether this process has seen every point claimed."""
        return self.cursor >= len(self.order)

    def sample_independent(self, study, trial, param_name, param_distribution):
        """The next point in the order that this trial wins; SpaceExhausted (and the study stops) when none is left."""
        if self.taken is None:
            self.taken = set(self.claims.owners_by_point())
        passed_over = self.skip(study) if self.skip is not None else (lambda point: False)
        while not self.exhausted:
            point = self.order[self.cursor]
            self.cursor += 1
            if point in self.taken:
                continue
            if self.claim_first:
                if not self.claims.claim(point, trial.number):
                    continue
                if not passed_over(point):
                    return point
                self.claims.take_over(point, trial.number, PASSED_OVER)
                self.n_skipped += 1
                continue
            if passed_over(point):
                self.n_skipped += 1
                continue
            if self.claims.claim(point, trial.number):
                return point
        owners = self.claims.owners_by_point()  # points released since (their trial died before recording them)
        for point in self.order:
            if point not in owners and not passed_over(point) and self.claims.claim(point, trial.number):
                return point
        study.stop()
        raise SpaceExhausted("every point is claimed by another trial")


def grid_order(n_points: int, seed: int) -> np.ndarray:
    """The exhaustive grid's visiting order: a seeded permutation of the points (as Optuna's GridSampler)."""
    return np.random.default_rng(seed).permutation(n_points)


def make_sampler(search_cfg, evaluator, claims=None, seed_offset: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler named by search.sampler; workers pass their index as `seed_offset` so they propose different points."""
    name = search_cfg.sampler
    seed = int(search_cfg.seed) + seed_offset
    if name == "bound":
        return ClaimedOrderSampler(evaluator.order_by_bound(), claims, claim_first=int(search_cfg.n_workers) > 1)
    if name == "grid":
        return ClaimedOrderSampler(grid_order(len(evaluator), int(search_cfg.seed)), claims)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ValueError(f"search.sampler={name!r}; allowed: {list(SAMPLERS)}")
