"""The sampler that the grid and branch-and-bound strategies share: every point once, in a fixed order, each to one trial."""

from __future__ import annotations

from typing import Callable

import numpy as np
import optuna

from phaze.search.claims import PASSED_OVER, RETRY_HISTORY_ATTR

BOUND_STOP_ATTR = "stopped_by_bound"
"""Study attribute set when branch and bound proved every unvisited point dominated."""


def _bound_stop(study: optuna.Study, point: int) -> None:
    """Stop the study, recording the point whose work bound showed that no point left can win."""
    study.set_user_attr(BOUND_STOP_ATTR, point)
    study.stop()


class SpaceExhausted(Exception):
    """Every point is claimed by some trial: this trial has nothing left to evaluate."""


class ClaimedOrderSampler(optuna.samplers.BaseSampler):
    """Proposes the points in a fixed order, each to exactly one trial of all workers (grid, branch and bound).

    A point goes to the trial that wins its claim (phaze.search.claims); the order is deterministic,
    so a resumed study continues it. For branch and bound the order is decreasing work bound: with
    the study's pruning, once a point's bound cannot beat the best value no later point can.
    `skip` (set by the search for branch and bound) makes a predicate, once per proposal, telling
    which points a cheap true bound already shows unable to beat the study: those are passed over
    without a trial (predicate(point, known_only): with known_only, only from bounds already found).
    With `claim_first` (several workers) a point that the known bounds do not dismiss is claimed before
    its bound is computed, so no two workers compute the same one, and a point its bound passes over
    keeps its claim as PASSED_OVER (a point the bounds already found dismiss is claimed PASSED_OVER too,
    all of one proposal's in one transaction: thousands are dismissed near the end of a study, and one
    write each would queue on the database's write lock); otherwise passed-over points are not claimed
    (a later pass over released points may still propose them).

    `siblings` (several workers): per point, a group code of the points that share its layer schedules and its
    bound at the largest HBM (HBM siblings: same chip, other capacity). A point whose sibling another worker is
    evaluating, or has just claimed, is deferred, not claimed: that worker caches the MILPs and the bound the two
    share and usually dismisses it (a bound that passes a point over also claims the siblings it dismisses), so
    taking it then costs a second instead of the same MILPs or DP computed twice at once. A deferred point is
    proposed as soon as no sibling is running; the other worker's cursor usually reaches it first. A
    branch-and-bound stop (`stop_at_bound`) waits until the deferred points are decided, since they come
    earlier in the order than the point that stopped it.
    """

    def __init__(self, order: np.ndarray, claims, param: str = "point", claim_first: bool = False, siblings: np.ndarray | None = None):
        self.order = [int(i) for i in order]
        self.claims = claims
        self.param = param
        self.claim_first = claim_first
        self.siblings = siblings if claim_first else None
        self.cursor = 0
        self.taken: set[int] | None = None
        self.skip: Callable[[optuna.Study], Callable[..., bool]] | None = None
        self.n_skipped = 0
        self.deferred: list[int] = []
        self.dismissed: list[int] = []
        """Points the known bounds dismissed during this proposal, claimed PASSED_OVER at its end."""
        self.stop_point: int | None = None
        """The work-bound-dominated point that stops the study once the deferred points are decided."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    @property
    def exhausted(self) -> bool:
        """Whether this process has seen every point claimed (none of its deferred points is left)."""
        return self.cursor >= len(self.order) and not self.deferred

    def stop_at_bound(self, study: optuna.Study, point: int) -> None:
        """`point`'s work bound cannot beat the study, nor can any later point's: stop now (study attribute
        BOUND_STOP_ATTR set to the point), or once this worker's deferred points, earlier in the order, are decided."""
        if self.deferred:
            self.stop_point = point
            return
        _bound_stop(study, point)

    def _running_siblings(self, study: optuna.Study, trial) -> set[int]:
        """Sibling groups of the points other trials are evaluating now."""
        if self.siblings is None:
            return set()
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        return {int(self.siblings[t.params[self.param]]) for t in running if t.number != trial.number and self.param in t.params}

    def _take(self, point: int, trial, passed_over: Callable[..., bool]) -> bool | None:
        """Claim the point for the trial (claim_first): True when the trial wins it, None when another trial holds it,
        False when its bound passes it over (the claim is then kept as PASSED_OVER, and so are the claims of the
        siblings that the bound just found also dismisses: another worker would otherwise compute it again)."""
        if not self.claims.claim(point, trial.number):
            return None
        if not passed_over(point):
            return True
        self.claims.take_over(point, trial.number, PASSED_OVER)
        self.n_skipped += 1
        if self.siblings is not None:
            for mate in np.flatnonzero(self.siblings == self.siblings[point]).tolist():
                if mate != point and mate not in self.taken:
                    self._known_dismissed(mate, passed_over)
        return False

    def _known_dismissed(self, point: int, passed_over: Callable[..., bool]) -> bool:
        """Whether a bound already found dismisses the point (counted as passed over, nothing computed; with
        claim_first its PASSED_OVER claim is written with the others of this proposal, in one transaction)."""
        dismissed = bool(passed_over(point, True))
        self.n_skipped += dismissed
        if dismissed and self.claim_first:
            self.dismissed.append(point)
            self.taken.add(point)
        return dismissed

    def _from_deferred(self, trial, passed_over: Callable[..., bool], running: set[int]) -> int | None:
        """The first deferred point with no sibling running (any of them once the study is stopping) that the trial wins."""
        for point in list(self.deferred):
            if self.stop_point is None and int(self.siblings[point]) in running:
                continue
            self.deferred.remove(point)
            if point not in self.taken and not self._known_dismissed(point, passed_over) and self._take(point, trial, passed_over):
                return point
        return None

    def sample_independent(self, study, trial, param_name, param_distribution):
        """The next point in the order that this trial wins; SpaceExhausted (and the study stops) when none is left."""
        try:
            return self._propose(study, trial)
        finally:
            self.claims.claim_many(self.dismissed, PASSED_OVER)
            self.dismissed.clear()

    def _inherited(self, trial) -> int | None:
        """For the retry of a trial that died between claiming its point and recording it (so the retry has no point
        to copy): that point, its claim taken over from the dead trial; None for any other trial."""
        dead = set(trial.system_attrs.get(RETRY_HISTORY_ATTR, ()))
        if not dead:
            return None
        for point, owner in self.claims.owners_by_point().items():
            if owner in dead and self.claims.take_over(point, owner, trial.number):
                return point
        return None

    def _propose(self, study, trial) -> int:
        point = self._inherited(trial)
        if point is not None:
            return point
        if self.taken is None or self.claim_first:  # other workers' claims since, skipped without a failed insert each
            self.taken = set(self.claims.owners_by_point())
        passed_over = self.skip(study) if self.skip is not None else (lambda point, known_only=False: False)
        running = self._running_siblings(study, trial)
        point = self._from_deferred(trial, passed_over, running)
        if point is not None:
            return point
        if self.stop_point is not None:
            _bound_stop(study, self.stop_point)
            raise SpaceExhausted("the work bound stopped the study: every deferred point is decided")
        while self.cursor < len(self.order):
            point = self.order[self.cursor]
            self.cursor += 1
            if point in self.taken:
                continue
            if self.claim_first:
                if self._known_dismissed(point, passed_over):
                    continue
                if self.siblings is not None and int(self.siblings[point]) in running:
                    self.deferred.append(point)
                    continue
                won = self._take(point, trial, passed_over)
                if won:
                    return point
                if won is None and self.siblings is not None:  # another worker is at this group: leave it the siblings
                    running.add(int(self.siblings[point]))
                continue
            if passed_over(point):
                self.n_skipped += 1
                continue
            if self.claims.claim(point, trial.number):
                return point
        point = self._from_deferred(trial, passed_over, running)
        if point is None and self.deferred:  # only points whose siblings still run are left: take one rather than wait
            point = self._from_deferred(trial, passed_over, set())
        if point is not None:
            return point
        owners = self.claims.owners_by_point()  # points released since (their trial died before recording them)
        for point in self.order:
            if point not in owners and not passed_over(point) and self.claims.claim(point, trial.number):
                return point
        study.stop()
        raise SpaceExhausted("every point is claimed by another trial")

