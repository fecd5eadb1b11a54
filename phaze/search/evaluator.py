"""Everything the search knows about the points of one space: bounds up front, full evaluations on demand.

A space may be searched for several models at once (`model=[llama2,gpt2,opt]`, PHAZE's common
architecture): the objective is then their mean throughput, and every bound is the mean of the
per-model bounds (a mean of upper bounds bounds the mean from above).
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.compat import compat_of, network_for
from phaze.config import models_of, preset_hw
from phaze.cost.network import Network
from phaze.hardware.space import describe_points, enumerate_space, point_axes, reference_point
from phaze.cost.chip import COST_COLUMNS
from phaze.pipeline import LayerLatencies, PlacementSetup, layer_latencies, load_workloads, placement_inputs, placer, value_now, variants_of
from phaze.placement import PlacementResult, evaluate_fixed
from phaze.placement.kept import Kept
from phaze.search.bounds import lower_bound_latencies, work_bound_throughput
from phaze.config_values import recompute_options
from phaze.plan_space import options

GIB = 2**30
PLACEMENTS = ("searched", "expert")
"""search.placement: the placement DP per point (co-design), or each model's expert placement held fixed."""


def throughput_of(result: PlacementResult | None) -> float:
    """Sequences/s of a placement, 0 when nothing fits."""
    return result.throughput_seq_s if result is not None and result.feasible else 0.0


@dataclass(frozen=True)
class Evaluation:
    """A point's full evaluation: each model's best placement (None: nothing fits) and where the time went."""

    results: dict[str, PlacementResult | None]
    ilp_s: float
    dp_s: float
    milps: tuple = ()
    """The layer schedules this evaluation took past the list schedule (LayerSchedule: status, mip_gap, solve_s)."""
    upper_seq_s: float | None = None
    """An early-stopped evaluation's upper bound on the mean throughput (models not evaluated count at their bounds)."""
    chip: dict | None = None
    """A baseline's chip as hw.* params (chip_params) and area_mm2; None for a point of the space (its point table row)."""

    @property
    def exact(self) -> bool:
        """False when the evaluation stopped early: its throughput is then an upper bound that cannot beat the study."""
        return self.upper_seq_s is None

    def milp_metrics(self) -> dict[str, float]:
        """How its layer MILPs ended: how many ran, how many stopped above the gap at their limit, how many stopped once
        their bound refuted a cut-off (a search's question, not a schedule: their gap is not counted), the largest gap
        left, the median seconds."""
        if not self.milps:
            return {"milp.count": 0}
        scheduled = [m.mip_gap for m in self.milps if m.status != "refuted"]
        return {"milp.count": len(self.milps), "milp.open": sum(m.status == "time_limit" for m in self.milps),
                "milp.refuted": sum(m.status == "refuted" for m in self.milps), "milp.max_gap": max(scheduled, default=0.0),
                "milp.median_s": float(np.median([m.solve_s for m in self.milps]))}

    @property
    def throughput_seq_s(self) -> float:
        """The objective: the mean over the models of their throughput (sequences/s); an upper bound when not exact."""
        if self.upper_seq_s is not None:
            return self.upper_seq_s
        return float(np.mean([throughput_of(r) for r in self.results.values()]))

    @property
    def result(self) -> PlacementResult | None:
        """The placement when one model is searched (None for several: see `results`)."""
        return next(iter(self.results.values())) if len(self.results) == 1 else None

    def speedup_over(self, baseline: "Evaluation") -> float:
        """Mean over the models of throughput / baseline throughput (PHAZE's average speedup)."""
        ratios = [throughput_of(r) / throughput_of(baseline.results[m]) for m, r in self.results.items() if throughput_of(baseline.results[m]) > 0]
        return float(np.mean(ratios)) if ratios else float("nan")


MORE_IS_FASTER = ("n_vc", "glb_mib", "hbm_gbps", "hbm_gib")
"""Point columns in which a point only gains: more vector cores, a larger buffer (larger blocking tiles, fewer
HBM bytes), more HBM bandwidth (every memory-bound term and the optimizer update) and capacity (more plans fit).
Every operator latency (phaze.cost) and every lower bound on a layer is non-increasing in each, and the
placement DP's optimum never drops when latencies shrink or memory grows: so a point that equals another in
every other cost column and has no more of these is bounded by the other's placement bound."""

HBM_AXIS = MORE_IS_FASTER.index("hbm_gib")
TIE_BREAKS = ("hbm_gib", "glb_mib", "hbm_gbps")
"""Columns of MORE_IS_FASTER that break ties of the work bound, larger first (order_by_bound). Not n_vc: vector cores
add area, and where they change no latency the first of several equally fast points found should be the smaller chip
(the llama2 x phaze_grid optimum has 4 vector cores; 64 give the same throughput)."""


def chip_params(hw, row: pd.Series) -> dict:
    """A chip's architecture as the hw.* params of a trial (the axes of the space `hw`), whole numbers as int."""
    return {f"hw.{a}": (row[a] if a == "hbm_generation" else int(row[a])) for a in point_axes(hw)}


def chip_of(hw, point: pd.DataFrame) -> dict:
    """A one-row point as a baseline's Evaluation.chip: its hw.* params and area."""
    row = point.iloc[0]
    return {**chip_params(hw, row), "area_mm2": float(row["area_mm2"])}


def point_at(points: pd.DataFrame, index: int) -> pd.DataFrame:
    """The one-row frame of points[index] (index 0), as the cost model and the placement DP take a point."""
    return points.iloc[[index]].reset_index(drop=True)


LAYER_CACHE_SIGNATURES = 64
"""Latency signatures (points that differ only in what latencies ignore, e.g. HBM capacity) whose
scheduled layers are kept in memory; the bound order visits such siblings one after another."""


PLACED_KEPT = 8
"""Latencies whose placements a ModelEvaluator keeps (ModelEvaluator.placer): a trial asks on a handful."""
CUTOFF_RTOL = 1e-9
"""A kept optimum this close to a cut-off (relative) does not answer it: the DP compares its own sum, not the plan's."""


def known_placement(answers: dict[float | None, PlacementResult | None], beat: float | None, global_batch: int) -> tuple[bool, PlacementResult | None]:
    """(True, the answer) when the DP's answers on the same latencies, {beat: result} (None: no cut-off), give the one
    for `beat`, else (False, None). A DP with a cut-off returns the optimum when a plan beats it and None otherwise,
    so a kept optimum answers every cut-off it clearly beats or misses, and a cut-off nothing beat answers higher ones."""
    if beat in answers:
        return True, answers[beat]
    cutoff_s = global_batch / beat if beat else np.inf
    for kept_beat, result in answers.items():
        if result is not None:
            if result.time_per_batch_s < cutoff_s * (1.0 - CUTOFF_RTOL):
                return True, result
            if result.time_per_batch_s > cutoff_s * (1.0 + CUTOFF_RTOL):
                return True, None
        elif kept_beat is None or (beat is not None and beat >= kept_beat):
            return True, None
    return False, None


def latency_digest(latencies: dict[str, dict[str, np.ndarray]]) -> bytes:
    """A digest of per-part latency arrays ({part: {field: array}}), equal exactly when every value is."""
    digest = hashlib.blake2b(digest_size=16)
    for part in sorted(latencies):
        for field in sorted(latencies[part]):
            digest.update(f"{part}.{field}".encode())
            digest.update(np.ascontiguousarray(latencies[part][field], dtype=np.float64).tobytes())
    return digest.digest()


class ModelEvaluator:
    """One model on the points of a space: its workloads, per-point bounds and evaluations.

    A point's layers are scheduled once per latency signature (its COST_COLUMNS: HBM capacity
    changes memory, not latency), so HBM siblings share every schedule and differ only in the DP.
    """

    def __init__(self, cfg, points: pd.DataFrame, network: Network):
        self.cfg = cfg
        self.name = str(cfg.model.name)
        self.points = points
        self.network = network
        self.workloads = load_workloads(cfg)
        variants = variants_of(cfg)
        self.lower_bounds = lower_bound_latencies(self.workloads, points, network, bool(cfg.hw.inter_op_parallel), variants,
                                                  bool(cfg.train.tp_comm_async), float(cfg.hw.overlap_slowdown))
        self.work_bound = work_bound_throughput(self.lower_bounds, self.workloads, int(cfg.cluster.devices), variants)
        self.max_hbm_gib = float(points.hbm_gib.max())
        self.setup = PlacementSetup.of(cfg, self.workloads)
        self._layers: dict[int, LayerLatencies] = {}
        self._top_bound: dict[tuple, float] = {}
        self._placed = Kept(PLACED_KEPT)
        """The answers kept on the last latencies placed, {beat: result}, by placer arguments and latency_digest (placer)."""
        same = [c for c in COST_COLUMNS if c in points.columns and c not in MORE_IS_FASTER]
        self._same_group = points.groupby(same, sort=False, dropna=False).ngroup().to_numpy()
        """Per point, a code of its cost columns outside MORE_IS_FASTER: points of one code differ only in those."""
        self._more = points[list(MORE_IS_FASTER)].to_numpy(dtype=np.float64)
        """Per point, its MORE_IS_FASTER columns."""
        self._bounded: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """Placement bounds found so far, by _same_group code: (their points' MORE_IS_FASTER columns, the bounds)."""

    def signature(self, index: int) -> int:
        """The point's cost signature (phaze.cost.chip.cost_signatures): points sharing it have the same latencies."""
        return int(self.lower_bounds.signature_of[index])

    def layers(self, index: int, point: pd.DataFrame) -> LayerLatencies:
        """The point's layer latencies (starting from its lower bounds), shared by its HBM siblings."""
        key = self.signature(index)
        if key not in self._layers:
            if len(self._layers) >= LAYER_CACHE_SIGNATURES:
                self._layers.pop(next(iter(self._layers)))
            self._layers[key] = layer_latencies(self.cfg, point, self.workloads, self.network, self.lower_bounds.at(index))
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
            dominating = self._dominating_bound(index)
            if dominating <= beat:
                return dominating
        bounds = self.lower_bounds.at(index)
        beat_at = beat if cutoff and not fixed else None
        key = (self.signature(index), fixed)
        top, below = self._top_bound.get(key, (None, None))
        if top is None or (below is not None and (beat is None or beat < below)):
            top, below = self._bound(point_at(self.points, index).assign(hbm_gib=self.max_hbm_gib), bounds, fixed, beat_at)
            self._top_bound[key] = (top, below)
        if (beat is not None and top <= beat) or self._more[index, HBM_AXIS] == self.max_hbm_gib:
            value = top
        else:
            value = self._bound(point_at(self.points, index), bounds, fixed, beat_at)[0]
        if not fixed:
            self._record_bound(index, value)
        return value

    def known_bound(self, index: int, fixed: bool = False) -> float:
        """The tightest placement bound on the point that the bounds found so far already give, without a DP (inf when
        none): its signature's bound at the largest HBM, or a point with at least its MORE_IS_FASTER columns."""
        top = self._top_bound.get((self.signature(index), fixed), (np.inf, None))[0]
        return top if fixed else min(top, self._dominating_bound(index))

    def known_bounds(self, indices: np.ndarray, fixed: bool = False) -> np.ndarray:
        """known_bound of many points at once, read-only (a study's progress reads every point still ahead each second)."""
        signatures, where = np.unique(self.lower_bounds.signature_of[indices], return_inverse=True)
        found = dict(self._top_bound)  # one copy: the study's thread adds bounds meanwhile
        bound = np.array([found.get((int(s), fixed), (np.inf, None))[0] for s in signatures])[where]
        if fixed:
            return bound
        groups = self._same_group[indices]
        for group in np.unique(groups).tolist():
            known = self._bounded.get(group)
            if known is not None:
                rows = np.flatnonzero(groups == group)
                axes, values = known
                covers = (axes[None, :, :] >= self._more[indices[rows]][:, None, :]).all(axis=2)
                bound[rows] = np.minimum(bound[rows], np.where(covers, values[None, :], np.inf).min(axis=1, initial=np.inf))
        return bound

    def _dominating_bound(self, index: int) -> float:
        """The least placement bound found so far on a point with at least this one's MORE_IS_FASTER columns and
        the same other cost columns (an upper bound on this point's; inf when there is none)."""
        found = self._bounded.get(int(self._same_group[index]))
        if found is None:
            return np.inf
        axes, values = found
        return float(values[(axes >= self._more[index]).all(axis=1)].min(initial=np.inf))

    def _record_bound(self, index: int, value: float) -> None:
        group = int(self._same_group[index])
        axes, values = self._bounded.get(group, (np.empty((0, len(MORE_IS_FASTER))), np.empty(0)))
        self._bounded[group] = (np.vstack([axes, self._more[index]]), np.append(values, value))

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
            found, result = known_placement(answers, beat, int(self.cfg.train.global_batch))
            if not found:
                result = answers[beat] = place(latencies)
            return result

        return remembered

    def dp_placer(self, point: pd.DataFrame, fixed: bool, run: tuple[int, str] | None, beat: float | None):
        """placer() without the kept answers: every call runs the placement DP (or costs the expert placement)."""
        if not fixed:
            return placer(self.cfg, point, self.workloads, self.network, beat, self.setup)
        expert = self.cfg.model.expert
        recompute = recompute_options(self.cfg.train.recompute) if run is None else [run[1]]
        zero = options(self.cfg, "zero")
        inputs = placement_inputs(self.cfg, point, self.workloads, self.network, self.setup)

        def place(latencies) -> PlacementResult:
            inp = inputs(latencies)
            return max((evaluate_fixed(inp, dp=int(expert.dp), pp=int(expert.pp), tp=int(expert.tp), mbs=mbs, recompute=rc, sp=sp,
                                       cp=cp, tp_comm_overlap=overlap, zero=z, ep=ep)
                        for mbs, sp, cp, overlap, ep in inp.variant_list() if run is None or mbs == run[0]
                        for rc in recompute for z in zero),
                       key=lambda r: r.throughput_seq_s)

        return place


def optimum_run(reference: pd.DataFrame, optimum_point: pd.DataFrame, result: PlacementResult | None) -> tuple[pd.DataFrame, tuple | None]:
    """The reference point with the optimum's HBM capacity, and the optimum's (mbs, recompute): PHAZE loops over
    (mbs, HBM, recompute) runs and reads the fixed strategy's throughput from the optimum's run (docs/
    phaze-reference.md §1.2, §7). Unchanged (no run) when the optimum found no placement."""
    if result is None or not result.feasible:
        return reference, None
    point = reference.assign(hbm_gib=optimum_point.hbm_gib.iloc[0]) if "hbm_gib" in optimum_point.columns else reference
    return point, (int(result.strategy.mbs), str(result.strategy.recompute))


def point_table(hw) -> pd.DataFrame:
    """The valid points of a hardware space in the search's order (sorted by their axes): a trial's
    `point` parameter is a row index of this table."""
    return enumerate_space(hw).sort_values(list(point_axes(hw))).reset_index(drop=True)


class SpaceEvaluator:
    """The valid points of cfg.hw (sorted by their axes), their work bounds, and evaluations of single points.

    Every model of cfg (cfg.models when several are searched together) is evaluated on cfg's
    space and cluster; search.placement=expert holds each model's expert placement fixed.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.points = point_table(cfg.hw)
        if self.points.empty:
            raise ValueError(f"hw={cfg.hw.name}: no point of the space fits the area/power budget")
        self.network = network_for(cfg)
        if cfg.search.placement not in PLACEMENTS:
            raise ValueError(f"search.placement={cfg.search.placement!r}; allowed: {list(PLACEMENTS)}")
        self.fixed_placement = cfg.search.placement == "expert"
        """Hold every model's expert placement fixed (hardware-only search, as Spotlight-style tools do)."""
        start = time.perf_counter()
        self.models = [ModelEvaluator(c, self.points, self.network) for c in models_of(cfg)]
        self._start_bounds()
        self.bounds_s = time.perf_counter() - start
        self.placement_bounds, self.placement_bound_s = 0, 0.0
        """Placement bounds asked for against a value to beat so far, and their seconds: a study's progress costs the
        signatures still to bound by them (without one the DP looks for every placement, many times slower)."""

    def _start_bounds(self) -> None:
        """The bounds of self.models before any point is bounded further: their mean work bound, no caps."""
        self.work_bound = np.mean([m.work_bound for m in self.models], axis=0)
        self._upper: dict[int, np.ndarray] = {}
        """Per point, the tightest per-model throughput bounds found so far (bounded_mean)."""
        self.caps = np.full(len(self.models), np.inf)
        """Per model, an upper bound on its throughput at every point (its own optimum: cap_models)."""
        self.models_skipped = 0
        """Model bounds or evaluations that an early stop of a several-model mean made unnecessary."""

    def cap_models(self, caps: np.ndarray) -> None:
        """Bound each model's throughput by caps[k] at every point (e.g. its optimum over the space) from now on."""
        self.caps = np.asarray(caps, dtype=np.float64)
        self.work_bound = np.mean([np.minimum(m.work_bound, c) for m, c in zip(self.models, self.caps)], axis=0)
        self._upper = {i: np.minimum(u, self.caps) for i, u in self._upper.items()}

    def single(self, k: int) -> "SpaceEvaluator":
        """Model k alone over the same points, sharing its ModelEvaluator (bounds, scheduled layers) with this evaluator."""
        view = copy.copy(self)
        view.cfg = self.models[k].cfg
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
        stopped as soon as it cannot beat `beat` (see bounded_mean)."""
        start = time.perf_counter()
        bound = self.bounded_mean(index, beat, lambda m, cut: m.placement_bound(index, cut, self.fixed_placement, cutoff=True))
        if beat is not None:
            self.placement_bounds += 1
            self.placement_bound_s += time.perf_counter() - start
        return bound

    def known_bound(self, index: int) -> float:
        """Throughput upper bound of one point from the bounds found so far, without a DP (the mean of each model's
        tightest: its bound for this point, its cap, or ModelEvaluator.known_bound)."""
        known = [m.known_bound(index, self.fixed_placement) for m in self.models]
        return float(np.minimum(self.upper_bounds(index), known).mean())

    def known_bounds(self, indices: np.ndarray) -> np.ndarray:
        """known_bound of many points at once, read-only (phaze.search.progress reads every point still ahead)."""
        upper = np.minimum(np.stack([m.work_bound[indices] for m in self.models], axis=1), self.caps)
        position = {int(i): k for k, i in enumerate(indices.tolist())}
        for index, bounds in list(self._upper.items()):
            if index in position:
                upper[position[index]] = bounds
        known = np.stack([m.known_bounds(indices, self.fixed_placement) for m in self.models], axis=1)
        return np.minimum(upper, known).mean(axis=1)

    def schedule_bound(self, index: int, beat: float | None = None) -> float:
        """Throughput upper bound from the list schedules and schedule lower bounds, before any ILP (mean over
        models, stopped as soon as it cannot beat `beat`)."""
        point = self.point(index)
        return self.bounded_mean(index, beat, lambda m, cut: m.schedule_bound(index, point, m.placer(point, self.fixed_placement)))

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
        return float(bound.mean())

    def _cannot_beat(self, bound: np.ndarray, beat: float | None) -> bool:
        """Whether several models' bounds already show that their mean cannot beat `beat`."""
        return len(bound) > 1 and beat is not None and bound.mean() <= beat

    def upper_bounds(self, index: int) -> np.ndarray:
        """Per model, the tightest upper bound on its throughput at the point found so far (a copy)."""
        known = self._upper.get(index)
        return (known if known is not None else np.minimum([m.work_bound[index] for m in self.models], self.caps)).copy()

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
        if self.cfg.hw.get("baseline"):
            return self.preset_baseline(fixed)
        start = time.perf_counter()
        reference = describe_points(self.cfg.hw, reference_point(self.cfg.hw))
        results, ilp_s, chip = {}, 0.0, None
        for m in self.models:
            point, run = reference, None
            if fixed and compat_of(self.cfg).baseline_in_optimum_run and optimum is not None:
                point, run = optimum_run(reference, self.point(optimum_index), optimum.results[m.name])
            chip = chip or chip_of(self.cfg.hw, point)  # the first model's (others differ only where their optimum fits nothing)
            layers = layer_latencies(m.cfg, point, m.workloads, self.network)
            before = layers.solve_s
            results[m.name] = layers.best(m.placer(point, fixed, run))[0]
            ilp_s += layers.solve_s - before
        return Evaluation(results, ilp_s, time.perf_counter() - start - ilp_s, chip=chip)

    def preset_baseline(self, fixed: bool = True) -> Evaluation:
        """The hw.baseline preset (a shipped chip under its own constants, e.g. tpuv4_modern or h100) on this
        cluster, with each model's expert placement or the searched one."""
        start = time.perf_counter()
        hw = preset_hw(str(self.cfg.hw.baseline))
        point = enumerate_space(hw)
        results, ilp_s = {}, 0.0
        for m in self.models:
            cfg = m.cfg.copy()
            cfg.hw = hw
            chip = ModelEvaluator(cfg, point, self.network)
            results[m.name], _, solve_s, _ = chip.solve(0, point, chip.placer(point, fixed))
            ilp_s += solve_s
        return Evaluation(results, ilp_s, time.perf_counter() - start - ilp_s, chip=chip_of(hw, point))

    def arch_params(self, index: int) -> dict:
        """The point's architecture as a trial's hw.* params."""
        return chip_params(self.cfg.hw, self.points.iloc[index])

    def objective_scale(self) -> np.ndarray:
        """Objective per sequence/s of every point: 1, or 1/TDP when search.objective=throughput_per_tdp."""
        if self.cfg.search.objective == "throughput_per_tdp":
            return 1.0 / self.points.tdp_w.to_numpy(dtype=np.float64)
        return np.ones(len(self.points))

    def order_by_bound(self) -> np.ndarray:
        """Point indices by decreasing work bound on the objective, the branch-and-bound visiting order: once one
        point's bound cannot beat the study, no later point's can. Ties (HBM siblings always tie: the work bound ignores
        capacity) go by TIE_BREAKS, larger first, then by index: the point with more comes before those it dominates,
        whose placement bounds its own then bounds without a DP (MORE_IS_FASTER)."""
        tie_breaks = [-self.points[c].to_numpy(dtype=np.float64) for c in TIE_BREAKS]
        return np.lexsort((np.arange(len(self.points)), *reversed(tie_breaks), -self.work_bound * self.objective_scale()))
