"""What a search strategy (`search.sampler`) answers: its Optuna sampler, and how the study's loop runs its trials."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import optuna


class Strategy(ABC):
    """A way to search the space, named by search.sampler: class attributes say how the study treats its trials,
    sampler() builds one worker's Optuna sampler."""

    name: ClassVar[str]
    ordered: ClassVar[bool] = False
    """Visits every point once in a fixed order, each claimed by exactly one trial of all workers (ClaimedOrderSampler)."""
    branch_and_bound: ClassVar[bool] = False
    """Visits the points by decreasing work bound: with search.prune, the first point its work bound dismisses stops the
    study, and the sampler passes over the points a cheaper bound already dismisses."""
    multi_objective: ClassVar[bool] = False
    """Maximises throughput and minimises chip area (a Pareto front), instead of maximising the objective alone."""

    @abstractmethod
    def sampler(self, search_cfg, evaluator, *, claims=None, seed_offset: int = 0) -> optuna.samplers.BaseSampler:
        """One worker's sampler over evaluator's points; `claims` is the study's claims table (ordered strategies), and
        workers pass their index as `seed_offset` so that seeded samplers propose different points."""

    def n_trials(self, search_cfg, n_points: int) -> int:
        """Trials the study runs: search.n_trials."""
        return int(search_cfg.n_trials)

    @property
    def directions(self) -> list[str]:
        """The Optuna study's directions: throughput up, and area down for a multi-objective strategy."""
        return ["maximize", "minimize"] if self.multi_objective else ["maximize"]


class OrderedStrategy(Strategy):
    """A strategy whose sampler visits every point once (ClaimedOrderSampler): it stops on its own."""

    ordered = True

    def n_trials(self, search_cfg, n_points: int) -> int:
        """Every point: the study stops once its order is exhausted (or, for branch and bound, by the bound)."""
        return n_points
