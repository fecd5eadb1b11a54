"""The bound-ordered sampler shared by several workers: every point decided once, no bound computed twice."""

import queue
import threading

import numpy as np
import optuna
import pytest

from phaze.search.claims import PASSED_OVER, DatabaseClaims, LocalClaims
from phaze.search.samplers import BOUND_STOP_ATTR, ClaimedOrderSampler, SpaceExhausted

N_POINTS = 40
DISMISSED = {p for p in range(N_POINTS) if p % 3}
"""Points a bound dismisses (two in three)."""


@pytest.mark.parametrize("claim_first", [True, False])
def test_two_workers_never_compute_the_same_bound_when_claiming_first(claim_first):
    """Two samplers over one claims table, proposing in turn: with claim_first each point's bound is computed by
    one of them only and a dismissed point keeps a PASSED_OVER claim; without it (one worker's mode) both
    compute the bounds of the points the other passed over."""
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="shared")
    claims = LocalClaims()
    calls: dict[int, int] = {}

    def skip(_study):
        def passed_over(point: int, known_only: bool = False) -> bool:
            if known_only:  # no bound is known before it is computed
                return False
            calls[point] = calls.get(point, 0) + 1
            return point in DISMISSED
        return passed_over

    workers = [ClaimedOrderSampler(list(range(N_POINTS)), claims, claim_first=claim_first) for _ in range(2)]
    for w in workers:
        w.skip = skip
    studies = [optuna.load_study(study_name="shared", storage=storage, sampler=w) for w in workers]
    proposed, live = [], [True, True]

    def objective(trial):
        proposed.append(trial.suggest_int("point", 0, N_POINTS - 1))
        return 0.0

    while any(live):
        for k, study in enumerate(studies):
            if live[k]:
                before = len(proposed)
                study.optimize(objective, n_trials=1, catch=(SpaceExhausted,))
                live[k] = len(proposed) > before
    assert sorted(proposed) == sorted(set(range(N_POINTS)) - DISMISSED)  # every other point proposed once
    assert sum(w.n_skipped for w in workers) == len(DISMISSED) * (1 if claim_first else 2)
    if claim_first:
        assert all(n == 1 for n in calls.values()) and set(calls) == set(range(N_POINTS))
        assert {p for p, owner in claims.owners_by_point().items() if owner == PASSED_OVER} == DISMISSED
    else:
        assert any(n == 2 for n in calls.values())
        assert set(claims.owners_by_point()) == set(proposed)


GROUP = 3
"""Sibling groups of three consecutive points (as an HBM capacity axis of three sizes)."""
END = -2
"""What a worker reports when its study has stopped."""


class Worker:
    """One worker's study.optimize loop in a thread, holding each trial open until told how to end it (as a worker
    process evaluating a point), so that the other worker proposes while its trial is RUNNING."""

    def __init__(self, storage, claims, siblings: np.ndarray):
        sampler = ClaimedOrderSampler(list(range(len(siblings))), claims, claim_first=True, siblings=siblings)
        self.study = optuna.load_study(study_name="shared", storage=storage, sampler=sampler)
        self.proposed: queue.Queue = queue.Queue()
        self.orders: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _objective(self, trial):
        point = trial.suggest_int("point", 0, 10**6)
        self.proposed.put(point)
        if self.orders.get() == "stop":  # its work bound cannot beat the study (Objective's branch-and-bound stop)
            self.study.sampler.stop_at_bound(trial.study, point)
        return 0.0

    def _loop(self):
        self.study.optimize(self._objective, catch=(SpaceExhausted,))
        self.proposed.put(END)

    def start(self) -> int:
        self.thread.start()
        return self.proposed.get(timeout=60)

    def next(self, order: str = "finish") -> int:
        """End the running trial and return the next point proposed (END once the study stopped)."""
        self.orders.put(order)
        return self.proposed.get(timeout=60)


def _workers(n_points: int) -> tuple[list[Worker], np.ndarray]:
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="shared")
    siblings = np.arange(n_points) // GROUP
    claims = LocalClaims()
    return [Worker(storage, claims, siblings) for _ in range(2)], siblings


def test_a_sibling_of_a_running_point_is_deferred_until_it_ends():
    """Two workers taking turns (end the running trial, propose the next): a worker never takes a point whose sibling
    the other is evaluating, a deferred point is proposed once its sibling has ended, and every point is proposed
    exactly once."""
    workers, siblings = _workers(4 * GROUP)
    running = [workers[0].start(), workers[1].start()]
    assert running == [0, GROUP] and workers[1].study.sampler.deferred == [1, 2]  # their sibling 0 is running
    proposed, concurrent, k = list(running), 0, 0
    while any(p != END for p in running):
        if running[k] != END:
            running[k] = workers[k].next()
            if running[k] != END:
                proposed.append(running[k])
                concurrent += running[1 - k] != END and siblings[running[1 - k]] == siblings[running[k]]
        k = 1 - k
    assert sorted(proposed) == list(range(4 * GROUP))
    assert concurrent == 0
    assert not any(w.study.sampler.deferred for w in workers)


def test_a_bound_stop_waits_for_the_deferred_points():
    """stop_at_bound with deferred points left: the worker first proposes them (even with their sibling still
    running elsewhere), then stops the study, recording the stopping point."""
    workers, _ = _workers(3 * GROUP)
    assert [workers[0].start(), workers[1].start()] == [0, GROUP]
    assert workers[1].study.sampler.deferred == [1, 2]
    assert workers[1].next("stop") == 1  # sibling 0 still running on the other worker
    assert BOUND_STOP_ATTR not in workers[1].study.user_attrs
    assert workers[1].next() == 2
    assert workers[1].next() == END
    assert workers[1].study.user_attrs[BOUND_STOP_ATTR] == GROUP
    assert workers[0].next("stop") == END  # nothing deferred: it stops at once


def test_a_bound_that_passes_a_point_over_claims_the_siblings_it_dismisses():
    """With siblings, the bound computed for one point of a group (as the largest-HBM bound each process caches) also
    claims its dismissed siblings as PASSED_OVER, so another worker never computes it again for them."""
    workers, _ = _workers(3 * GROUP)
    computed: list[int] = []

    def skip(_study):
        def passed_over(point: int, known_only: bool = False) -> bool:
            group = point // GROUP
            if known_only:
                return group == 0 and any(p // GROUP == 0 for p in computed)
            computed.append(point)
            return group == 0
        return passed_over

    for w in workers:
        w.study.sampler.skip = skip
    assert workers[0].start() == GROUP  # group 0 passed over on the bound of point 0 alone
    assert computed == [0, GROUP]
    owners = workers[0].study.sampler.claims.owners_by_point()
    assert {p: owners[p] for p in range(GROUP)} == dict.fromkeys(range(GROUP), PASSED_OVER)
    assert workers[1].start() == 2 * GROUP and computed == [0, GROUP, 2 * GROUP]


def check_claim_many(claims) -> None:
    """claim_many claims the free points only; the held ones keep their owner."""
    assert claims.claim(1, 7)
    claims.claim_many([1, 2, 3], PASSED_OVER)
    claims.claim_many([], PASSED_OVER)
    assert claims.owners_by_point() == {1: 7, 2: PASSED_OVER, 3: PASSED_OVER}


@pytest.mark.parametrize("local", [True, False])
def test_claim_many_keeps_existing_claims(tmp_path, local):
    """In a process, and in SQLite's one-statement insert (ON CONFLICT DO NOTHING); PostgreSQL's in test_workers_postgres."""
    check_claim_many(LocalClaims() if local else DatabaseClaims(f"sqlite:///{tmp_path / 'claims.db'}", "claim-many"))
