"""Where a study lives and how it survives a killed worker: Optuna RDB storage with heartbeats.

Every running trial writes a heartbeat; a trial whose heartbeat is older than the grace period
belongs to a dead process (SIGKILL leaves no chance to clean up). Optuna then marks it FAIL and
RetryHeartbeatStaleTrialCallback enqueues a copy with the same point, which the next trial of any worker
takes first: the point is re-proposed, never skipped.
"""

from __future__ import annotations

import time
import warnings

import optuna
from optuna.trial import TrialState

from phaze.search.claims import SQLITE_BUSY_TIMEOUT_S

HEARTBEAT_INTERVAL_S = 2
"""Seconds between a running trial's heartbeats (one small UPDATE each; Optuna's examples use 60 s
for hour-long trials; ours take ~0.1-10 s, so a dead worker is noticed within seconds)."""
GRACE_PERIOD_S = 3 * HEARTBEAT_INTERVAL_S
"""Heartbeat age after which a running trial is dead: three missed beats (Optuna's default is two;
one more absorbs SQLite lock waits on a loaded 2-core machine)."""
POLL_S = 0.5
"""How often a waiting worker looks at the study again."""


def make_storage(url: str | None) -> optuna.storages.BaseStorage | None:
    """An RDB storage with heartbeats and retry of dead trials for any SQLAlchemy URL; None (in memory) for none."""
    if url is None:
        return None
    engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}} if url.startswith("sqlite") else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url, engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None),
        )


def running(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def fail_dead_trials(study: optuna.Study, wait_s: float | None) -> int:
    """Fail (and re-enqueue) the running trials of dead processes; returns how many are still running.

    Waits until no trial is running or `wait_s` has passed: a trial whose process died just now
    still has a fresh heartbeat, so a restarted study waits one grace period for it to go stale.
    `wait_s=None` waits for every running trial (live ones finish, dead ones go stale).
    Only for studies in a storage from `make_storage` (heartbeats on).
    """
    if not running(study):
        return 0
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        left = len(running(study))
        if not left or (deadline is not None and time.monotonic() >= deadline):
            return left
        time.sleep(POLL_S)


def requeue_interrupted(study: optuna.Study, param: str) -> int:
    """Re-enqueue failed trials (SIGINT, or stale without a retry) whose point no other trial holds."""
    trials = study.get_trials(deepcopy=False)
    held = {t.params.get(param) for t in trials if t.state != TrialState.FAIL}
    retried = {t.system_attrs.get("failed_trial") for t in trials} | {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None)
    count = 0
    for t in trials:
        if t.state == TrialState.FAIL and param in t.params and t.params[param] not in held and t.number not in retried:
            retry(study, t)
            held.add(t.params[param])
            count += 1
    return count


def release_orphan_claims(study: optuna.Study, claims, param: str) -> int:
    """Drop claims whose trial failed before recording its point (it died between the two writes)."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    released = 0
    for point, owner in claims.owners_by_point().items():
        t = trials.get(owner)
        if t is not None and t.state == TrialState.FAIL and param not in t.params:
            claims.release(point, owner)
            released += 1
    return released
