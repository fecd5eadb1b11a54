"""One worker's loop over a study: trials until the study has all it needs, then the retries of trials that died.

Every worker runs it against the study's shared storage: the launcher in its own process, the others as the job
`work` that the worker pool (phaze.search.workers) runs in each of them.
"""

from __future__ import annotations

import optuna

from phaze.search.claims import PointTaken, claims_for
from phaze.search.evaluator import SpaceEvaluator
from phaze.search.ahead import bound_probe, points_ahead, progress_total
from phaze.search.identity import open_study, storage_url, tracker_for
from phaze.search.objective import FULL_EVAL_ATTR, MILPS_ATTR, Objective, solved_milps_s
from phaze.search.progress import StudyProgress
from phaze.search.ranking import POINT_PARAM, latest_nth, value_to_beat
from phaze.search.resume import fail_dead_trials, graceful_interrupt, make_storage, release_orphan_claims, requeue_interrupted, running, waiting
from phaze.search.strategies import strategy_of
from phaze.search.strategies.claimed_order import BOUND_STOP_ATTR, SpaceExhausted
from phaze.tracking import StudyTracker

FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
EXHAUSTED_ATTR = "space_exhausted"
"""Study attribute, True once a worker's ordered sampler has passed every point (each claimed by a
trial or shown unable to win by its bound); a recovery that releases claims sets it back to False."""
SKIPPED = (SpaceExhausted, PointTaken)
"""Trials that found their point taken by another worker: they end FAIL with nothing evaluated."""


def n_finished(study: optuna.Study) -> int:
    """Completed and pruned trials (failed ones do not count: their points are retried)."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def recover(spec, study: optuna.Study, claims) -> None:
    """Before any worker starts: fail the trials of dead processes and re-propose their points."""
    fail_dead_trials(study, storage_url(spec.config.search), int(spec.config.search.grace_period_s), wait_s=0)
    requeue_interrupted(study, POINT_PARAM)
    if claims is not None and release_orphan_claims(study, claims, POINT_PARAM):
        study.set_user_attr(EXHAUSTED_ATTR, False)


def finished(study: optuna.Study) -> bool:
    """Whether a branch-and-bound study ran to its end (stopped by its bound or out of points), so its best is proven."""
    attrs = study.user_attrs
    return BOUND_STOP_ATTR in attrs or bool(attrs.get(EXHAUSTED_ATTR))


def search(spec, study: optuna.Study, evaluator: SpaceEvaluator, tracker: StudyTracker | None, durable: bool,
           progress: bool = False) -> Objective:
    """One worker's loop: trials until the study is done, then the retries of trials that died meanwhile."""
    strategy = strategy_of(spec.config.search.sampler)
    multi, ordered = strategy.multi_objective, strategy.ordered
    claims = study.sampler.claims if ordered else None
    objective = Objective(spec, evaluator, strategy, tracker, claims)
    bounded = strategy.branch_and_bound and objective.prune
    if bounded:
        study.sampler.skip = objective.cannot_win
    total = strategy.n_trials(spec.config.search, len(evaluator))
    done_so_far = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    best_so_far = max((t.value for t in done_so_far), default=None) if not multi else None
    first_nth = value_to_beat(done_so_far, objective.top_n) if bounded else None
    seen = {"nth": first_nth, "values": list({t.params[POINT_PARAM]: t.value for t in done_so_far}.values()) if not multi else [],
            "evaluated": [t.params[POINT_PARAM] for t in study.get_trials(deepcopy=False) if t.user_attrs.get(FULL_EVAL_ATTR)]}
    bar = StudyProgress(progress_total(spec.config.search, evaluator, first_nth) if bounded else max(0, total - n_finished(study)),
                        "points" if bounded else "trials", enabled=progress, settled=first_nth is not None or not bounded,
                        position=(lambda: study.sampler.cursor) if bounded else None,
                        ahead=points_ahead(spec.config.search, evaluator, study.sampler, objective.top_n, seen) if bounded else None,
                        probe=bound_probe(spec.config.search, evaluator, study.sampler, seen) if bounded else None)
    shown = {"pruned": 0, "best": best_so_far, "trials": 0}

    def done(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """After each trial: advance the bar (pruned, passed over, best so far), stop when the study has all it needs."""
        if trial.state in FINISHED:
            shown["pruned"] += trial.state == optuna.trial.TrialState.PRUNED
            if trial.state == optuna.trial.TrialState.COMPLETE and not multi:
                shown["best"] = trial.value if shown["best"] is None else max(shown["best"], trial.value)
            postfix = {"pruned": shown["pruned"], "passed_over": getattr(study.sampler, "n_skipped", 0)}
            if shown["best"] is not None:
                postfix["best"] = f"{shown['best']:.6g}"
            if bounded:  # points decided (claimed or passed over) out of those whose work bound still beats the N-th best
                nth = latest_nth(study, objective.top_n)
                complete = trial.state == optuna.trial.TrialState.COMPLETE
                if complete:
                    seen["values"].append(trial.value)
                if trial.user_attrs.get(FULL_EVAL_ATTR):
                    seen["evaluated"].append(trial.params[POINT_PARAM])
                bar.trial(trial.duration.total_seconds(), complete, solved_milps_s(trial.user_attrs.get(MILPS_ATTR)))
                seen["nth"] = nth
                bar.update(study.sampler.cursor, progress_total(spec.config.search, evaluator, nth), nth is not None, **postfix)
            else:
                shown["trials"] += 1
                bar.update(shown["trials"], bar.total, **postfix)
        # Optuna answers a one-point space's suggestion itself, without the sampler: count the claims too
        exhausted = ordered and (study.sampler.exhausted or claims.count() >= len(evaluator))
        if exhausted:
            study.set_user_attr(EXHAUSTED_ATTR, True)
        if exhausted if ordered else n_finished(study) >= total:
            study.stop()

    def more_to_do() -> bool:
        """Whether the study still lacks trials (a finished or bound-stopped study runs none)."""
        if ordered:
            return not finished(study) and claims.count() < len(evaluator)
        return n_finished(study) < total

    with graceful_interrupt(study) as interrupt, bar:  # the bar closes on an error too (its thread stops writing)
        if more_to_do() or waiting(study):
            study.optimize(objective, n_trials=None, timeout=spec.config.search.timeout_s, callbacks=[done], catch=SKIPPED)
        while durable and not interrupt.requested and (waiting(study) or running(study)):
            if waiting(study):
                study.optimize(objective, n_trials=len(waiting(study)), callbacks=[done], catch=SKIPPED)
            else:
                fail_dead_trials(study, storage_url(spec.config.search), int(spec.config.search.grace_period_s), wait_s=int(spec.config.search.grace_period_s))
                if claims is not None and release_orphan_claims(study, claims, POINT_PARAM):
                    study.set_user_attr(EXHAUSTED_ATTR, False)  # their points are proposed again on resume
        bar.close()
        if tracker is not None:
            tracker.flush()
            tracker.close_failed(failed_numbers(study))
    return objective


def failed_numbers(study: optuna.Study) -> set[int]:
    """Numbers of the study's failed trials (dead, cut off, or skipped)."""
    return {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))}


def worker_study(spec, evaluator: SpaceEvaluator, worker: int) -> optuna.Study:
    """The study as seen by one worker: shared storage, this worker's sampler (and seed)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # SKIPPED trials are expected, not worth a warning each
    url = storage_url(spec.config.search)
    strategy = strategy_of(spec.config.search.sampler)
    claims = claims_for(url, spec.name) if strategy.ordered else None
    sampler = strategy.sampler(spec.config.search, evaluator, claims=claims, seed_offset=worker)
    return open_study(spec, make_storage(url, int(spec.config.search.heartbeat_interval_s), int(spec.config.search.grace_period_s)), sampler)


def work(spec, evaluator: SpaceEvaluator, worker: int) -> None:
    """One worker's share of the study of `spec` (a StudySpec; the job a WorkerPool runs in each worker): load the
    study with this worker's sampler and run trials until it is done."""
    study = worker_study(spec, evaluator, worker)
    search(spec, study, evaluator, tracker_for(spec), durable=True)
