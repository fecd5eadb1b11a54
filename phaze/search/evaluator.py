"""Everything the search knows about the points of one space: bounds up front, full evaluations on demand.

A space may be searched for several models at once (`model=[llama2,gpt2,opt]`, PHAZE's common
architecture): the objective is then their mean throughput, and every bound is the mean of the
per-model bounds (a mean of upper bounds bounds the mean from above).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd

from phaze.compat import network_for
from phaze.cost.network import Network
from phaze.hardware.space import describe_points, enumerate_space, point_axes, reference_point
from phaze.inputs import ModelJob
from phaze.pipeline import LayerLatencies, PlacementSetup, layer_latencies, load_workloads, placement_inputs, placer, value_now, variants_of
from phaze.placement import PlacementResult, evaluate_fixed
from phaze.placement.kept import Kept
from phaze.schema.choices import PlacementSearch
from phaze.search.bounds import lower_bound_latencies, work_bound_throughput
from phaze.search.dominance import HBM_AXIS, MORE_IS_FASTER, TIE_BREAKS, DominatingBounds  # noqa: F401  (MORE_IS_FASTER: re-exported)
from phaze.search.placed import PLACED_KEPT, known_placement, latency_digest
from phaze.search.point_evaluation import Evaluation, throughput_of
from phaze.search.points import chip_of, chip_params, optimum_run, point_at  # noqa: F401  (optimum_run: re-exported)
from phaze.search.bound_clock import LOOKUP, OWN_DP, PLACEMENT, SCHEDULE, TOP_DP, BoundClock, dps_run

GIB = 2**30
PLACEMENTS = PlacementSearch.values()
"""search.placement: the placement DP per point (co-design), or each model's expert placement held fixed."""

LAYER_CACHE_SIGNATURES = 64
"""Latency signatures (points that differ only in what latencies ignore, e.g. HBM capacity) whose
scheduled layers are kept in memory; the bound order visits such siblings one after another."""


class ModelEvaluator:
    """One model on the points of a space: its workloads, per-point bounds and evaluations.

    A point's layers are scheduled once per latency signature (its COST_COLUMNS: HBM capacity
    changes memory, not latency), so HBM siblings share every schedule and differ only in the DP.
    """

    def __init__(self, job: ModelJob, points: pd.DataFrame, network: Network):
        self.job = job
        self.name = job.name
        self.points = points
        self.network = network
        self.workloads = load_workloads(job)
        variants = variants_of(job)
        e = job.execution
        self.lower_bounds = lower_bound_latencies(self.workloads, points, network, e.inter_op_parallel, variants, e.tp_comm_async,
                                                  e.overlap_slowdown)
        self.work_bound = work_bound_throughput(self.lower_bounds, self.workloads, job.devices, variants)
        self.max_hbm_gib = float(points.hbm_gib.max())
        self.setup = PlacementSetup.of(job, self.workloads)
        self._layers: dict[int, LayerLatencies] = {}
        n_signatures = int(self.lower_bounds.signature_of.max()) + 1
        self._top = np.full((2, n_signatures), np.nan)
        """By (fixed, signature), the placement bound at the space's largest HBM (NaN: none yet)."""
        self._top_cutoff = np.full((2, n_signatures), np.nan)
        """By (fixed, signature), the cut-off its placement bound is, where no placement beat it (NaN: the optimum)."""
        self._placed = Kept(PLACED_KEPT)
        """The answers kept on the last latencies placed, {beat: result}, by placer arguments and latency_digest (placer)."""
        self.dominance = DominatingBounds(points)
        """The placement bounds found so far, each bounding the points it dominates (MORE_IS_FASTER)."""
        self.dp_clock = BoundClock()
        """The placement DPs run against a value to beat, by kind (TOP_DP, OWN_DP): a bound that ran none was a look-up."""

    def signature(self, index: int) -> int:
        """The point's cost signature (phaze.cost.chip.cost_signatures): points sharing it have the same latencies."""
        return int(self.lower_bounds.signature_of[index])

    def layers(self, index: int, point: pd.DataFrame) -> LayerLatencies:
        """The point's layer latencies (starting from its lower bounds), shared by its HBM siblings."""
        key = self.signature(index)
        if key not in self._layers:
            if len(self._layers) >= LAYER_CACHE_SIGNATURES:
                self._layers.pop(next(iter(self._layers)))
            self._layers[key] = layer_latencies(self.job, point, self.workloads, self.network, self.lower_bounds.at(index))
        return self._layers[key]

    def placement_bound(self, index: int, beat: float | None = None, fixed: bool = False, cutoff: bool = False) -> float:
        """Throughput upper bound of one point: the placement DP (or the expert placement, `fixed`) on
        its lower-bound latencies.

        More HBM never lowers either's optimum, so the bound of the point with the space's largest
        HBM and the same latencies bounds every HBM sibling; it is computed once per signature and
        returned when it already cannot beat `beat`. With `cutoff` the DP only looks for placements
        beating `beat` and returns `beat` itself (still an upper bound) when there is none.
        """
        if beat is not None and not fixed:
            dominating = float(self.dominance.bounds(np.array([index]))[0])
            if dominating <= beat:
                return dominating
        bounds = self.lower_bounds.at(index)
        beat_at = beat if cutoff and not fixed else None
        key = (int(fixed), self.signature(index))
        top, below = float(self._top[key]), float(self._top_cutoff[key])
        if np.isnan(top) or (not np.isnan(below) and (beat is None or beat < below)):
            with self.dp_clock.timing(TOP_DP, beat):
                top, below = self._bound(point_at(self.points, index).assign(hbm_gib=self.max_hbm_gib), bounds, fixed, beat_at)
            self._top[key], self._top_cutoff[key] = top, np.nan if below is None else below
        if (beat is not None and top <= beat) or self.dominance.more[index, HBM_AXIS] == self.max_hbm_gib:
            value = top
        else:
            with self.dp_clock.timing(OWN_DP, beat):
                value = self._bound(point_at(self.points, index), bounds, fixed, beat_at)[0]
        if not fixed:
            self.dominance.record(index, value)
        return value

    def known_bound(self, index: int, fixed: bool = False) -> float:
        """The tightest placement bound on the point that the bounds found so far already give, without a DP (inf when
        none): its signature's bound at the largest HBM, or a point with at least its MORE_IS_FASTER columns."""
        return float(self.known_bounds(np.array([index]), fixed)[0])

    def known_bounds(self, indices: np.ndarray, fixed: bool = False) -> np.ndarray:
        """known_bound of many points at once, read-only (a study's progress reads every point still ahead each second)."""
        top = self._top[int(fixed)][self.lower_bounds.signature_of[indices]]
        return np.fmin(top, np.inf if fixed else self.dominance.bounds(indices))  # fmin: a NaN (no bound yet) gives the other

    def _bound(self, point: pd.DataFrame, bounds, fixed: bool, beat: float | None) -> tuple[float, float | None]:
        """(bound, None) from the DP on `bounds`; with `beat`, (beat, beat) when no placement beats it."""
        value = throughput_of(self.placer(point, fixed, beat=beat)(bounds))
        return (beat, beat) if beat is not None and value <= beat else (value, None)

    def schedule_bound(self, index: int, point: pd.DataFrame, place) -> float:
        """Throughput upper bound from the list schedules (exact where they meet their bound) and the
        schedule lower bounds elsewhere: place() once the layers it uses are list-scheduled, before any ILP."""
        return throughput_of(self.layers(index, point).listed_bound(place))

    def solve(self, index: int, point: pd.DataFrame, place, beat=None) -> tuple[PlacementResult | None, bool, float, tuple]:
        """place() on the point's layers, scheduled as far as it needs them (or until it is shown unable
        to beat `beat`, a value or a callable returning the latest one); (result, exact, scheduling seconds, the layer
        schedules that went past the list schedule)."""
        fresh = self.signature(index) not in self._layers
        layers = self.layers(index, point)
        before, milps_before = (0.0, 0) if fresh else (layers.solve_s, len(layers.milps))
        result, exact = layers.best(place, beat)
        return result, exact, layers.solve_s - before, tuple(layers.milps[milps_before:])

    def placer(self, point: pd.DataFrame, fixed: bool, run: tuple[int, str] | None = None, beat: float | None = None):
        """latencies -> the best placement on the point (with `beat`: only one of a higher throughput, else None), or the
        model's expert placement (model.expert) with its best microbatch, recompute and layer variant (only the
        (mbs, recompute) of `run` when given). Answers on the last PLACED_KEPT latencies are kept and answer later
        questions on the same latencies (known_placement): a point's placement bound, its list-schedule bound and its
        evaluation ask for the placement on the same latencies one after the other."""
        place = self.dp_placer(point, fixed, run, beat)
        key = (tuple(point.iloc[0].tolist()), fixed, run)
        beat = None if fixed or self.setup.fixed is not None else beat  # a fixed placement does not read it

        def remembered(latencies) -> PlacementResult | None:
            answers = self._placed.get((key, latency_digest(latencies)), dict)
            found, result = known_placement(answers, beat, int(self.job.train.global_batch))
            if not found:
                result = answers[beat] = place(latencies)
            return result

        return remembered

    def dp_placer(self, point: pd.DataFrame, fixed: bool, run: tuple[int, str] | None, beat: float | None):
        """placer() without the kept answers: every call runs the placement DP (or costs the expert placement)."""
        if not fixed:
            return placer(self.job, point, self.workloads, self.network, beat, self.setup)
        expert = self.job.model.expert
        recompute = self.job.plan.recompute if run is None else [run[1]]
        zero = self.job.plan.values["zero"]
        inputs = placement_inputs(self.job, point, self.workloads, self.network, self.setup)

        def place(latencies) -> PlacementResult:
            inp = inputs(latencies)
            return max((evaluate_fixed(inp, dp=int(expert.dp), pp=int(expert.pp), tp=int(expert.tp), mbs=mbs, recompute=rc, sp=sp,
                                       cp=cp, tp_comm_overlap=overlap, zero=z, ep=ep)
                        for mbs, sp, cp, overlap, ep in inp.variant_list() if run is None or mbs == run[0]
                        for rc in recompute for z in zero),
                       key=lambda r: r.throughput_seq_s)

        return place


def point_table(hw) -> pd.DataFrame:
    """The valid points of a hardware space in the search's order (sorted by their axes): a trial's
    `point` parameter is a row index of this table."""
    return enumerate_space(hw).sort_values(list(point_axes(hw))).reset_index(drop=True)


class SpaceEvaluator:
    """The valid points of the study's hw space (sorted by their axes), their work bounds, and evaluations of single points.

    Every model of the study (several when searched together) is evaluated on its space and cluster;
    search.placement=expert holds each model's expert placement fixed.
    """

    def __init__(self, spec):
        self.spec = spec
        """The study's StudySpec (phaze.search.spec)."""
        self.points = point_table(spec.config.hw)
        if self.points.empty:
            raise ValueError(f"hw={spec.config.hw.name}: no point of the space fits the area/power budget")
        self.network = network_for(spec.config.cluster, spec.config.compat)
        self.fixed_placement = spec.config.search.placement == "expert"
        """Hold every model's expert placement fixed (hardware-only search, as Spotlight-style tools do)."""
        start = time.perf_counter()
        self.models = [ModelEvaluator(job, self.points, self.network) for job in spec.jobs()]
        self._start_bounds()
        self.bounds_s = time.perf_counter() - start
        self.bound_clock = BoundClock()
        """The placement and schedule bounds asked for against a value to beat, counted and timed."""

    def _start_bounds(self) -> None:
        """The bounds of self.models before any point is bounded further: their mean work bound, no caps."""
        self.work_bound = np.mean([m.work_bound for m in self.models], axis=0)
        self.caps = np.full(len(self.models), np.inf)
        """Per model, an upper bound on its throughput at every point (its own optimum: cap_models)."""
        self._upper = self._capped_work_bounds()
        """[point, model]: the tightest throughput bounds found so far (bounded_mean; at first the work bounds)."""
        self._bounded = np.zeros(len(self.points), dtype=bool)
        """Per point, whether bounded_mean has bounded it (its row of _upper may then lie below its capped work bounds)."""
        self.models_skipped = 0
        """Model bounds or evaluations that an early stop of a several-model mean made unnecessary."""

    def cap_models(self, caps: np.ndarray) -> None:
        """Bound each model's throughput by caps[k] at every point (e.g. its optimum over the space) from now on."""
        self.caps = np.asarray(caps, dtype=np.float64)
        self.work_bound = np.mean([np.minimum(m.work_bound, c) for m, c in zip(self.models, self.caps)], axis=0)
        self._upper = np.where(self._bounded[:, None], np.minimum(self._upper, self.caps), self._capped_work_bounds())

    def _capped_work_bounds(self) -> np.ndarray:
        """[point, model]: each model's work bound, at most its cap."""
        return np.minimum(np.stack([m.work_bound for m in self.models], axis=1), self.caps)

    def single(self, k: int) -> "SpaceEvaluator":
        """Model k alone over the same points, sharing its ModelEvaluator (bounds, scheduled layers) with this evaluator."""
        view = copy.copy(self)
        view.spec = self.spec.single(k)
        view.models = [self.models[k]]
        view._start_bounds()
        return view

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    def __len__(self) -> int:
        return len(self.points)

    def point(self, index: int) -> pd.DataFrame:
        return point_at(self.points, index)

    def sibling_groups(self) -> np.ndarray:
        """Per point, its cost signature: HBM siblings share it, and with it every layer schedule (of every model)."""
        return self.models[0].lower_bounds.signature_of

    def placement_bound(self, index: int, beat: float | None = None) -> float:
        """Throughput upper bound of one point: the mean of the models' placement bounds (the DP, or each
        model's expert placement when it is held fixed; see ModelEvaluator.placement_bound for `beat`),
        stopped as soon as it cannot beat `beat` (see bounded_mean). Timed as a PLACEMENT bound where it ran a DP, else
        as a LOOKUP."""
        start, dps = time.perf_counter(), dps_run(self.models)
        value = self.bounded_mean(index, beat, lambda m, cut: m.placement_bound(index, cut, self.fixed_placement, cutoff=True))
        ran = dps_run(self.models) > dps
        self.bound_clock.add(PLACEMENT if ran else LOOKUP, beat, time.perf_counter() - start)
        return value

    def known_bound(self, index: int) -> float:
        """Throughput upper bound of one point from the bounds found so far, without a DP (known_bounds of one)."""
        return float(self.known_bounds(np.array([index]))[0])

    def known_bounds(self, indices: np.ndarray) -> np.ndarray:
        """Per point, the mean of each model's tightest bound so far (its own, its cap, its known_bounds); read-only."""
        known = np.empty((len(indices), len(self.models)))
        for k, m in enumerate(self.models):
            known[:, k] = m.known_bounds(indices, self.fixed_placement)
        return np.minimum(self._upper[indices], known).sum(axis=1) / len(self.models)  # the mean, without mean()'s overhead

    def schedule_bound(self, index: int, beat: float | None = None) -> float:
        """Throughput upper bound from the list schedules and schedule lower bounds, before any ILP (mean over models,
        stopped as soon as it cannot beat `beat`); its ratio to the bound before it goes to bound_clock.tightened."""
        point, before = self.point(index), float(self._upper[index].mean())
        with self.bound_clock.timing(SCHEDULE, beat):
            value = self.bounded_mean(index, beat, lambda m, cut: m.schedule_bound(index, point, m.placer(point, self.fixed_placement)))
        self.bound_clock.tightened(index, beat, value, before)
        return value

    def bounded_mean(self, index: int, beat: float | None, bound_of) -> float:
        """Upper bound on the point's mean throughput from one bound per model, bound_of(model, cut).

        Models not yet bounded count at the tightest bound known for the point (their work bound at
        first). Model k can only matter if it exceeds cut_k = n * beat - (the others' bounds), so bound_of
        may answer cut_k itself once it shows model k cannot exceed that (a cut-off DP). Models go by
        decreasing bound, the largest share of the mean first, and with several models the walk stops as
        soon as the mean is at most `beat`: the models left cannot lift it (a common architecture over
        eight models would otherwise run the eight placement DPs on every point it passes over)."""
        known = self.upper_bounds(index)
        bound = known.copy()
        for n_done, k in enumerate(np.argsort(-known, kind="stable").tolist()):
            if self._cannot_beat(bound, beat):
                self.models_skipped += len(bound) - n_done
                break
            bound[k] = min(bound_of(self.models[k], self._cut(bound, k, beat)), self.caps[k])
        self._upper[index] = np.minimum(known, bound)
        self._bounded[index] = True
        return float(bound.mean())

    def _cannot_beat(self, bound: np.ndarray, beat: float | None) -> bool:
        """Whether several models' bounds already show that their mean cannot beat `beat`."""
        return len(bound) > 1 and beat is not None and bound.mean() <= beat

    def upper_bounds(self, index: int) -> np.ndarray:
        """Per model, the tightest upper bound on its throughput at the point found so far (a copy)."""
        return self._upper[index].copy()

    def _cut(self, upper: np.ndarray, k: int, beat: float | None) -> float | None:
        """The throughput model k must exceed for the mean to beat `beat` (None: no such level, or none positive)."""
        if beat is None:
            return None
        cut = len(upper) * beat - (upper.sum() - upper[k])
        return float(cut) if cut > 0 else None

    def evaluate(self, index: int, beat=None) -> Evaluation:
        """Schedule the layers the placement needs on the point (the ILPs) and place every model (the DP).

        With `beat`, layers are scheduled one at a time, model by model (largest bound first), and the
        evaluation stops as soon as the models' results and the others' bounds cannot beat it (exact=False;
        its throughput is then that upper bound on the mean). `beat` may be a callable returning the latest value to
        beat (pipeline.value_now), read before every layer step."""
        start = time.perf_counter()
        point = self.point(index)
        upper = self.upper_bounds(index)
        results, stopped, ilp_s, milps = {}, False, 0.0, ()
        for k in np.argsort(-upper, kind="stable").tolist():
            m = self.models[k]
            cut = (lambda known=upper.copy(), k=k: self._cut(known, k, value_now(beat))) if callable(beat) else self._cut(upper, k, beat)
            results[m.name], done, solve_s, solved = m.solve(index, point, m.placer(point, self.fixed_placement), cut)
            upper[k] = throughput_of(results[m.name])
            ilp_s += solve_s
            milps += solved
            if not done or (len(results) < len(upper) and self._cannot_beat(upper, value_now(beat))):
                self.models_skipped += len(upper) - len(results)
                stopped = True
                break
        results = {m.name: results[m.name] for m in self.models if m.name in results}
        return Evaluation(results, ilp_s, time.perf_counter() - start - ilp_s, milps, float(upper.mean()) if stopped else None)

    def baseline(self, fixed: bool = True, optimum_index: int | None = None, optimum: Evaluation | None = None) -> Evaluation:
        """The baseline chip with each model's expert placement (best mbs, recompute), or with the searched
        placement (`fixed=False`): the preset hw.baseline names, else the TPUv4-like chip under this space's
        constants. Under compat.baseline_in_optimum_run the TPUv4-like chip's expert placement is evaluated in the
        optimum's run (optimum_index, optimum) instead, as PHAZE's is."""
        hw = self.spec.config.hw
        if hw.baseline:
            return self.preset_baseline(fixed)
        start = time.perf_counter()
        reference = describe_points(hw, reference_point(hw))
        results, ilp_s, chip = {}, 0.0, None
        for m in self.models:
            point, run = reference, None
            if fixed and self.spec.config.compat.baseline_in_optimum_run and optimum is not None:
                point, run = optimum_run(reference, self.point(optimum_index), optimum.results[m.name])
            chip = chip or chip_of(point_axes(hw), point)  # the first model's (others differ only where their optimum fits nothing)
            layers = layer_latencies(m.job, point, m.workloads, self.network)
            before = layers.solve_s
            results[m.name] = layers.best(m.placer(point, fixed, run))[0]
            ilp_s += layers.solve_s - before
        return Evaluation(results, ilp_s, time.perf_counter() - start - ilp_s, chip=chip)

    def preset_baseline(self, fixed: bool = True) -> Evaluation:
        """The hw.baseline preset (a shipped chip under its own constants, e.g. tpuv4_modern or h100) on this
        cluster, with each model's expert placement or the searched one."""
        start = time.perf_counter()
        hw = self.spec.baseline_hw
        point = enumerate_space(hw)
        results, ilp_s = {}, 0.0
        for m in self.models:
            chip = ModelEvaluator(self.spec.baseline_job(m.job), point, self.network)
            results[m.name], _, solve_s, _ = chip.solve(0, point, chip.placer(point, fixed))
            ilp_s += solve_s
        return Evaluation(results, ilp_s, time.perf_counter() - start - ilp_s, chip=chip_of(point_axes(hw), point))

    def arch_params(self, index: int) -> dict:
        """The point's architecture as a trial's hw.* params."""
        return chip_params(point_axes(self.spec.config.hw), self.points.iloc[index])

    def objective_scale(self) -> np.ndarray:
        """Objective per sequence/s of every point: 1, or 1/TDP when search.objective=throughput_per_tdp."""
        if self.spec.config.search.objective == "throughput_per_tdp":
            return 1.0 / self.points.tdp_w.to_numpy(dtype=np.float64)
        return np.ones(len(self.points))

    def order_by_bound(self) -> np.ndarray:
        """Point indices by decreasing work bound on the objective, the branch-and-bound visiting order: once one
        point's bound cannot beat the study, no later point's can. Ties (HBM siblings always tie: the work bound ignores
        capacity) go by TIE_BREAKS, larger first, then by index: the point with more comes before those it dominates,
        whose placement bounds its own then bounds without a DP (MORE_IS_FASTER)."""
        tie_breaks = [-self.points[c].to_numpy(dtype=np.float64) for c in TIE_BREAKS]
        return np.lexsort((np.arange(len(self.points)), *reversed(tie_breaks), -self.work_bound * self.objective_scale()))
