"""Where a study lives and how it survives a killed worker: Optuna RDB storage with heartbeats.

Every running trial writes a heartbeat; a trial whose heartbeat is older than the grace period
belongs to a dead process (SIGKILL leaves no chance to clean up). Optuna then marks it FAIL and
RetryHeartbeatStaleTrialCallback enqueues a copy with the same point, which the next trial of any worker
takes first: the point is re-proposed, never skipped.
"""

from __future__ import annotations

import datetime
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager

import sqlalchemy as sa

import optuna
from optuna.trial import TrialState

from phaze.search.claims import RETRY_HISTORY_ATTR, SQLITE_BUSY_TIMEOUT_S, tune_sqlite

POLL_S = 0.5
"""How often a waiting worker looks at the study again."""


class Interrupt:
    """Ctrl-C during a search: the first stops the study after the running trial, a second interrupts it."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self.requested = False

    def __call__(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("stopping after the running trial; Ctrl-C again to interrupt it (it will be re-run on resume)", file=sys.stderr)
        try:
            self.study.stop()
        except RuntimeError:  # not inside optimize (waiting for other workers): the caller checks `requested`
            pass


@contextmanager
def graceful_interrupt(study: optuna.Study):
    """SIGINT finishes the running trial instead of cutting it (and its database writes) in the middle."""
    if threading.current_thread() is not threading.main_thread():
        yield Interrupt(study)
        return
    handler = Interrupt(study)
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, previous)
    if handler.requested:
        raise KeyboardInterrupt


def make_storage(url: str | None, heartbeat_interval_s: int, grace_period_s: int) -> optuna.storages.BaseStorage | None:
    """An RDB storage with heartbeats and retry of dead trials for any SQLAlchemy URL; None (in memory) for none."""
    if url is None:
        return None
    engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}} if url.startswith("sqlite") else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(
            url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval_s, grace_period=grace_period_s,
            heartbeat_stale_trial_callback=retry_dead_trial(),
        )
    tune_sqlite(storage.engine)
    return storage


def running(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Trials running now, in any process (or dead, until their heartbeat goes stale)."""
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Enqueued trials (retries of dead ones) that no worker has taken yet."""
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


SILENT_TRIALS_SQL = sa.text(
    "SELECT t.number, t.datetime_start FROM trials t JOIN studies s ON s.study_id = t.study_id "
    "LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
    "WHERE s.study_name = :study AND t.state = 'RUNNING' AND h.trial_id IS NULL"
)
"""Running trials that never wrote a heartbeat (Optuna's schema: trials, studies, trial_heartbeats).
A process killed between creating a trial and its heartbeat thread's first write leaves one;
Optuna's stale check skips trials without a heartbeat, so they would stay RUNNING for ever."""


def fail_silent_trials(study: optuna.Study, url: str, grace_period_s: int) -> int:
    """Fail (and re-enqueue) running trials older than the grace period that never wrote a heartbeat."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(SILENT_TRIALS_SQL, {"study": study.study_name}).all()
    finally:
        engine.dispose()
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=grace_period_s)  # Optuna stamps local time
    retry = retry_dead_trial()
    failed = 0
    for number, started in rows:
        if isinstance(started, str):  # SQLite hands raw SQL its DATETIME text
            started = datetime.datetime.fromisoformat(started)
        if started is not None and started < cutoff:
            try:
                frozen = study.tell(number, state=TrialState.FAIL)
            except RuntimeError:  # finished meanwhile (by another worker's check, or it was alive after all)
                continue
            retry(study, frozen)
            failed += 1
    return failed


def retry_dead_trial() -> optuna.storages.RetryHeartbeatStaleTrialCallback:
    """Optuna's retry of a dead trial (same params, new number), for every failure (no retry limit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None)


def fail_dead_trials(study: optuna.Study, url: str, grace_period_s: int, wait_s: float) -> int:
    """Fail (and re-enqueue) the running trials of dead processes; returns how many are still running.

    Looks until no trial is running or `wait_s` has passed (0: once). A trial whose process died just
    now still has a fresh heartbeat: it goes stale within the grace period, and every trial Optuna
    starts fails stale trials first, so a restarted study need not wait for it; a worker that has
    nothing left to do waits (`search`) until every running trial has finished or gone stale.
    Only for studies in a storage from `make_storage` (heartbeats on).
    """
    if not running(study):
        return 0
    deadline = time.monotonic() + wait_s
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        fail_silent_trials(study, url, grace_period_s)
        left = len(running(study))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


def requeue_interrupted(study: optuna.Study, param: str) -> int:
    """Re-enqueue failed trials (SIGINT, or stale without a retry) whose point no other trial holds."""
    trials = study.get_trials(deepcopy=False)
    held = {t.params.get(param) for t in trials if t.state != TrialState.FAIL}
    retried = {t.system_attrs.get("failed_trial") for t in trials} | {n for t in trials for n in t.system_attrs.get(RETRY_HISTORY_ATTR, [])}
    retry = retry_dead_trial()
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
