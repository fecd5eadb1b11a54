"""One hardware point through the stages: operator graphs -> latencies -> layer schedules -> placement.

This is the only module below the entry points that knows every stage; `phaze.evaluate` and the
search call it for each accelerator point they consider.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from phaze.compat import compat_of, expert_run_spaces, network_for
from phaze.config_values import positive_ints
from phaze.cost.chip import unique_chips
from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.hardware import Accelerator
from phaze.placement import PartCosts, PlacementInput, PlacementResult, evaluate_fixed, optimize
from phaze.placement.breakdown import busiest_memory, busiest_time, memory_table, time_table
from phaze.placement.memory import ADAM_MOMENTS_BYTES_PER_PARAM, FP32_MASTER_BYTES_PER_PARAM
from phaze.placement.plan import PlanCost, evaluate_plan
from phaze.placement.solve import Space
from phaze.plan_space import LayerVariant, fixed_plans, layer_variants, options, placement_space, training_model
from phaze.schedule import LayerProblem, LayerSchedule, Prepared, heuristic_schedule, lower_bound_s, mode_bound_s, prepare_layer, schedule_layer, split_bound_s, split_ceiling_s
from phaze.schedule.layer import uses_modes
from phaze.schedule.streams import StreamOptions, stream_makespan
from phaze.schema import ScheduleCfg
from phaze.workload.extract import extract_jobs, workload_job
from phaze.workload.graph import BLOCK_PARTS, DENSE, Workload
from phaze.workload.inference import forward_only
from phaze.workload.phaze_conventions import with_phaze_conventions
from phaze.workload.precision import fp8_weight_cache_bytes_per_param_byte, weight_bytes_per_param_byte, with_precision

GIB = 2**30


LATENCY_FIELDS = ("fwd_s", "bwd_s", "tp_comm_fwd_s", "tp_comm_bwd_s", "core_fwd_s")
"""Per-part latencies a placement reads; core_fwd_s is the attention core's forward (selective recompute)."""
DIRECTIONS = ("fwd", "bwd")
SIZE_FIELDS = ("param_bytes", "saved_bytes", "input_bytes", "output_bytes", "core_saved_bytes", "expert_param_bytes")
STOP_REL_TOL = 1e-5
"""Relative width at which LayerLatencies.stop_for's search ends (its answer lies at most this far above the least
makespan that settles the point): far below the 0.05-0.2% by which the headline run's MILP bounds clear the makespans
they prune at (experiments/results/milp_pruning.md)."""
STOP_STEPS = 30
"""Placement DPs stop_for may run after its two ends: false position needs a handful; 30 halvings would reach 1e-9."""


def value_now(value):
    """A value to beat given as a number (or None), or as a callable returning the latest one."""
    return value() if callable(value) else value


def variant_graph(workloads: dict[int, Workload], variant: LayerVariant, tp: int, part: str):
    """The part's LayerGraph for a layer variant at TP width tp, or None when it was not extracted."""
    w = workloads[variant.mbs]
    return w.part(tp, part, variant.sp, variant.cp, variant.ep) if w.has(tp, variant.sp, variant.cp, variant.ep) else None


def core_fwd_s(ops, unit, parallel_s) -> np.ndarray:
    """The attention core's forward time: its compute operators on all cores, one after another (what
    selective recompute runs again in backward); 0 without a marked core. [P] for parallel_s [n_ops, P]."""
    if "core" not in ops.columns:
        return np.zeros(np.asarray(parallel_s).shape[1:])
    mask = ops["core"].to_numpy(dtype=bool) & np.isin(unit, ("tc", "vc"))
    return np.asarray(parallel_s)[mask].sum(axis=0)


def single_stream_s(compute, unit, parallel_s, opts: StreamOptions) -> tuple[np.ndarray, np.ndarray]:
    """(makespan, exposed communication) of a direction on a chip without inter-operator parallelism."""
    makespan = stream_makespan(compute, unit, parallel_s, opts)
    busy = np.asarray(parallel_s)[np.isin(unit, ("tc", "vc"))].sum(axis=0)
    return makespan, np.maximum(makespan - busy, 0.0)


class LayerLatencies:
    """Every (layer variant, TP width, part, direction) of one point, scheduled only as far as a placement needs.

    `values` is shaped as part_latencies returns ({part: {field: [len(variants), len(tp)]}}, NaN where a
    shard was not extracted). Each entry goes through up to three states, each value a lower bound on
    the next: `unlisted` (a cheap critical-path / work bound, from `lower_bounds` when the search
    already has them), `pending` (the list schedule is more than schedule.mip_gap above the
    schedule's lower bound: the entry holds that bound until the ILP runs, or the mode search's once it has
    run: `prepared`), and scheduled (the list
    schedule where it meets the bound within the gap, else the ILP's makespan), exactly as
    schedule_layer would return it. Without inter-operator parallelism (a GPU's single stream) the
    layer takes the stream timeline of phaze.schedule.streams (the plain sum when nothing overlaps).
    """

    def __init__(self, workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values,
                 variants: list[LayerVariant], inter_op_parallel: bool = True,
                 lower_bounds: dict[str, dict[str, np.ndarray]] | None = None, tp_async: bool = False, overlap_slowdown: float = 0.0):
        self.variants = list(variants)
        self.tp_values = list(tp_values)
        self.schedule_cfg = schedule_cfg
        self.workloads = workloads
        self.point = point
        self.network = network
        row = point.iloc[0]
        self.cores = (int(row.n_tc), int(row.n_vc))
        self.chips = unique_chips(point)
        shape = (len(self.variants), len(self.tp_values))
        counts = next(iter(workloads.values())).part_counts
        self.parts = tuple(counts)
        self.uses = {part: n if part in BLOCK_PARTS else 0 for part, n in counts.items()}
        """How many blocks each block part is (an MoE model's dense blocks: a few, its MoE blocks: most); 0 for pre and post."""
        self.values = {p: {f: np.full(shape, np.nan) for f in LATENCY_FIELDS} for p in self.parts}
        self.unlisted: set[tuple] = set()
        """Entries holding a cheap lower bound: not list-scheduled yet."""
        self.pending: dict[tuple, tuple] = {}
        """Entries holding the schedule's lower bound, with the schedule_layer arguments that solve them."""
        self._costed: dict[tuple, tuple] = {}
        """Unlisted entries whose operators were already costed (for their initial bound)."""
        self._twins: dict[tuple, list[tuple]] = {}
        """Each entry's twins: the entries of the same graph, width and direction (sequence parallelism at TP
        width 1, the pre- and post-layers of every expert-parallel width), scheduled once for all of them."""
        self.prepared: dict[tuple, Prepared] = {}
        """Pending entries whose schedule ran up to its MILP (their values raised to the bound the mode search proves),
        with what the MILP starts from."""
        self.prepares = inter_op_parallel and uses_modes(schedule_cfg)
        """Whether `best` runs a pending entry's mode search, and places again, before its MILP (schedule.mode_search)."""
        self.bounds_modes = inter_op_parallel and not self.prepares
        """Whether `best`, asked to beat a value, raises a pending entry to the mode search's bound alone before its MILP
        (schedule.mode_search off: the schedules, and so PHAZE's numbers, stay the MILP's; the bound only prunes sooner)."""
        self.listed_s: dict[tuple, float] = {}
        """Pending entries' list-schedule makespans (s): where the mode search's bisection stops."""
        self.mode_bounded: set[tuple] = set()
        """Pending entries already raised to the mode search's bound."""
        self.refuted: set[tuple] = set()
        """Pending entries raised to the bound of a MILP that stopped there (stop_for): their next MILP runs to its end."""
        self.solve_s = 0.0
        self.n_solved = 0
        self.milps: list[LayerSchedule] = []
        """Schedules of the entries that went past the list schedule (the MILP, or its cached result), in order."""
        start = time.perf_counter()
        graphs: dict[tuple, list[tuple]] = {}
        for vi, variant in enumerate(self.variants):
            for ti, t in enumerate(self.tp_values):
                if variant_graph(workloads, variant, t, "layer") is None:
                    continue
                for part in self.parts:
                    graph = variant_graph(workloads, variant, t, part)
                    for direction in DIRECTIONS:
                        key = (vi, ti, part, direction)
                        twins = graphs.setdefault((id(graph), ti, direction), [])
                        twins.append(key)
                        self._twins[key] = twins
                        fields = [f"{direction}_s", f"tp_comm_{direction}_s"] + (["core_fwd_s"] if direction == "fwd" else [])
                        if lower_bounds is not None and inter_op_parallel:
                            for f in fields:
                                self.values[part][f][vi, ti] = lower_bounds[part][f][vi, ti]
                            self.unlisted.add(key)
                            continue
                        compute, unit, single, parallel = self._inputs(key)
                        if direction == "fwd":
                            self.values[part]["core_fwd_s"][vi, ti] = float(core_fwd_s(compute.ops, unit, parallel[:, None])[0])
                        if not inter_op_parallel:
                            span, exposed = single_stream_s(compute, unit, parallel[:, None],
                                                            StreamOptions(tp_async, variant.tp_comm_overlap, overlap_slowdown=overlap_slowdown))
                            self.values[part][f"{direction}_s"][vi, ti] = float(span[0])
                            self.values[part][f"tp_comm_{direction}_s"][vi, ti] = float(exposed[0])
                            continue
                        self.values[part][f"tp_comm_{direction}_s"][vi, ti] = float(single[unit == "net"].sum())
                        self.values[part][f"{direction}_s"][vi, ti] = lower_bound_s(compute, unit, single, parallel, *self.cores)
                        self._costed[key] = (compute, unit, single, parallel)
                        self.unlisted.add(key)
        self.solve_s += time.perf_counter() - start

    def _inputs(self, key: tuple) -> tuple:
        """(view-free graph, unit, single-core s, all-core s) of one entry, costed on this point (once)."""
        if key in self._costed:
            return self._costed.pop(key)
        vi, ti, part, direction = key
        g = variant_graph(self.workloads, self.variants[vi], self.tp_values[ti], part)
        compute = (g.fwd if direction == "fwd" else g.bwd).without_views()
        lat = op_latencies(compute.ops, self.point, self.network, self.tp_values[ti], self.chips)
        return compute, lat.unit, lat.single_s[:, 0], lat.parallel_s[:, 0]

    def list_schedule(self, keys) -> None:
        """List-schedule the unlisted ones of these entries: scheduled where the list schedule meets its
        bound within the gap, else pending with the schedule's lower bound."""
        for key in sorted(set(keys) & self.unlisted):
            if key not in self.unlisted:  # listed meanwhile as another entry's twin
                continue
            start = time.perf_counter()
            args = self._inputs(key)
            listed = heuristic_schedule(*args, *self.cores, self.schedule_cfg)
            for twin in self._twins[key]:
                vi, ti, part, direction = twin
                self.unlisted.discard(twin)
                self._costed.pop(twin, None)
                if listed.mip_gap <= self.schedule_cfg.mip_gap:
                    self.values[part][f"{direction}_s"][vi, ti] = float(listed.makespan_s)
                else:
                    self.values[part][f"{direction}_s"][vi, ti] = max(self.values[part][f"{direction}_s"][vi, ti], float(listed.bound_s))
                    self.pending[twin] = args
                    self.listed_s[twin] = float(listed.makespan_s)
            self.solve_s += time.perf_counter() - start

    def solve(self, keys, stop_s: float | None = None) -> None:
        """Schedule these (mbs index, tp index, part, direction) entries (list schedule, then the ILP where
        it is over the gap, cached on disk). With `stop_s` (one entry), its MILP may stop once it proves the entry
        at least that long: the entry then stays pending, raised to the proven bound (_refute)."""
        self.list_schedule(keys)
        for key in sorted(set(keys) & self.pending.keys()):
            if key not in self.pending:  # solved meanwhile as another entry's twin
                continue
            start = time.perf_counter()
            sched = schedule_layer(*self.pending[key], *self.cores, self.schedule_cfg, prepared=self.prepared.get(key), stop_s=stop_s)
            self.solve_s += time.perf_counter() - start
            if sched.status == "refuted":
                self._refute(key, sched)
            else:
                self._resolve(key, sched)

    def prepare(self, key: tuple) -> None:
        """Run a pending entry's schedule up to its MILP (prepare_layer): resolved where that proves it, else its value
        (and its twins') raised to the lower bound the mode search proves, the MILP's start kept for solve."""
        start = time.perf_counter()
        outcome = prepare_layer(*self.pending[key], *self.cores, self.schedule_cfg)
        self.solve_s += time.perf_counter() - start
        if isinstance(outcome, LayerSchedule):
            self._resolve(key, outcome)
            return
        for twin in self._raise(key, outcome.lower_s):
            self.prepared[twin] = outcome

    def bound_modes(self, key: tuple, place, beat: float) -> None:
        """Raise a pending entry (and its twins) to the largest makespan the mode search refutes below its list schedule,
        or to its split bound where that is larger (phaze.schedule.split); its MILP, if it still runs, is unchanged. The
        split's side MILPs run only where its ceiling (split_ceiling_s) would leave place() unable to beat `beat`."""
        start = time.perf_counter()
        vi, ti, part, direction = key
        problem = LayerProblem.build(*self.pending[key], *self.cores)
        bound = mode_bound_s(problem, float(self.values[part][f"{direction}_s"][vi, ti]), self.listed_s[key])
        ceiling = min(split_ceiling_s(problem), self.listed_s[key])
        if ceiling > bound and self._excess(place, key, ceiling, beat) <= 0:
            bound = max(bound, split_bound_s(problem, self.schedule_cfg))
        self.solve_s += time.perf_counter() - start
        self.mode_bounded.update(self._raise(key, bound))

    def _refute(self, key: tuple, sched: LayerSchedule) -> None:
        """A pending entry's MILP stopped on its bound (status "refuted"): it and its twins stay pending, raised to it."""
        self.milps.append(sched)
        self.refuted.update(self._raise(key, sched.bound_s))

    def _raise(self, key: tuple, bound_s: float) -> list[tuple]:
        """Raise a pending entry and its pending twins to a proven lower bound (never lowered); returns those twins."""
        twins = self._pending_twins(key)
        for vi, ti, part, direction in twins:
            field = self.values[part][f"{direction}_s"]
            field[vi, ti] = max(field[vi, ti], bound_s)
        return twins

    def _pending_twins(self, key: tuple) -> list[tuple]:
        """The entry and its twins that are still pending (they share its graph, width and direction)."""
        return [t for t in self._twins[key] if t in self.pending]

    def stop_for(self, place, key: tuple, beat: float | None) -> float | None:
        """The least makespan of the pending `key` (its twins alike) from which place() cannot beat `beat`, between its
        value and its list schedule (Illinois false position on place()'s throughput, which falls as the makespan
        grows): its MILP may stop once its bound proves that much. None without `beat`, where even the list schedule
        beats it, or where a MILP stopped on this entry before (place() beats again only for a lower `beat`, or by
        round-off: the MILP then runs to its end)."""
        if beat is None or key in self.refuted:
            return None
        kept = [float(self.values[part][f"{d}_s"][vi, ti]) for vi, ti, part, d in self._pending_twins(key)]

        def excess(makespan_s: float) -> float:
            return self._excess(place, key, makespan_s, beat)

        lo, hi = min(kept), self.listed_s[key]
        f_lo, f_hi = excess(lo), excess(hi)
        if f_hi > 0:
            return None
        kept_side = 0
        for _ in range(STOP_STEPS):
            if f_lo <= 0 or hi - lo <= STOP_REL_TOL * hi:
                break
            mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
            mid = mid if lo < mid < hi else 0.5 * (lo + hi)
            f_mid = excess(mid)
            if f_mid > 0:
                lo, f_lo = mid, f_mid
                f_hi *= 0.5 if kept_side == 1 else 1.0  # Illinois: the same end kept twice counts half
                kept_side = 1
            else:
                hi, f_hi = mid, f_mid
                f_lo *= 0.5 if kept_side == -1 else 1.0
                kept_side = -1
        return hi

    def _excess(self, place, key: tuple, makespan_s: float, beat: float) -> float:
        """place()'s throughput over `beat` with the pending `key` and its twins at least makespan_s (negative: it cannot
        beat it); their values are left as they were."""
        twins = self._pending_twins(key)
        kept = [float(self.values[part][f"{d}_s"][vi, ti]) for vi, ti, part, d in twins]
        for (vi, ti, part, d), value in zip(twins, kept):
            self.values[part][f"{d}_s"][vi, ti] = max(value, makespan_s)
        try:
            result = place(self.values)
            return (result.throughput_seq_s if result is not None and result.feasible else 0.0) - beat
        finally:
            for (vi, ti, part, d), value in zip(twins, kept):
                self.values[part][f"{d}_s"][vi, ti] = value

    def _resolve(self, key: tuple, sched: LayerSchedule) -> None:
        """A pending entry and its twins scheduled: `sched` past the list schedule (the MILP's, or the cache's)."""
        self.n_solved += 1
        self.milps.append(sched)
        for twin in self._twins[key]:
            if self.pending.pop(twin, None) is not None:
                self.prepared.pop(twin, None)
                self.listed_s.pop(twin, None)
                self.mode_bounded.discard(twin)
                self.refuted.discard(twin)
                vi, ti, part, direction = twin
                self.values[part][f"{direction}_s"][vi, ti] = float(sched.makespan_s)

    def all_keys(self) -> list[tuple]:
        return sorted(self.unlisted | self.pending.keys())

    def listed_all(self) -> dict[str, dict[str, np.ndarray]]:
        """Every entry list-scheduled: list makespans, and the schedules' lower bounds where the ILP would run."""
        self.list_schedule(self.all_keys())
        return self.values

    def solve_all(self) -> dict[str, dict[str, np.ndarray]]:
        self.solve(self.all_keys())
        return self.values

    def keys_of(self, strategy) -> set[tuple]:
        """The entries a strategy's time depends on: its layer variant at each of its stages' TP widths."""
        vi = self.variants.index(LayerVariant(strategy.mbs, strategy.sp, strategy.cp, strategy.tp_comm_overlap, strategy.ep))
        widths = strategy.tp_per_stage or (strategy.tp,) * strategy.pp
        return {(vi, self.tp_values.index(int(t)), part, d) for t in set(widths) for part in self.parts for d in DIRECTIONS}

    def _needed(self, result, among) -> set[tuple]:
        return self.keys_of(result.strategy) & among if result is not None and result.feasible else set()

    def listed_bound(self, place):
        """place() once every entry its placement depends on is list-scheduled: an upper bound on the
        fully scheduled optimum (pending entries hold lower bounds), before any ILP runs."""
        while True:
            result = place(self.values)
            need = self._needed(result, self.unlisted)
            if not need:
                return result
            self.list_schedule(need)

    def best(self, place, beat: float | None = None):
        """place(latencies) -> PlacementResult | None, solved lazily and exactly; returns (result, exact).

        `place` must be monotone: its throughput never drops when latencies shrink (the placement
        DP, a fixed plan, or the best of several). Unscheduled entries hold lower bounds, so
        place() on the current values bounds the fully scheduled optimum from above; once the
        placement it returns depends only on scheduled entries, it is that optimum (exact=True).
        Otherwise its entries are list-scheduled, then solved one ILP at a time (with schedule.mode_search, each
        first run up to its ILP: the mode search's bound alone may settle the placement, or it proves the layer; without
        it, and with `beat`, first raised to the mode search's bound, which may show the point unable to beat it), and
        place() runs again: usually a handful of layers, not all of them. With `beat`, it stops as soon as that
        upper bound is at most `beat` (exact=False: the point cannot beat it). `beat` may be a callable, read again
        before every step (value_now): a value another search worker has found meanwhile then prunes at once.
        """
        to_beat = beat
        while True:
            beat = value_now(to_beat)
            result = place(self.values)
            if beat is not None and (result is None or not result.feasible or result.throughput_seq_s <= beat):
                return result, not self._needed(result, self.unlisted | self.pending.keys())
            need = self._needed(result, self.unlisted)
            if need:
                self.list_schedule(need)
                continue
            need = self._needed(result, self.pending.keys())
            if not need:
                return result, True
            key = max(need, key=self._pending_gap)
            if self.prepares and key not in self.prepared:
                self.prepare(key)
            elif self.bounds_modes and beat is not None and key not in self.mode_bounded:
                self.bound_modes(key, place, beat)
            else:
                self.solve([key], self.stop_for(place, key, beat))

    def _pending_gap(self, key: tuple) -> tuple:
        """Solve first the pending entry used most (the part of most blocks) whose bound is largest."""
        vi, ti, part, direction = key
        return (self.uses[part], self.values[part][f"{direction}_s"][vi, ti], key)


def part_latencies(workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values,
                   variants: list[LayerVariant], inter_op_parallel: bool = True, tp_async: bool = False,
                   overlap_slowdown: float = 0.0) -> dict[str, dict[str, np.ndarray]]:
    """Scheduled latencies of every part: {part: {field: [len(variants), len(tp)]}}; NaN where a shard was not extracted."""
    return LayerLatencies(workloads, point, network, schedule_cfg, tp_values, variants, inter_op_parallel, tp_async=tp_async,
                          overlap_slowdown=overlap_slowdown).solve_all()


def part_sizes(workloads: dict[int, Workload], tp_values, variants: list[LayerVariant]) -> dict[str, dict[str, np.ndarray]]:
    """Per part, the workload's bytes (SIZE_FIELDS) for every (layer variant, TP width); NaN where not extracted."""
    sizes = {}
    for part in next(iter(workloads.values())).parts:
        sizes[part] = {f: np.full((len(variants), len(tp_values)), np.nan) for f in SIZE_FIELDS}
        for vi, variant in enumerate(variants):
            for ti, t in enumerate(tp_values):
                g = variant_graph(workloads, variant, t, part)
                if g is not None:
                    for f in SIZE_FIELDS:
                        sizes[part][f][vi, ti] = getattr(g, f)
    return sizes


def tp_values_of(workloads: dict[int, Workload]) -> list[int]:
    return sorted({t for w in workloads.values() for t in w.tp_widths})


def workload_jobs(cfg) -> list[partial]:
    """The workload_job of each microbatch size of the training config, with every shard its placement space needs."""
    shards = {"sp_values": tuple(options(cfg, "sp")), "cp_values": tuple(options(cfg, "cp")), "ep_values": tuple(options(cfg, "ep"))}
    return [workload_job(training_model(cfg), mbs, cfg.train.bytes_per_elem, cfg.train.tp_widths, cfg.cache_dir, **shards)
            for mbs in microbatch_sizes(cfg)]


def microbatch_sizes(cfg) -> list[int]:
    """train.mbs as a sorted list of sizes."""
    return positive_ints(cfg.train.mbs, "train.mbs")


def load_workloads(cfg) -> dict[int, Workload]:
    """The model's workload at every microbatch size of the training config (cached on disk as traced, by
    `workload_processes` processes at once; the precision and the compat switches apply after the cache)."""
    family = str(training_model(cfg).family)
    step = forward_only if cfg.train.get("forward_only") else (lambda workload: workload)
    traced = extract_jobs(workload_jobs(cfg), processes=cfg.get("workload_processes"))
    return {mbs: step(with_phaze_conventions(with_precision(w, cfg.train.precision), compat_of(cfg), family))
            for mbs, w in zip(microbatch_sizes(cfg), traced)}


def schedule_settings(cfg) -> ScheduleCfg:
    """cfg.schedule with schedule.mode_search resolved: null is on with train.step_model=timeline and off with
    PHAZE's step, so PHAZE's world keeps the layer schedules its numbers were measured with."""
    settings = ScheduleCfg(**OmegaConf.to_container(cfg.schedule)) if isinstance(cfg.schedule, DictConfig) else cfg.schedule
    if settings.mode_search is None:
        settings = replace(settings, mode_search=cfg.train.step_model != "phaze")
    return settings


def variants_of(cfg) -> list[LayerVariant]:
    return layer_variants(cfg, bool(cfg.hw.inter_op_parallel))


def _or_default(value, default: float) -> float:
    """A train.* byte count, or the fp32 default where it is null."""
    return float(default if value is None else value)


def placement_input(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, latencies=None) -> PlacementInput:
    """The placement DP's input for one accelerator point: every part scheduled (or the given latencies)."""
    if latencies is None:
        latencies = part_latencies(workloads, point, network, schedule_settings(cfg), tp_values_of(workloads), variants_of(cfg),
                                   bool(cfg.hw.inter_op_parallel), bool(cfg.train.tp_comm_async), float(cfg.hw.overlap_slowdown))
    return placement_inputs(cfg, point, workloads, network)(latencies)


@dataclass(frozen=True)
class PlacementSetup:
    """What the placement DP's input and space take from the configuration and the workload, whatever the point:
    read once per model, since a search builds a point's input again each time more of its layers are scheduled."""

    variants: list[LayerVariant]
    sizes: dict[str, dict[str, np.ndarray]]
    chain: tuple[str, ...]
    """The part at each position of the chain (Workload.chain)."""
    space: Space
    fixed: list[dict] | None
    """A fixed placement's plans (phaze.plan_space.fixed_plans), None for a search."""
    fp8: bool
    fields: dict
    """PlacementInput fields that do not depend on the point."""

    @classmethod
    def of(cls, cfg, workloads: dict[int, Workload]) -> "PlacementSetup":
        tp_values = tp_values_of(workloads)
        variants = variants_of(cfg)
        any_w = next(iter(workloads.values()))
        fields = dict(
            mbs_values=np.array([v.mbs for v in variants]), sp_values=np.array([v.sp for v in variants]),
            cp_values=np.array([v.cp for v in variants]), overlap_values=np.array([v.tp_comm_overlap for v in variants]),
            ep_values=np.array([v.ep for v in variants]),
            tp_values=np.array(tp_values),
            devices=int(cfg.cluster.devices), global_batch=int(cfg.train.global_batch), seq_len=int(any_w.seq_len),
            optimizer=cfg.train.optimizer,
            bytes_per_elem=int(cfg.train.bytes_per_elem), grad_bytes_per_elem=int(cfg.train.grad_bytes_per_elem or 0),
            master_bytes_per_param=_or_default(cfg.train.master_bytes_per_param, FP32_MASTER_BYTES_PER_PARAM),
            moment_bytes_per_param=_or_default(cfg.train.moment_bytes_per_param, ADAM_MOMENTS_BYTES_PER_PARAM),
            weight_cache_bytes_per_param_byte=fp8_weight_cache_bytes_per_param_byte(cfg.train.precision, int(cfg.train.bytes_per_elem),
                                                                                    bool(cfg.train.fp8_params)),
            weight_bytes_per_param_byte=weight_bytes_per_param_byte(int(cfg.train.bytes_per_elem), bool(cfg.train.fp8_params)),
            p2p_scatter_gather=bool(cfg.train.p2p_scatter_gather),
            recompute_granularity=cfg.train.recompute_granularity, model_flops_per_seq=any_w.train_matmul_flops_per_seq(any_w.tp_widths[0]),
            part_names=("pre",) + tuple(f"{'dense' if part == DENSE else 'layer'}{i}" for i, part in enumerate(any_w.blocks)) + ("post",),
            step_model=cfg.train.step_model, overlap_grad_reduce=bool(cfg.train.overlap_grad_reduce),
            overlap_param_gather=bool(cfg.train.overlap_param_gather),
            serial_zero3_collectives=bool(cfg.train.serial_zero3_collectives),
            update_bytes_per_param_byte=float(cfg.train.update_bytes_per_param) / int(cfg.train.bytes_per_elem),
            overlap_slowdown=float(cfg.hw.overlap_slowdown),
        )
        return cls(variants, part_sizes(workloads, tp_values, variants), any_w.chain, placement_space(cfg), fixed_plans(cfg),
                   cfg.train.precision == "fp8", fields)


def placement_inputs(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, setup: PlacementSetup | None = None):
    """latencies -> the placement DP's input for one accelerator point (`setup`: PlacementSetup.of(cfg, workloads))."""
    setup = setup or PlacementSetup.of(cfg, workloads)
    row = point.iloc[0]
    chip = Accelerator.from_row(row)
    fields = dict(setup.fields, hbm_bytes=float(row.hbm_gib) * GIB, network=network, hbm_bytes_s=chip.achievable_hbm_bytes_s,
                  peak_flops_s=chip.peak_matmul_flops * (chip.fp8_matmul_ratio if setup.fp8 else 1.0))

    def build(latencies) -> PlacementInput:
        costs = {part: PartCosts(**latencies[part], **setup.sizes[part]) for part in setup.sizes}
        return PlacementInput.from_chain(costs, setup.chain, **fields)

    return build


def placer(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, beat_seq_s: float | None = None,
           setup: PlacementSetup | None = None):
    """latencies -> the best placement on this point, or the fixed one when cfg.placement sets dp, pp and tp.
    With `beat_seq_s` only placements of a higher throughput count: None when there is none (cheaper to show).
    `setup`: PlacementSetup.of(cfg, workloads), where the caller keeps it."""
    setup = setup or PlacementSetup.of(cfg, workloads)
    cutoff_s = int(cfg.train.global_batch) / beat_seq_s if beat_seq_s else np.inf
    inputs = placement_inputs(cfg, point, workloads, network, setup)

    def place(latencies) -> PlacementResult | None:
        inp = inputs(latencies)
        if setup.fixed is not None:  # the best of the fixed placement's plans; where none fits, the one needing least memory
            return max((evaluate_fixed(inp, **plan) for plan in setup.fixed), key=lambda r: (r.throughput_seq_s, -r.memory_per_device_bytes))
        found = [r for r in (optimize(inp, space=s, cutoff_s=cutoff_s) for s in expert_run_spaces(cfg, inp, setup.space)) if r is not None]
        return max(found, key=lambda r: r.throughput_seq_s, default=None)

    return place


def layer_latencies(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, lower_bounds=None) -> LayerLatencies:
    """The point's LayerLatencies; `lower_bounds` (one point's slice of phaze.search.bounds.lower_bound_latencies)
    spares computing the initial bounds."""
    return LayerLatencies(workloads, point, network, schedule_settings(cfg), tp_values_of(workloads), variants_of(cfg),
                          bool(cfg.hw.inter_op_parallel), lower_bounds, bool(cfg.train.tp_comm_async), float(cfg.hw.overlap_slowdown))


def evaluate_point(cfg, point: pd.DataFrame, workloads: dict[int, Workload] | None = None, latencies=None) -> PlacementResult | None:
    """Best placement on this point, or the fixed one when cfg.placement sets dp, pp and tp.

    Layers are scheduled only as far as the placement needs them (LayerLatencies.best); the result
    equals the one on every layer scheduled. `latencies` (as from part_latencies) replaces the
    scheduled ones: the search passes per-layer lower bounds to get an upper bound on the throughput.
    """
    workloads = workloads or load_workloads(cfg)
    network = network_for(cfg)
    place = placer(cfg, point, workloads, network)
    if latencies is not None:
        return place(latencies)
    return layer_latencies(cfg, point, workloads, network).best(place)[0]


@dataclass(frozen=True)
class Explanation:
    """Where a placement's step goes (phaze.placement.breakdown): per pipeline stage, its time by component (rows sum
    to the time per batch) and its memory by component (rows sum to its memory); the busiest stage's of each as flat
    maps, summing to time_per_batch_s and memory_per_device_gib; and the plan's cost, for its timeline."""

    time_s: pd.DataFrame
    memory_gib: pd.DataFrame
    breakdown_s: dict[str, float]
    memory_breakdown_gib: dict[str, float]
    cost: PlanCost


def tensor_core_shares(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, strategy) -> list[float]:
    """Per pipeline rank, the fraction of its compute seconds on the tensor cores: its parts' tensor-core operators'
    time over their tensor- and vector-core operators' time (all cores), forward and backward."""
    variant = LayerVariant(strategy.mbs, strategy.sp, strategy.cp, strategy.tp_comm_overlap, strategy.ep)
    totals: dict[tuple[int, str], tuple[float, float]] = {}
    workload = next(iter(workloads.values()))
    chain = workload.chain
    for t in set(strategy.tp_per_stage):
        for part in workload.parts:
            g = variant_graph(workloads, variant, t, part)
            busy = np.zeros(2)
            for graph in (g.fwd, g.bwd):
                ops = graph.without_views().ops
                lat = op_latencies(ops, point, network, t)
                busy += [lat.parallel_s[lat.unit == unit, 0].sum() for unit in ("tc", "vc")]
            totals[(t, part)] = tuple(busy)
    shares = np.zeros((strategy.pp, 2))
    for c, ((first, last), t) in enumerate(zip(strategy.stage_bounds, strategy.tp_per_stage)):
        for index in range(first, last + 1):
            shares[c % strategy.pp] += totals[(t, chain[index])]
    return [float(tc / (tc + vc)) if tc + vc > 0 else 0.0 for tc, vc in shares]


def explain(cfg, point: pd.DataFrame, result: PlacementResult, workloads: dict[int, Workload] | None = None) -> Explanation:
    """The breakdown of `result` (a placement found on `point`) from the same latencies and cost model that timed it."""
    workloads = workloads or load_workloads(cfg)
    network = network_for(cfg)
    layers = layer_latencies(cfg, point, workloads, network)
    layers.solve(layers.keys_of(result.strategy))
    cost = evaluate_plan(placement_input(cfg, point, workloads, network, layers.values), result.strategy.to_plan())
    times = time_table(cost, tensor_core_shares(cfg, point, workloads, network, result.strategy))
    memory = memory_table(cost)
    return Explanation(times, memory, busiest_time(times), busiest_memory(memory), cost)
