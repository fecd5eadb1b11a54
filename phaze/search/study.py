"""A run's studies over an architecture space: run_study, with search.n_workers processes, and its StudyOutcome.

The study itself is split by job: its identity and storage (phaze.search.identity), the strategy named by
search.sampler (phaze.search.strategies), each trial's pruning and record (phaze.search.objective), the ranking of its
trials (phaze.search.ranking) and one worker's loop (phaze.search.loop). Their public names are importable from here too.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import optuna
import pandas as pd

from phaze.cores import usable_cores
from phaze.schema.choices import Objective
from phaze.search.claims import PASSED_OVER
from phaze.search.evaluator import Evaluation, SpaceEvaluator
from phaze.search.identity import storage_url, study_name, tracker_for  # noqa: F401  (tracker_for, study_name: re-exported)
from phaze.search.spec import StudySpec
from phaze.search.ahead import progress_total  # noqa: F401  (re-exported)
from phaze.search.loop import failed_numbers, finished, recover, search, work, worker_study  # noqa: F401  (re-exported)
from phaze.search.objective import FULL_EVAL_ATTR, MILPS_ATTR  # noqa: F401  (MILPS_ATTR: re-exported)
from phaze.search.ranking import (POINT_PARAM, RECORD_ATTR, pruned_by, to_beat, top_n_of, top_trials,  # noqa: F401  (RECORD_ATTR: re-exported)
                                  trial_status, value_to_beat)
from phaze.search.strategies import strategy_of
from phaze.search.workers import SideJob, WorkerPool
from phaze.tracking import StudyTracker

OBJECTIVES = Objective.values()


@dataclass(frozen=True)
class StudyOutcome:
    study: optuna.Study
    evaluator: SpaceEvaluator
    best_index: int | None
    best: Evaluation | None
    baseline: Evaluation
    n_trials: int
    n_pruned: int
    n_full_evals: int
    wall_s: float
    logging_s_per_trial: float
    n_skipped: int = 0
    """Points the branch-and-bound order passed over without a trial: their placement bound could not beat the study."""
    baseline_searched: Evaluation | None = None
    """The hw.baseline preset with the searched placement (None without a preset baseline)."""
    top: tuple[tuple[int, Evaluation], ...] = ()
    """The search.top_n best points that fit (point index, evaluation), best first (ties: the first trial first);
    top[0] is (best_index, best). Exact for a pruning study that finished (value_to_beat states the rule for ties)."""

    @property
    def speedup(self) -> float:
        """Mean over the models of the best point's throughput over the baseline's."""
        return self.best.speedup_over(self.baseline) if self.best is not None else float("nan")

    @property
    def speedup_searched(self) -> float:
        """The same over the baseline chip with its searched placement (NaN without a preset baseline)."""
        if self.best is None or self.baseline_searched is None:
            return float("nan")
        return self.best.speedup_over(self.baseline_searched)


def optimize(spec: StudySpec, evaluator: SpaceEvaluator, tracker: StudyTracker | None, progress: bool,
             pool: WorkerPool, first: tuple | None = None) -> tuple[optuna.Study, dict[int, Evaluation], object]:
    """Run (or resume) the study of `spec` over `evaluator` with this process and the pool's workers: (study, this
    process's full evaluations, the value of `first`, (function, args) that the study does not wait on, called as
    WorkerPool.run_first does, or None without it)."""
    study = worker_study(spec, evaluator, worker=0)
    durable = storage_url(spec.config.search) is not None
    if durable:
        recover(spec, study, study.sampler.claims if strategy_of(spec.config.search.sampler).ordered else None)
    if tracker is not None:
        tracker.close_failed(failed_numbers(study))

    def here() -> dict[int, Evaluation]:
        """This process's worker: its loop, and the points it fully evaluated."""
        return search(spec, study, evaluator, tracker, durable, progress).full_evals

    job = (work, (spec, evaluator))
    if first is None:
        return study, pool.run(*job, here), None
    return (study, *pool.run_first(first, *job, here))


def uses_model_caps(search, evaluator: SpaceEvaluator) -> bool:
    """Whether a common study caps each model by its own optimum: several models, exact branch and bound on throughput."""
    return (len(evaluator.models) > 1 and bool(search.model_caps) and strategy_of(search.sampler).branch_and_bound
            and bool(search.prune) and search.objective == "throughput")


def model_optima(evaluator: SpaceEvaluator, progress: bool, pool: WorkerPool) -> np.ndarray:
    """Per model, an upper bound on its throughput at any point of the space: its own study's best, raised by
    search.rel_gap (each study run or resumed in the common study's storage, sharing the evaluator's bounds and
    scheduled layers); inf for a model whose study did not finish (search.timeout_s)."""
    caps = np.full(len(evaluator.models), np.inf)
    for k, m in enumerate(evaluator.models):
        alone = evaluator.single(k)
        study, _, _ = optimize(alone.spec, alone, None, progress, pool)
        if finished(study) and any(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
            caps[k] = to_beat(alone.spec.config.search, study.best_value)
    return caps


def run_study(spec: StudySpec, tracker: StudyTracker | None = None, progress: bool = True) -> StudyOutcome:
    """Run (or resume) the study of `spec`, with search.n_workers processes, and return its outcome.

    A common study (several models) first runs each model's own study, whose best caps that model's throughput
    at every point (no point beats a model's optimum): the mean of the caps bounds every point far tighter than
    the work bound, which leaves out gradient synchronisation and pipeline bubbles."""
    start = time.perf_counter()
    search = spec.config.search
    with WorkerPool(int(search.n_workers)) as pool, ExitStack() as stack:  # one set of worker processes for every study of the run
        evaluator = SpaceEvaluator(spec)
        beside = stack.enter_context(SideJob(baselines, (evaluator,))) if baseline_beside(spec) else None
        first = (baselines, (evaluator,)) if beside is None and not spec.config.compat.baseline_in_optimum_run else None
        if uses_model_caps(search, evaluator):
            evaluator.cap_models(model_optima(evaluator, progress, pool))
        study, full_evals, early = optimize(spec, evaluator, tracker, progress, pool, first)
        pool.release()  # the workers shut down while this process reads the study (joined at the end)
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        top = tuple((i, full_evals.get(i) or evaluator.evaluate(i)) for i in (t.params[POINT_PARAM] for t in top_trials(complete, top_n_of(search))))
        best_index, best = top[0] if top else (None, None)
        if beside is not None:
            early = beside.result()
        baseline, baseline_searched = early if early is not None else baselines(evaluator, best_index, best)
        return StudyOutcome(
            study=study, evaluator=evaluator, best_index=best_index, best=best, baseline=baseline,
            n_trials=len(trials), n_pruned=sum(t.state == optuna.trial.TrialState.PRUNED for t in trials),
            n_full_evals=sum(bool(t.user_attrs.get(FULL_EVAL_ATTR)) for t in trials), wall_s=time.perf_counter() - start,
            logging_s_per_trial=tracker.overhead_per_trial_s if tracker else 0.0,
            n_skipped=n_passed_over(search, study, evaluator, value_to_beat(complete, top_n_of(search))),
            baseline_searched=baseline_searched, top=top,
        )


def baseline_beside(spec: StudySpec) -> bool:
    """Whether a process beside the study computes the baseline: only on a core the workers leave idle (with every core
    a worker's, a third process slowed two workers down: 74.1 s against 71.5 s, docs/scaling.md; the last worker then
    computes it before its share of the study, WorkerPool.run_first), and only when it does not wait on the study's
    optimum (compat.baseline_in_optimum_run)."""
    return int(spec.config.search.n_workers) < usable_cores() and not spec.config.compat.baseline_in_optimum_run


def baselines(evaluator: SpaceEvaluator, optimum_index: int | None = None, optimum: Evaluation | None = None) -> tuple[Evaluation, Evaluation | None]:
    """The baseline chip with each model's expert placement, and with the searched one where hw.baseline names a preset.
    They do not depend on the study (except under compat.baseline_in_optimum_run, given the optimum), so run_study
    has a process beside the study compute them on a core the workers leave idle (baseline_beside)."""
    fixed = evaluator.baseline(optimum_index=optimum_index, optimum=optimum)
    return fixed, evaluator.baseline(fixed=False) if evaluator.spec.config.hw.baseline else None


def n_passed_over(search, study: optuna.Study, evaluator: SpaceEvaluator, best_value: float | None) -> int:
    """Points of a pruning branch-and-bound study that no trial claimed (none, or PASSED_OVER) although their
    work bound beats the value to beat (`best_value`: the N-th best, value_to_beat): the sampler passed over them on
    their placement bound."""
    if not strategy_of(search.sampler).branch_and_bound or not search.prune or best_value is None:
        return 0
    above = np.flatnonzero(evaluator.work_bound * evaluator.objective_scale() > to_beat(search, best_value))
    by_trials = {point for point, owner in study.sampler.claims.owners_by_point().items() if owner != PASSED_OVER}
    return len(set(above.tolist()) - by_trials)


def trials_frame(outcome: StudyOutcome) -> pd.DataFrame:
    """One row per trial: point, state, objective value(s), bound, area."""
    pts = outcome.evaluator.points
    rows = []
    for t in outcome.study.get_trials(deepcopy=False):
        i = t.params.get(POINT_PARAM)
        bound, stage = pruned_by(t, outcome.evaluator.spec.config.search.objective)
        rows.append({
            "trial": t.number, "point": i, "state": t.state.name, "status": trial_status(t),
            "value": t.values[0] if t.values else np.nan, "bound": bound,
            "pruned_by": stage, "area_mm2": float(pts.area_mm2.iloc[i]) if i is not None else np.nan,
        })
    return pd.DataFrame(rows)
