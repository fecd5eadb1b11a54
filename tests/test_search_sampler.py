"""The bound-ordered sampler shared by several workers: every point decided once, no bound computed twice."""

import optuna
import pytest

from phaze.search.claims import PASSED_OVER, LocalClaims
from phaze.search.samplers import ClaimedOrderSampler, SpaceExhausted

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
        def passed_over(point: int) -> bool:
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
