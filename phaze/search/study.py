"""The Optuna study over an architecture space, with exact bound-based pruning before any ILP.

A trial proposes one valid point (an index into the sorted point table, so no invalid point can be
proposed); its work bound, then its placement bound, are compared with what the study already
holds (the best value, or the finished points for NSGA-II); only a point that could still win is
fully evaluated. Training knobs (microbatch, recompute) and the placement are searched inside the
trial by the placement DP.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from omegaconf import OmegaConf
from tqdm import tqdm

from phaze.search.evaluator import GIB, Evaluation, SpaceEvaluator
from phaze.search.samplers import BoundOrderedSampler, make_sampler
from phaze.tracking import StudyTracker, TrialRecord, resolve_tracking_uri

OBJECTIVES = ("throughput", "throughput_per_tdp")
POINT_PARAM = "point"
STORAGE_FILE = "studies.db"
"""Default Optuna storage: an SQLite file next to mlruns/, so a killed study resumes."""


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

    @property
    def speedup(self) -> float:
        base = self.baseline.throughput_seq_s
        return self.best.throughput_seq_s / base if self.best is not None and base > 0 else float("nan")


def study_name(cfg) -> str:
    """Model, space, cluster, sampler and objective, plus a hash of everything that changes the answer."""
    if cfg.search.study_name:
        return cfg.search.study_name
    keyed = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "hw", "cluster", "train", "schedule")}
    keyed["objective"] = cfg.search.objective
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{cfg.model.name}-{cfg.hw.name}-{cfg.cluster.name}-{cfg.search.sampler}-{cfg.search.objective}-{digest}"


def storage_url(cfg) -> str | None:
    """search.storage, 'memory' for none, or by default the SQLite file next to mlruns/."""
    if cfg.search.storage == "memory":
        return None
    if cfg.search.storage:
        return cfg.search.storage
    return f"sqlite:///{(Path.cwd() / STORAGE_FILE).resolve()}"


class Objective:
    """Optuna objective: prune by bounds, else evaluate; every trial is recorded for MLflow."""

    def __init__(self, cfg, evaluator: SpaceEvaluator, tracker: StudyTracker | None, multi: bool):
        self.cfg = cfg
        self.ev = evaluator
        self.tracker = tracker
        self.multi = multi
        self.per_tdp = cfg.search.objective == "throughput_per_tdp"
        self.prune = bool(cfg.search.prune)
        self.full_evals: dict[int, Evaluation] = {}
        self.records: dict[int, TrialRecord] = {}

    def scale(self, index: int) -> float:
        """Objective per sequence/s: 1, or 1/TDP for throughput per watt."""
        return 1.0 / float(self.ev.points.tdp_w.iloc[index]) if self.per_tdp else 1.0

    def value_of(self, index: int, throughput: float):
        value = throughput * self.scale(index)
        return (value, float(self.ev.points.area_mm2.iloc[index])) if self.multi else value

    def dominated(self, study: optuna.Study, index: int, bound: float) -> bool:
        """Whether a point whose objective is at most `bound` cannot improve the study's result."""
        done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
        if not done:
            return False
        if not self.multi:
            return bound <= max(t.value for t in done)
        area = float(self.ev.points.area_mm2.iloc[index])
        return any(t.values[0] >= bound and t.values[1] <= area for t in done)

    def __call__(self, trial: optuna.Trial):
        index = trial.suggest_int(POINT_PARAM, 0, len(self.ev) - 1)
        study = trial.study
        for prev in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if prev.params.get(POINT_PARAM) == index:  # samplers may propose a point twice: reuse its value
                trial.set_user_attr("duplicate_of", prev.number)
                first = self.records.get(index, TrialRecord(prev.number, self.ev.arch_params(index), {"throughput_seq_s": prev.values[0]}))
                if self.tracker is not None:
                    self.tracker.log_trial(TrialRecord(trial.number, first.params, first.metrics, {"pruned": False, "duplicate_of": prev.number}))
                return prev.values if self.multi else prev.value
        if self.prune:
            work = float(self.ev.work_bound[index]) * self.scale(index)
            if self.dominated(study, index, work):
                if isinstance(study.sampler, BoundOrderedSampler):
                    study.stop()  # points come in decreasing work bound: none left can win
                self._pruned(trial, index, "work_bound", work)
            placement = self.ev.placement_bound(index) * self.scale(index)
            if self.dominated(study, index, placement):
                self._pruned(trial, index, "placement_bound", placement)
        evaluation = self.ev.evaluate(index)
        self.full_evals[index] = evaluation
        trial.set_user_attr("full_eval", True)
        self._record(trial, index, evaluation)
        return self.value_of(index, evaluation.throughput_seq_s)

    def _pruned(self, trial, index: int, stage: str, bound: float):
        trial.set_user_attr("pruned_by", stage)
        trial.set_user_attr("bound", bound)
        if self.tracker is not None:
            metrics = {"area_mm2": float(self.ev.points.area_mm2.iloc[index]), "bound": bound}
            self.tracker.log_trial(TrialRecord(trial.number, self.ev.arch_params(index), metrics, {"pruned": True, "pruned_by": stage}))
        raise optuna.TrialPruned(f"{stage} {bound:.6g} cannot beat the study")

    def _record(self, trial, index: int, e: Evaluation) -> None:
        params = self.ev.arch_params(index)
        metrics = {"area_mm2": float(self.ev.points.area_mm2.iloc[index]), "tdp_w": float(self.ev.points.tdp_w.iloc[index]),
                   "throughput_seq_s": e.throughput_seq_s, "ilp_s": e.ilp_s, "dp_s": e.dp_s}
        if e.result is not None and e.result.feasible:
            s = e.result.strategy
            placement = {"train.mbs": s.mbs, "train.recompute": s.recompute, "place.dp": s.dp, "place.pp": s.pp, "place.tp": s.tp}
            params.update(placement)
            trial.set_user_attr("placement", {k: v if isinstance(v, (int, bool)) else list(v) for k, v in placement.items()})
            metrics.update({"time_per_batch_s": e.result.time_per_batch_s, "mfu": e.result.mfu,
                            "memory_per_device_gib": e.result.memory_per_device_bytes / GIB})
        metrics["perf_per_tdp"] = e.throughput_seq_s / metrics["tdp_w"]
        self.records[index] = TrialRecord(trial.number, params, metrics, {"pruned": False})
        if self.tracker is not None:
            self.tracker.log_trial(self.records[index])


def n_trials_for(cfg, evaluator: SpaceEvaluator) -> int:
    """Trials to run: every point for grid and bound order (they stop on their own), search.n_trials otherwise."""
    if cfg.search.sampler in ("grid", "bound"):
        return len(evaluator)
    return int(cfg.search.n_trials)


def run_study(cfg, tracker: StudyTracker | None = None, progress: bool = True) -> StudyOutcome:
    """Run (or resume) the study described by cfg and return its outcome."""
    if cfg.search.objective not in OBJECTIVES:
        raise ValueError(f"search.objective={cfg.search.objective!r}; allowed: {list(OBJECTIVES)}")
    start = time.perf_counter()
    evaluator = SpaceEvaluator(cfg)
    multi = cfg.search.sampler == "nsga2"
    sampler = make_sampler(cfg.search, evaluator)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=study_name(cfg), storage=storage_url(cfg), sampler=sampler, load_if_exists=True,
        directions=["maximize", "minimize"] if multi else ["maximize"],
    )
    objective = Objective(cfg, evaluator, tracker, multi)
    total = n_trials_for(cfg, evaluator)
    remaining = max(0, total - len(study.trials))
    bar = tqdm(total=remaining, desc="trials", disable=not progress, leave=False)

    def update(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.get_trials(deepcopy=False))
        best = max((t.values[0] for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))), default=float("nan"))
        bar.set_postfix(pruned=pruned, best=f"{best:.4g}")
        bar.update(1)

    study.optimize(objective, n_trials=remaining, callbacks=[update], catch=())
    bar.close()
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    best_trial = max(complete, key=lambda t: t.values[0]) if complete else None
    best_index = best_trial.params[POINT_PARAM] if best_trial else None
    best = objective.full_evals.get(best_index) or (evaluator.evaluate(best_index) if best_index is not None else None)
    return StudyOutcome(
        study=study, evaluator=evaluator, best_index=best_index, best=best, baseline=evaluator.baseline(),
        n_trials=len(trials), n_pruned=sum(t.state == optuna.trial.TrialState.PRUNED for t in trials),
        n_full_evals=sum(bool(t.user_attrs.get("full_eval")) for t in trials), wall_s=time.perf_counter() - start,
        logging_s_per_trial=tracker.overhead_per_trial_s if tracker else 0.0,
    )


def trials_frame(outcome: StudyOutcome) -> pd.DataFrame:
    """One row per trial: point, state, objective value(s), bound, area."""
    pts = outcome.evaluator.points
    rows = []
    for t in outcome.study.get_trials(deepcopy=False):
        i = t.params.get(POINT_PARAM)
        rows.append({
            "trial": t.number, "point": i, "state": t.state.name,
            "value": t.values[0] if t.values else np.nan, "bound": t.user_attrs.get("bound", np.nan),
            "pruned_by": t.user_attrs.get("pruned_by", ""), "area_mm2": float(pts.area_mm2.iloc[i]) if i is not None else np.nan,
        })
    return pd.DataFrame(rows)


def tracker_for(cfg) -> StudyTracker | None:
    if not cfg.tracking.enabled:
        return None
    return StudyTracker(resolve_tracking_uri(cfg.tracking.uri), cfg.tracking.experiment, study_name(cfg))
