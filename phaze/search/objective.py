"""A study's Optuna objective: a trial's point pruned by its bounds before any ILP, else evaluated, and its MLflow record.

A trial proposes one valid point (an index into the sorted point table, so no invalid point can be
proposed); its work bound, then its placement bound, are compared with what the study already
holds (the search.top_n-th best value, or the finished points for NSGA-II); only a point that could
still enter the top N is fully evaluated, so the N best designs the study reports are the space's.
Training knobs (microbatch, recompute) and the placement are searched inside the trial by the
placement DP.
"""

from __future__ import annotations

import os
import socket

import optuna

from phaze.search.bound_clock import LOOKUP
from phaze.search.claims import PointTaken
from phaze.search.evaluator import GIB, Evaluation, SpaceEvaluator
from phaze.search.ranking import POINT_PARAM, RECORD_ATTR, latest_nth, to_beat, top_n_of, value_to_beat
from phaze.search.strategies import Strategy
from phaze.tracking import (BOUND_PREFIX, EVALUATED, INFEASIBLE, OBJECTIVE_METRICS, PRUNED, PRUNED_BY_TAG, STATUS_TAG, StudyTracker,
                            TrialRecord)

FULL_EVAL_ATTR = "full_eval"
"""User attribute set on a trial whose point had a full evaluation (its layer ILPs and DP ran), pruned after or not."""
MILPS_ATTR = "layer_milps"
"""User attribute listing a full evaluation's layer MILPs as [status, mip_gap, solve_s, from_cache] (for closure
statistics; from_cache: solved by an earlier trial, in solve_s then)."""


def solved_milps_s(rows) -> tuple[float, ...]:
    """Seconds of the layer MILPs a trial solved itself: its MILPS_ATTR rows less those the cache answered."""
    return tuple(solve_s for _, _, solve_s, from_cache in rows or () if not from_cache)


WORKER = f"{socket.gethostname()}:{os.getpid()}"
"""Which process ran a trial (tag `worker` of its child run): host and process id."""


class Objective:
    """Optuna objective: prune by bounds, else evaluate; every trial logs its MLflow child run before it ends."""

    def __init__(self, spec, evaluator: SpaceEvaluator, strategy: Strategy, tracker: StudyTracker | None = None, claims=None):
        self.search = spec.config.search
        self.ev = evaluator
        self.tracker = tracker
        self.strategy = strategy
        self.multi = strategy.multi_objective
        self.claims = claims
        self.scales = evaluator.objective_scale()
        self.prune = bool(spec.config.search.prune)
        self.top_n = top_n_of(spec.config.search)
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
            return nth is not None and bound <= to_beat(self.search, nth)
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
                with self.ev.bound_clock.timing(LOOKUP, beat):
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
        return to_beat(self.search, nth_value) / self.scale(index)

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
                if self.strategy.branch_and_bound:  # points come in decreasing work bound: none left can win
                    study.sampler.stop_at_bound(study, index)
                self._pruned(trial, index, "work_bound", work)
            placement = self.ev.placement_bound(index, self.beat(done, index)) * self.scale(index)
            if self.dominated(done, index, placement):
                self._pruned(trial, index, "placement_bound", placement)
            listed = self.ev.schedule_bound(index, self.beat(done, index)) * self.scale(index)
            if self.dominated(done, index, listed):
                self._pruned(trial, index, "schedule_bound", listed)
        beat = self.beat(done, index) if self.prune else None
        if self.prune and not self.multi and int(self.search.n_workers) > 1:
            beat = self.latest_beat(study, index, beat)
        evaluation = self.ev.evaluate(index, beat)
        trial.set_user_attr(FULL_EVAL_ATTR, True)
        if evaluation.milps:
            trial.set_user_attr(MILPS_ATTR, [[m.status, m.mip_gap, m.solve_s, m.from_cache] for m in evaluation.milps])
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
        if self.search.objective != "throughput":
            metrics[f"{BOUND_PREFIX}{OBJECTIVE_METRICS[self.search.objective]}"] = bound
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
