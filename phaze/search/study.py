"""The Optuna study over an architecture space, with exact bound-based pruning before any ILP.

A trial proposes one valid point (an index into the sorted point table, so no invalid point can be
proposed); its work bound, then its placement bound, are compared with what the study already
holds (the search.top_n-th best value, or the finished points for NSGA-II); only a point that could
still enter the top N is fully evaluated, so the N best designs the study reports are the space's.
Training knobs (microbatch, recompute) and the placement are searched inside the trial by the
placement DP.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from omegaconf import OmegaConf

from phaze.compat import compat_of, switches_on
from phaze.cores import usable_cores
from phaze.search.claims import PASSED_OVER, PointTaken, claims_for
from phaze.search.evaluator import GIB, Evaluation, SpaceEvaluator
from phaze.search.progress import Ahead, StudyProgress, kinds_ahead
from phaze.search.resume import fail_dead_trials, graceful_interrupt, make_storage, release_orphan_claims, requeue_interrupted, running, waiting
from phaze.search.samplers import BOUND_STOP_ATTR, ORDERED, SpaceExhausted, make_sampler
from phaze.search.workers import SideJob, WorkerPool, work
from phaze.tracking import (BOUND_PREFIX, EVALUATED, INFEASIBLE, OBJECTIVE_METRICS, PRUNED, PRUNED_BY_TAG, STATUS_TAG, StudyTracker, TrialRecord,
                            parent_run_name, resolve_tracking_uri, study_params)

OBJECTIVES = ("throughput", "throughput_per_tdp")
POINT_PARAM = "point"
STORAGE_FILE = "studies.db"
"""Default Optuna storage: an SQLite file next to mlruns/, so a killed study resumes."""
RECORD_ATTR = "mlflow_record"
"""User attribute holding a finished trial's MLflow child run (params, metrics, tags), as logged."""
MILPS_ATTR = "layer_milps"
"""User attribute listing a full evaluation's layer MILPs as [status, mip_gap, solve_s] (for closure statistics)."""
WORKER = f"{socket.gethostname()}:{os.getpid()}"
"""Which process ran a trial (tag `worker` of its child run): host and process id."""
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
EXHAUSTED_ATTR = "space_exhausted"
"""Study attribute, True once a worker's ordered sampler has passed every point (each claimed by a
trial or shown unable to win by its bound); a recovery that releases claims sets it back to False."""
SKIPPED = (SpaceExhausted, PointTaken)
"""Trials that found their point taken by another worker: they end FAIL with nothing evaluated."""


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


def study_name(cfg) -> str:
    """Model, space, cluster, sampler and objective, plus a hash of everything that changes the answer."""
    if cfg.search.study_name:
        return cfg.search.study_name
    keyed = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "models", "hw", "cluster", "train", "schedule")}
    keyed["objective"] = cfg.search.objective
    keyed["placement"] = cfg.search.placement
    if cfg.search.rel_gap:
        keyed["rel_gap"] = float(cfg.search.rel_gap)
    if top_n_of(cfg) != 1:  # a study pruned against its best is not a top-N study: they must not share a storage
        keyed["top_n"] = top_n_of(cfg)
    if switches_on(compat_of(cfg)):
        keyed["compat"] = OmegaConf.to_container(cfg.compat, resolve=True)
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:8]
    models = "+".join(m.name for m in cfg.models) if cfg.models else cfg.model.name
    placement = "" if cfg.search.placement == "searched" else f"-{cfg.search.placement}"
    return f"{models}-{cfg.hw.name}-{cfg.cluster.name}-{cfg.search.sampler}-{cfg.search.objective}{placement}-{digest}"


def storage_url(cfg) -> str | None:
    """search.storage, 'memory' for none, or by default the SQLite file next to mlruns/."""
    if cfg.search.storage == "memory":
        return None
    if cfg.search.storage:
        return cfg.search.storage
    return f"sqlite:///{(Path.cwd() / STORAGE_FILE).resolve()}"


class Objective:
    """Optuna objective: prune by bounds, else evaluate; every trial logs its MLflow child run before it ends."""

    def __init__(self, cfg, evaluator: SpaceEvaluator, multi: bool, tracker: StudyTracker | None = None, claims=None):
        self.cfg = cfg
        self.ev = evaluator
        self.tracker = tracker
        self.multi = multi
        self.claims = claims
        self.scales = evaluator.objective_scale()
        self.prune = bool(cfg.search.prune)
        self.top_n = top_n_of(cfg)
        self.full_evals: dict[int, Evaluation] = {}

    def scale(self, index: int) -> float:
        """Objective per sequence/s: 1, or 1/TDP for throughput per watt."""
        return float(self.scales[index])

    def value_of(self, index: int, throughput: float):
        value = throughput * self.scale(index)
        return (value, float(self.ev.points.area_mm2.iloc[index])) if self.multi else value

    def dominated(self, done: list[optuna.trial.FrozenTrial], index: int, bound: float) -> bool:
        """Whether a point whose objective is at most `bound` cannot improve on the completed trials `done`: cannot
        enter their top N (at most their N-th best value, value_to_beat), or for NSGA-II is dominated by one of them."""
        if not done:
            return False
        if not self.multi:
            nth = value_to_beat(done, self.top_n)
            return nth is not None and bound <= to_beat(self.cfg, nth)
        area = float(self.ev.points.area_mm2.iloc[index])
        return any(t.values[0] >= bound and t.values[1] <= area for t in done)

    def own(self, trial: optuna.Trial, index: int) -> None:
        """Make sure this trial holds the point's claim: a retried trial takes it over from its dead original."""
        owner = self.claims.owner(index)
        if owner == trial.number or (owner is None and self.claims.claim(index, trial.number)):
            return
        states = {t.number: t.state for t in trial.study.get_trials(deepcopy=False)}
        if owner is not None and states.get(owner) == optuna.trial.TrialState.FAIL and self.claims.take_over(index, owner, trial.number):
            return
        raise PointTaken(f"point {index} belongs to trial {owner}")

    def cannot_win(self, study: optuna.Study):
        """For the branch-and-bound order: a predicate passed_over(index, known_only=False), fixed at the study's value
        to beat now (its N-th best, value_to_beat), telling which points their placement bound, or failing that their
        list-schedule bound, shows unable to beat it (work-bound-dominated points are left to a trial, whose pruning
        stops the study); with known_only, from the bounds found so far only (False where that needs a DP). A point
        passed over costs no trial: its bounds are what a trial would compute before pruning it, without the study's
        and MLflow's bookkeeping."""
        nth = None if self.multi else value_to_beat(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)), self.top_n)

        def passed_over(index: int, known_only: bool = False) -> bool:
            beat = None if nth is None else self.beat_of(nth, index)
            if beat is None or self.ev.work_bound[index] <= beat:
                return False
            if known_only:
                return self.ev.known_bound(index) <= beat
            return self.ev.placement_bound(index, beat) <= beat or self.ev.schedule_bound(index, beat) <= beat

        return passed_over

    def latest_beat(self, study: optuna.Study, index: int, known: float | None):
        """The value to beat as a callable that reads the study's N-th best again (several workers): a trial started
        before another worker finished a better point prunes with it from its next layer step, instead of running its
        MILPs to the end against the value it started with (or none)."""
        def now() -> float | None:
            nth = latest_nth(study, self.top_n)
            if nth is None:  # fewer than N points completed yet
                return known
            best = self.beat_of(nth, index)
            return best if known is None else max(known, best)

        return now

    def beat(self, done: list[optuna.trial.FrozenTrial], index: int) -> float | None:
        """The throughput a single-objective trial must exceed to enter the top N of the completed trials `done` (None:
        nothing to beat, fewer than N points completed, or multi-objective)."""
        nth = None if self.multi else value_to_beat(done, self.top_n)
        return None if nth is None else self.beat_of(nth, index)

    def beat_of(self, nth_value: float, index: int) -> float:
        """The throughput the point must exceed to beat the objective value `nth_value` (the study's N-th best)."""
        return to_beat(self.cfg, nth_value) / self.scale(index)

    def __call__(self, trial: optuna.Trial):
        for key, value in trial.user_attrs.items():  # a retried trial inherits its dead original's attributes
            if value is not None:
                trial.set_user_attr(key, None)
        index = trial.suggest_int(POINT_PARAM, 0, len(self.ev) - 1)
        if self.claims is not None:
            self.own(trial, index)
        study = trial.study
        # One snapshot of the finished points per trial for its bounds: a best value found meanwhile by another
        # worker only makes that pruning less aggressive, never wrong (the evaluation reads the latest: latest_beat).
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        for prev in done:
            if prev.params.get(POINT_PARAM) == index:  # samplers may propose a point twice: reuse its value
                trial.set_user_attr("duplicate_of", prev.number)
                first = prev.user_attrs.get(RECORD_ATTR) or {"params": self.ev.arch_params(index), "metrics": {}, "tags": {STATUS_TAG: EVALUATED}}
                self._set_record(trial, first["params"], first["metrics"], {STATUS_TAG: first["tags"][STATUS_TAG], "duplicate_of": prev.number})
                return prev.values if self.multi else prev.value
        if self.prune:
            work = float(self.ev.work_bound[index]) * self.scale(index)
            if self.dominated(done, index, work):
                if self.cfg.search.sampler == "bound":  # points come in decreasing work bound: none left can win
                    study.sampler.stop_at_bound(study, index)
                self._pruned(trial, index, "work_bound", work)
            placement = self.ev.placement_bound(index, self.beat(done, index)) * self.scale(index)
            if self.dominated(done, index, placement):
                self._pruned(trial, index, "placement_bound", placement)
            listed = self.ev.schedule_bound(index, self.beat(done, index)) * self.scale(index)
            if self.dominated(done, index, listed):
                self._pruned(trial, index, "schedule_bound", listed)
        beat = self.beat(done, index) if self.prune else None
        if self.prune and not self.multi and int(self.cfg.search.n_workers) > 1:
            beat = self.latest_beat(study, index, beat)
        evaluation = self.ev.evaluate(index, beat)
        trial.set_user_attr("full_eval", True)  # ILPs and DP ran, whether or not the point is then pruned
        if evaluation.milps:
            trial.set_user_attr(MILPS_ATTR, [[m.status, m.mip_gap, m.solve_s] for m in evaluation.milps])
        if not evaluation.exact:  # its layers, scheduled one at a time, showed it cannot beat the study
            self._pruned(trial, index, "ilp_bound", evaluation.throughput_seq_s * self.scale(index))
        self.full_evals[index] = evaluation
        self._record(trial, index, evaluation)
        return self.value_of(index, evaluation.throughput_seq_s)

    def _set_record(self, trial, params: dict, metrics: dict, tags: dict) -> None:
        """Keep the trial's child run on the trial and write it to MLflow now, before Optuna records the trial's end."""
        tags = {**tags, "worker": WORKER}
        trial.set_user_attr(RECORD_ATTR, {"params": params, "metrics": metrics, "tags": tags})
        if self.tracker is not None:
            self.tracker.log_trial(TrialRecord(trial.number, params, metrics, tags))

    def _pruned(self, trial, index: int, stage: str, bound: float):
        """Record the stage and the bound (on the objective) that pruned the trial, in its record (one database write),
        and prune it. The bound is logged as bound_throughput_seq_s (and bound_perf_per_tdp for that objective): an upper
        bound, never the point's throughput."""
        tdp_w = float(self.ev.points.tdp_w.iloc[index])
        metrics = {"area_mm2": float(self.ev.points.area_mm2.iloc[index]), "tdp_w": tdp_w,
                   f"{BOUND_PREFIX}{OBJECTIVE_METRICS['throughput']}": bound / self.scale(index)}
        if self.cfg.search.objective != "throughput":
            metrics[f"{BOUND_PREFIX}{OBJECTIVE_METRICS[self.cfg.search.objective]}"] = bound
        self._set_record(trial, self.ev.arch_params(index), metrics, {STATUS_TAG: PRUNED, PRUNED_BY_TAG: stage})
        raise optuna.TrialPruned(f"{stage} {bound:.6g} cannot beat the study")

    def _record(self, trial, index: int, e: Evaluation) -> None:
        """A fully evaluated trial's record: the chip (hw.*) and each model's plan (placement.*, train.mbs and
        train.recompute: the CLI's names) as params, its numbers as metrics. Status infeasible where a model has no
        placement that fits: it then has no throughput_seq_s (the 0 the study scores it with is not a result)."""
        params = self.ev.arch_params(index)
        tdp_w = float(self.ev.points.tdp_w.iloc[index])
        metrics = {"area_mm2": float(self.ev.points.area_mm2.iloc[index]), "tdp_w": tdp_w, "ilp_s": e.ilp_s, "dp_s": e.dp_s}
        unfit = [model for model, r in e.results.items() if r is None or not r.feasible]
        for model, r in e.results.items():  # several models: each one's fields prefixed with its name
            if model in unfit:
                continue
            prefix = "" if len(e.results) == 1 else f"{model}."
            fields = r.strategy.fields()
            placement = {f"{prefix}train.mbs": fields.pop("mbs"), f"{prefix}train.recompute": fields.pop("recompute"),
                         **{f"{prefix}placement.{k}": v for k, v in fields.items()}}
            params.update(placement)
            trial.set_user_attr(f"{prefix}placement", placement)
            metrics.update({f"{prefix}time_per_batch_s": r.time_per_batch_s, f"{prefix}mfu": r.mfu,
                            f"{prefix}memory_per_device_gib": r.memory_per_device_bytes / GIB})
            if prefix:
                metrics[f"{prefix}throughput_seq_s"] = r.throughput_seq_s
        tags = {STATUS_TAG: INFEASIBLE if unfit else EVALUATED}
        if unfit and len(e.results) > 1:
            tags["infeasible_models"] = "+".join(unfit)
        if not unfit:
            metrics.update({"throughput_seq_s": e.throughput_seq_s, "perf_per_tdp": e.throughput_seq_s / tdp_w})
        metrics.update(e.milp_metrics())
        self._set_record(trial, params, metrics, tags)


def top_n_of(cfg) -> int:
    """search.top_n: how many best designs the study ranks exactly (1 where the config predates the field)."""
    return int(cfg.search.get("top_n", 1))


def value_to_beat(done: list[optuna.trial.FrozenTrial], n: int) -> float | None:
    """The objective value a point must exceed to enter the top n of the completed trials `done`: the n-th best value
    over their distinct points (a point a sampler proposed twice counts once), the best for n=1; None while fewer than n
    points completed (nothing to beat yet).

    A point whose bound is at most this value is pruned, ties included (as a study of its best always did): a point
    that ties the n-th best is left out for the one completed first, so the top n's values are exactly the space's n
    best and its points are the space's except among those tied at the n-th place."""
    values = sorted({t.params[POINT_PARAM]: t.values[0] for t in done}.values(), reverse=True)
    return values[n - 1] if len(values) >= n else None


def latest_nth(study: optuna.Study, n: int) -> float | None:
    """value_to_beat over the study's completed trials now (one query for its best where n=1)."""
    if n == 1:
        try:
            return study.best_value
        except ValueError:  # no trial completed yet
            return None
    return value_to_beat(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)), n)


def top_trials(done: list[optuna.trial.FrozenTrial], n: int) -> list[optuna.trial.FrozenTrial]:
    """The first completed trial of each of the n distinct points with the best values that fit (value > 0, and its
    record, where it has one, not `infeasible`: with several models, one model that fits nowhere), best first; among
    equal values the earlier trial first (as Optuna's best trial)."""
    first: dict[int, optuna.trial.FrozenTrial] = {}
    for t in sorted(done, key=lambda t: t.number):
        first.setdefault(t.params[POINT_PARAM], t)
    ranked = sorted((t for t in first.values() if t.values[0] > 0 and trial_status(t) != INFEASIBLE), key=lambda t: (-t.values[0], t.number))
    return ranked[:n]


def to_beat(cfg, best: float) -> float:
    """The objective value a point must exceed to matter: the best so far, raised by search.rel_gap (a
    study that stops proves its best within that fraction of the optimum, as a MILP's relative gap does)."""
    return best * (1.0 + float(cfg.search.rel_gap))


def progress_total(cfg, evaluator: SpaceEvaluator, best: float | None) -> int:
    """What a branch-and-bound study still has to decide: the points whose work bound (on the objective) beats the
    value to beat so far (`best`: the N-th best, value_to_beat), every point before there is one. The order visits them
    first; the next one stops the study."""
    if best is None:
        return len(evaluator)
    return int(np.count_nonzero(evaluator.work_bound * evaluator.objective_scale() > to_beat(cfg, best)))


def n_trials_for(cfg, evaluator: SpaceEvaluator) -> int:
    """Trials to run: every point for grid and bound order (they stop on their own), search.n_trials otherwise."""
    if cfg.search.sampler in ORDERED:
        return len(evaluator)
    return int(cfg.search.n_trials)


def n_finished(study: optuna.Study) -> int:
    """Completed and pruned trials (failed ones do not count: their points are retried)."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def open_study(cfg, storage, sampler=None) -> optuna.Study:
    """Create the study, or load it when it exists (a resumed or shared study)."""
    multi = cfg.search.sampler == "nsga2"
    return optuna.create_study(
        study_name=study_name(cfg), storage=storage, sampler=sampler, load_if_exists=True,
        directions=["maximize", "minimize"] if multi else ["maximize"],
    )


def recover(cfg, study: optuna.Study, claims) -> None:
    """Before any worker starts: fail the trials of dead processes and re-propose their points."""
    fail_dead_trials(study, storage_url(cfg), int(cfg.search.grace_period_s), wait_s=0)
    requeue_interrupted(study, POINT_PARAM)
    if claims is not None and release_orphan_claims(study, claims, POINT_PARAM):
        study.set_user_attr(EXHAUSTED_ATTR, False)


def finished(study: optuna.Study) -> bool:
    """Whether a branch-and-bound study ran to its end (stopped by its bound or out of points), so its best is proven."""
    attrs = study.user_attrs
    return BOUND_STOP_ATTR in attrs or bool(attrs.get(EXHAUSTED_ATTR))


def points_ahead(cfg, evaluator: SpaceEvaluator, sampler, top_n: int, seen: dict):
    """For a branch-and-bound study's progress: a callable reading what is known of the points still to decide
    (phaze.search.progress.Ahead), from the value to beat and the values completed that the study's loop keeps in `seen`
    ("nth", "values") and the bounds found so far (SpaceEvaluator.known_bounds). Before there is a value to beat, the
    points are read against the lowest value completed so far (none before the first: only the evaluations are left)."""
    order, signatures, scales = np.asarray(sampler.order), evaluator.sibling_groups(), evaluator.objective_scale()

    def read() -> Ahead:
        nth, values, cursor = seen["nth"], list(seen["values"]), sampler.cursor
        evaluations = 0 if nth is not None else max(top_n - len(values), 0)
        value = nth if nth is not None else min(values, default=None)
        points = order[cursor:progress_total(cfg, evaluator, value)] if value is not None else order[:0]
        fresh, bounded = kinds_ahead(evaluator.known_bounds(points), evaluator.work_bound[points],
                                     to_beat(cfg, value) / scales[points] if value is not None else scales[points], signatures[points])
        bound_s = evaluator.placement_bound_s / evaluator.placement_bounds if evaluator.placement_bounds else None
        return Ahead(cursor, fresh, bounded, bound_s, evaluations)

    return read


def search(cfg, study: optuna.Study, evaluator: SpaceEvaluator, tracker: StudyTracker | None, durable: bool,
           progress: bool = False) -> Objective:
    """One worker's loop: trials until the study is done, then the retries of trials that died meanwhile."""
    multi = cfg.search.sampler == "nsga2"
    ordered = cfg.search.sampler in ORDERED
    claims = study.sampler.claims if ordered else None
    objective = Objective(cfg, evaluator, multi, tracker, claims)
    if cfg.search.sampler == "bound" and objective.prune:
        study.sampler.skip = objective.cannot_win
    total = n_trials_for(cfg, evaluator)
    bounded = cfg.search.sampler == "bound" and objective.prune
    done_so_far = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    best_so_far = max((t.value for t in done_so_far), default=None) if not multi else None
    first_nth = value_to_beat(done_so_far, objective.top_n) if bounded else None
    seen = {"nth": first_nth, "values": list({t.params[POINT_PARAM]: t.value for t in done_so_far}.values()) if not multi else []}
    bar = StudyProgress(progress_total(cfg, evaluator, first_nth) if bounded else max(0, total - n_finished(study)),
                        "points" if bounded else "trials", enabled=progress, settled=first_nth is not None or not bounded,
                        position=(lambda: study.sampler.cursor) if bounded else None,
                        ahead=points_ahead(cfg, evaluator, study.sampler, objective.top_n, seen) if bounded else None)
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
                bar.trial(trial.duration.total_seconds(), complete)
                seen["nth"] = nth
                bar.update(study.sampler.cursor, progress_total(cfg, evaluator, nth), nth is not None, **postfix)
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
            study.optimize(objective, n_trials=None, timeout=cfg.search.get("timeout_s"), callbacks=[done], catch=SKIPPED)
        while durable and not interrupt.requested and (waiting(study) or running(study)):
            if waiting(study):
                study.optimize(objective, n_trials=len(waiting(study)), callbacks=[done], catch=SKIPPED)
            else:
                fail_dead_trials(study, storage_url(cfg), int(cfg.search.grace_period_s), wait_s=int(cfg.search.grace_period_s))
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


def worker_study(cfg, evaluator: SpaceEvaluator, worker: int) -> optuna.Study:
    """The study as seen by one worker: shared storage, this worker's sampler (and seed)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # SKIPPED trials are expected, not worth a warning each
    url = storage_url(cfg)
    claims = claims_for(url, study_name(cfg)) if cfg.search.sampler in ORDERED else None
    sampler = make_sampler(cfg.search, evaluator, claims, seed_offset=worker)
    return open_study(cfg, make_storage(url, int(cfg.search.heartbeat_interval_s), int(cfg.search.grace_period_s)), sampler)


def optimize(cfg, evaluator: SpaceEvaluator, tracker: StudyTracker | None, progress: bool,
             pool: WorkerPool, first: tuple | None = None) -> tuple[optuna.Study, dict[int, Evaluation], object]:
    """Run (or resume) the study of cfg over `evaluator` with this process and the pool's workers: (study, this
    process's full evaluations, the value of `first`, (function, args) that the study does not wait on, called as
    WorkerPool.run_first does, or None without it)."""
    study = worker_study(cfg, evaluator, worker=0)
    durable = storage_url(cfg) is not None
    if durable:
        recover(cfg, study, study.sampler.claims if cfg.search.sampler in ORDERED else None)
    if tracker is not None:
        tracker.close_failed(failed_numbers(study))

    def here() -> dict[int, Evaluation]:
        """This process's worker: its loop, and the points it fully evaluated."""
        return search(cfg, study, evaluator, tracker, durable, progress).full_evals

    job = (work, (OmegaConf.to_yaml(cfg, resolve=True), evaluator))
    if first is None:
        return study, pool.run(*job, here), None
    return (study, *pool.run_first(first, *job, here))


def uses_model_caps(cfg, evaluator: SpaceEvaluator) -> bool:
    """Whether a common study caps each model by its own optimum: several models, exact branch and bound on throughput."""
    return (len(evaluator.models) > 1 and bool(cfg.search.model_caps) and cfg.search.sampler == "bound" and bool(cfg.search.prune)
            and cfg.search.objective == "throughput")


def model_optima(evaluator: SpaceEvaluator, progress: bool, pool: WorkerPool) -> np.ndarray:
    """Per model, an upper bound on its throughput at any point of the space: its own study's best, raised by
    search.rel_gap (each study run or resumed in the common study's storage, sharing the evaluator's bounds and
    scheduled layers); inf for a model whose study did not finish (search.timeout_s)."""
    caps = np.full(len(evaluator.models), np.inf)
    for k, m in enumerate(evaluator.models):
        study, _, _ = optimize(m.cfg, evaluator.single(k), None, progress, pool)
        if finished(study) and any(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
            caps[k] = to_beat(m.cfg, study.best_value)
    return caps


def run_study(cfg, tracker: StudyTracker | None = None, progress: bool = True) -> StudyOutcome:
    """Run (or resume) the study described by cfg, with search.n_workers processes, and return its outcome.

    A common study (several models) first runs each model's own study, whose best caps that model's throughput
    at every point (no point beats a model's optimum): the mean of the caps bounds every point far tighter than
    the work bound, which leaves out gradient synchronisation and pipeline bubbles."""
    if cfg.search.objective not in OBJECTIVES:
        raise ValueError(f"search.objective={cfg.search.objective!r}; allowed: {list(OBJECTIVES)}")
    start = time.perf_counter()
    with WorkerPool(int(cfg.search.n_workers)) as pool, ExitStack() as stack:  # one set of worker processes for every study of the run
        evaluator = SpaceEvaluator(cfg)
        beside = stack.enter_context(SideJob(baselines, (evaluator,))) if baseline_beside(cfg) else None
        first = (baselines, (evaluator,)) if beside is None and not compat_of(cfg).baseline_in_optimum_run else None
        if uses_model_caps(cfg, evaluator):
            evaluator.cap_models(model_optima(evaluator, progress, pool))
        study, full_evals, early = optimize(cfg, evaluator, tracker, progress, pool, first)
        pool.release()  # the workers shut down while this process reads the study (joined at the end)
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        top = tuple((i, full_evals.get(i) or evaluator.evaluate(i)) for i in (t.params[POINT_PARAM] for t in top_trials(complete, top_n_of(cfg))))
        best_index, best = top[0] if top else (None, None)
        if beside is not None:
            early = beside.result()
        baseline, baseline_searched = early if early is not None else baselines(evaluator, best_index, best)
        return StudyOutcome(
            study=study, evaluator=evaluator, best_index=best_index, best=best, baseline=baseline,
            n_trials=len(trials), n_pruned=sum(t.state == optuna.trial.TrialState.PRUNED for t in trials),
            n_full_evals=sum(bool(t.user_attrs.get("full_eval")) for t in trials), wall_s=time.perf_counter() - start,
            logging_s_per_trial=tracker.overhead_per_trial_s if tracker else 0.0,
            n_skipped=n_passed_over(cfg, study, evaluator, value_to_beat(complete, top_n_of(cfg))),
            baseline_searched=baseline_searched, top=top,
        )


def baseline_beside(cfg) -> bool:
    """Whether a process beside the study computes the baseline: only on a core the workers leave idle (with every core
    a worker's, a third process slowed two workers down: 74.1 s against 71.5 s, docs/scaling.md; the last worker then
    computes it before its share of the study, WorkerPool.run_first), and only when it does not wait on the study's
    optimum (compat.baseline_in_optimum_run)."""
    return int(cfg.search.n_workers) < usable_cores() and not compat_of(cfg).baseline_in_optimum_run


def baselines(evaluator: SpaceEvaluator, optimum_index: int | None = None, optimum: Evaluation | None = None) -> tuple[Evaluation, Evaluation | None]:
    """The baseline chip with each model's expert placement, and with the searched one where hw.baseline names a preset.
    They do not depend on the study (except under compat.baseline_in_optimum_run, given the optimum), so run_study
    has a process beside the study compute them on a core the workers leave idle (baseline_beside)."""
    fixed = evaluator.baseline(optimum_index=optimum_index, optimum=optimum)
    return fixed, evaluator.baseline(fixed=False) if evaluator.cfg.hw.get("baseline") else None


def n_passed_over(cfg, study: optuna.Study, evaluator: SpaceEvaluator, best_value: float | None) -> int:
    """Points of a pruning branch-and-bound study that no trial claimed (none, or PASSED_OVER) although their
    work bound beats the value to beat (`best_value`: the N-th best, value_to_beat): the sampler passed over them on
    their placement bound."""
    if cfg.search.sampler != "bound" or not cfg.search.prune or best_value is None:
        return 0
    above = np.flatnonzero(evaluator.work_bound * evaluator.objective_scale() > to_beat(cfg, best_value))
    by_trials = {point for point, owner in study.sampler.claims.owners_by_point().items() if owner != PASSED_OVER}
    return len(set(above.tolist()) - by_trials)


def pruned_by(trial: optuna.trial.FrozenTrial, objective: str = "throughput") -> tuple[float, str]:
    """(bound on the objective, stage) that pruned a trial, from its record; (NaN, "") for one that was not pruned."""
    record = trial.user_attrs.get(RECORD_ATTR) or {}
    if record.get("tags", {}).get(STATUS_TAG) != PRUNED:
        return float("nan"), ""
    return float(record["metrics"][f"{BOUND_PREFIX}{OBJECTIVE_METRICS[objective]}"]), str(record["tags"][PRUNED_BY_TAG])


def trial_status(trial: optuna.trial.FrozenTrial) -> str:
    """The trial's child-run status (evaluated, pruned, infeasible) from its record; its Optuna state without one."""
    record = trial.user_attrs.get(RECORD_ATTR) or {}
    return str(record.get("tags", {}).get(STATUS_TAG, trial.state.name.lower()))


def trials_frame(outcome: StudyOutcome) -> pd.DataFrame:
    """One row per trial: point, state, objective value(s), bound, area."""
    pts = outcome.evaluator.points
    rows = []
    for t in outcome.study.get_trials(deepcopy=False):
        i = t.params.get(POINT_PARAM)
        bound, stage = pruned_by(t, outcome.evaluator.cfg.search.objective)
        rows.append({
            "trial": t.number, "point": i, "state": t.state.name, "status": trial_status(t),
            "value": t.values[0] if t.values else np.nan, "bound": bound,
            "pruned_by": stage, "area_mm2": float(pts.area_mm2.iloc[i]) if i is not None else np.nan,
        })
    return pd.DataFrame(rows)


def tracker_for(cfg) -> StudyTracker | None:
    """The study's MLflow tracker (None with tracking.enabled=false): its parent run named after the model, space, cluster
    and train preset, with the study's params and the resolved config (config.yaml)."""
    if not cfg.tracking.enabled:
        return None
    return StudyTracker(resolve_tracking_uri(cfg.tracking.uri), cfg.tracking.experiment, study_name(cfg), flush_every=1,
                        run_name=parent_run_name(cfg), params=study_params(cfg), config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
