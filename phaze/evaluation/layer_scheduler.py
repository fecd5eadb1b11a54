"""The layer schedules of one point: every (layer variant, TP width, part, direction) entry, each with its own state,
scheduled only as far as it is asked to be.

Each entry goes through up to three stages, each value a lower bound on the next: UNLISTED (a cheap critical-path /
work bound, from `lower_bounds` when the search already has them), PENDING (the list schedule is more than
schedule.mip_gap above the schedule's lower bound: the entry holds that bound, or a larger one proven since, until its
MILP runs) and SCHEDULED (the list schedule where it meets the bound within the gap, else the MILP's makespan),
exactly as schedule_layer would return it. Without inter-operator parallelism (a GPU's single stream) an entry takes
the stream timeline of phaze.schedule.streams (the plain sum when nothing overlaps) and starts SCHEDULED.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pandas as pd

from phaze.cost.chip import unique_chips
from phaze.cost.network import Network
from phaze.evaluation.latency_table import (DIRECTIONS, LATENCY_FIELDS, Key, LatencyTable, core_fwd_s, entry_inputs, makespan_field,
                                            single_stream_s, variant_graph)
from phaze.plan_space import LayerVariant
from phaze.schedule import LayerSchedule, Prepared, heuristic_schedule, lower_bound_s, prepare_layer, schedule_layer
from phaze.schedule.streams import StreamOptions
from phaze.workload.graph import BLOCK_PARTS, Workload


class Stage(Enum):
    """How far an entry is scheduled (see the module docstring)."""

    UNLISTED = "unlisted"
    PENDING = "pending"
    SCHEDULED = "scheduled"


OPEN = (Stage.UNLISTED, Stage.PENDING)
"""The stages whose value is still a lower bound."""


@dataclass(eq=False)
class Entry:
    """One entry's state: its stage and what its next step starts from."""

    key: Key
    twins: list["Entry"]
    """The entries of the same graph, width and direction (itself included; sequence parallelism at TP width 1, the
    pre- and post-layers of every expert-parallel width), scheduled once for all of them: one list, shared."""
    stage: Stage = Stage.SCHEDULED
    inputs: tuple | None = None
    """Its costed operators, the schedule_layer arguments (costed for its initial bound, or when it is listed);
    None once scheduled."""
    listed_s: float | None = None
    """A pending entry's list-schedule makespan (s): where the mode search's bisection stops."""
    prepared: Prepared | None = None
    """What its MILP starts from, once its schedule ran up to the MILP (its value raised to the mode search's bound)."""
    mode_bounded: bool = False
    """Raised to the mode search's bound (and the split bound, where computed)."""
    refuted: bool = False
    """Raised to the bound of a MILP that stopped there (refute): its next MILP runs to its end."""


class LayerScheduler:
    """Every entry of one point in the shape part_latencies returns (`values`: {part: {field: [len(variants),
    len(tp)]}}, NaN where a shard was not extracted), each scheduled only as far as it is asked."""

    def __init__(self, workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values,
                 variants: list[LayerVariant], inter_op_parallel: bool = True,
                 lower_bounds: LatencyTable | None = None, tp_async: bool = False, overlap_slowdown: float = 0.0):
        self.variants = list(variants)
        self.tp_values = list(tp_values)
        self.schedule_cfg = schedule_cfg
        self.workloads = workloads
        self.point = point
        self.network = network
        self.stream = (tp_async, overlap_slowdown)
        """(train.tp_comm_async, hw.overlap_slowdown): a single stream's StreamOptions, with each variant's overlap."""
        row = point.iloc[0]
        self.cores = (int(row.n_tc), int(row.n_vc))
        self.chips = unique_chips(point)
        shape = (len(self.variants), len(self.tp_values))
        counts = next(iter(workloads.values())).part_counts
        self.parts = tuple(counts)
        self.uses = {part: n if part in BLOCK_PARTS else 0 for part, n in counts.items()}
        """How many blocks each block part is (an MoE model's dense blocks: a few, its MoE blocks: most); 0 for pre and post."""
        self.values: LatencyTable = {p: {f: np.full(shape, np.nan) for f in LATENCY_FIELDS} for p in self.parts}
        self.entries: dict[Key, Entry] = {}
        self.solve_s = 0.0
        self.n_solved = 0
        self.milps: list[LayerSchedule] = []
        """Schedules of the entries that went past the list schedule (the MILP, or its cached result), in order."""
        start = time.perf_counter()
        graphs: dict[tuple, list[Entry]] = {}
        for vi, variant in enumerate(self.variants):
            for ti, t in enumerate(self.tp_values):
                if variant_graph(workloads, variant, t, "layer") is None:
                    continue
                for part in self.parts:
                    graph = variant_graph(workloads, variant, t, part)
                    for direction in DIRECTIONS:
                        twins = graphs.setdefault((id(graph), ti, direction), [])
                        entry = Entry((vi, ti, part, direction), twins)
                        twins.append(entry)
                        self.entries[entry.key] = entry
                        self._start(entry, lower_bounds, inter_op_parallel)
        self.solve_s += time.perf_counter() - start

    def _start(self, entry: Entry, lower_bounds: LatencyTable | None, inter_op_parallel: bool) -> None:
        """An entry's initial values: the given lower bounds, its single-stream timeline (scheduled), or its own bound."""
        vi, ti, part, direction = entry.key
        fields = [f"{direction}_s", f"tp_comm_{direction}_s"] + (["core_fwd_s"] if direction == "fwd" else [])
        values = self.values[part]
        if lower_bounds is not None and inter_op_parallel:
            for f in fields:
                values[f][vi, ti] = lower_bounds[part][f][vi, ti]
            entry.stage = Stage.UNLISTED
            return
        compute, unit, single, parallel = inputs = self._cost(entry.key)
        if direction == "fwd":
            values["core_fwd_s"][vi, ti] = float(core_fwd_s(compute.ops, unit, parallel[:, None])[0])
        if not inter_op_parallel:
            tp_async, overlap_slowdown = self.stream
            stream = StreamOptions(tp_async, self.variants[vi].tp_comm_overlap, overlap_slowdown=overlap_slowdown)
            span, exposed = single_stream_s(compute, unit, parallel[:, None], stream)
            values[f"{direction}_s"][vi, ti] = float(span[0])
            values[f"tp_comm_{direction}_s"][vi, ti] = float(exposed[0])
            return
        values[f"tp_comm_{direction}_s"][vi, ti] = float(single[unit == "net"].sum())
        values[f"{direction}_s"][vi, ti] = lower_bound_s(compute, unit, single, parallel, *self.cores)
        entry.stage, entry.inputs = Stage.UNLISTED, inputs

    def _cost(self, key: Key) -> tuple:
        """An entry's operators costed on this point (entry_inputs)."""
        vi, ti, part, direction = key
        return entry_inputs(self.workloads, self.point, self.network, self.chips, self.variants[vi], self.tp_values[ti], part, direction)

    def value(self, key: Key) -> float:
        """An entry's makespan (s) now: a lower bound while it is open."""
        vi, ti, part, direction = key
        return float(self.values[part][makespan_field(direction)][vi, ti])

    def _set(self, entry: Entry, makespan_s: float) -> None:
        """Write an entry's makespan (s) into the table."""
        vi, ti, part, direction = entry.key
        self.values[part][makespan_field(direction)][vi, ti] = makespan_s

    def _in(self, keys, stage: Stage) -> list[Entry]:
        """The entries of these keys at `stage`, in key order."""
        return [e for e in (self.entries.get(k) for k in sorted(set(keys))) if e is not None and e.stage is stage]

    def list_schedule(self, keys) -> None:
        """List-schedule the unlisted ones of these entries: scheduled where the list schedule meets its
        bound within the gap, else pending with the schedule's lower bound."""
        for entry in self._in(keys, Stage.UNLISTED):
            if entry.stage is not Stage.UNLISTED:  # listed meanwhile as another entry's twin
                continue
            start = time.perf_counter()
            args = entry.inputs if entry.inputs is not None else self._cost(entry.key)
            listed = heuristic_schedule(*args, *self.cores, self.schedule_cfg)
            for twin in entry.twins:
                if listed.mip_gap <= self.schedule_cfg.mip_gap:
                    twin.stage, twin.inputs = Stage.SCHEDULED, None
                    self._set(twin, float(listed.makespan_s))
                else:
                    twin.stage, twin.inputs, twin.listed_s = Stage.PENDING, args, float(listed.makespan_s)
                    self._set(twin, max(self.value(twin.key), float(listed.bound_s)))
            self.solve_s += time.perf_counter() - start

    def solve(self, keys, stop_s: float | None = None) -> None:
        """Schedule these entries (list schedule, then the MILP where it is over the gap, cached on disk). With `stop_s`
        (one entry), its MILP may stop once it proves the entry at least that long: the entry then stays pending, raised
        to the proven bound (refute)."""
        self.list_schedule(keys)
        for entry in self._in(keys, Stage.PENDING):
            if entry.stage is not Stage.PENDING:  # solved meanwhile as another entry's twin
                continue
            start = time.perf_counter()
            sched = schedule_layer(*entry.inputs, *self.cores, self.schedule_cfg, prepared=entry.prepared, stop_s=stop_s)
            self.solve_s += time.perf_counter() - start
            if sched.status == "refuted":
                self.refute(entry.key, sched)
            else:
                self.resolve(entry.key, sched)

    def prepare(self, key: Key) -> None:
        """Run a pending entry's schedule up to its MILP (prepare_layer): resolved where that proves it, else its value
        (and its twins') raised to the lower bound the mode search proves, the MILP's start kept for solve."""
        start = time.perf_counter()
        outcome = prepare_layer(*self.entries[key].inputs, *self.cores, self.schedule_cfg)
        self.solve_s += time.perf_counter() - start
        if isinstance(outcome, LayerSchedule):
            self.resolve(key, outcome)
            return
        for twin in self.raise_to(key, outcome.lower_s):
            twin.prepared = outcome

    def refute(self, key: Key, sched: LayerSchedule) -> None:
        """A pending entry's MILP stopped on its bound (status "refuted"): it and its twins stay pending, raised to it."""
        self.milps.append(sched)
        for twin in self.raise_to(key, sched.bound_s):
            twin.refuted = True

    def raise_to(self, key: Key, bound_s: float) -> list[Entry]:
        """Raise a pending entry and its pending twins to a proven lower bound (never lowered); returns those twins."""
        twins = self.pending_twins(key)
        for twin in twins:
            self._set(twin, max(self.value(twin.key), bound_s))
        return twins

    def pending_twins(self, key: Key) -> list[Entry]:
        """The entry and its twins that are still pending (they share its graph, width and direction)."""
        return [t for t in self.entries[key].twins if t.stage is Stage.PENDING]

    def resolve(self, key: Key, sched: LayerSchedule) -> None:
        """A pending entry and its twins scheduled: `sched` past the list schedule (the MILP's, or the cache's)."""
        self.n_solved += 1
        self.milps.append(sched)
        for twin in self.pending_twins(key):
            twin.stage, twin.inputs, twin.listed_s, twin.prepared = Stage.SCHEDULED, None, None, None
            twin.mode_bounded = twin.refuted = False
            self._set(twin, float(sched.makespan_s))

    def all_keys(self) -> list[Key]:
        """The open entries (UNLISTED or PENDING), in key order."""
        return sorted(k for k, e in self.entries.items() if e.stage in OPEN)

    def listed_all(self) -> LatencyTable:
        """Every entry list-scheduled: list makespans, and the schedules' lower bounds where the MILP would run."""
        self.list_schedule(self.all_keys())
        return self.values

    def solve_all(self) -> LatencyTable:
        self.solve(self.all_keys())
        return self.values

    def keys_of(self, strategy) -> set[Key]:
        """The entries a strategy's time depends on: its layer variant at each of its stages' TP widths."""
        vi = self.variants.index(LayerVariant(strategy.mbs, strategy.sp, strategy.cp, strategy.tp_comm_overlap, strategy.ep))
        widths = strategy.tp_per_stage or (strategy.tp,) * strategy.pp
        return {(vi, self.tp_values.index(int(t)), part, d) for t in set(widths) for part in self.parts for d in DIRECTIONS}

    def needed(self, result, stages) -> set[Key]:
        """The entries a feasible result's strategy depends on that are at one of these stages."""
        if result is None or not result.feasible:
            return set()
        return {k for k in self.keys_of(result.strategy) if k in self.entries and self.entries[k].stage in stages}

    def _with(self, stage: Stage, pick=lambda e: True) -> list[Entry]:
        """The entries at `stage` that `pick` keeps."""
        return [e for e in self.entries.values() if e.stage is stage and pick(e)]

    @property
    def unlisted(self) -> set[Key]:
        """The entries holding a cheap lower bound, not list-scheduled yet (a view for readers)."""
        return {e.key for e in self._with(Stage.UNLISTED)}

    @property
    def pending(self) -> dict[Key, tuple]:
        """The pending entries, with the schedule_layer arguments that solve them (a view for readers)."""
        return {e.key: e.inputs for e in self._with(Stage.PENDING)}

    @property
    def listed_s(self) -> dict[Key, float]:
        """The pending entries' list-schedule makespans (s) (a view for readers)."""
        return {e.key: e.listed_s for e in self._with(Stage.PENDING)}

    @property
    def mode_bounded(self) -> set[Key]:
        """The pending entries already raised to the mode search's bound (a view for readers)."""
        return {e.key for e in self._with(Stage.PENDING, lambda e: e.mode_bounded)}


def part_latencies(workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values,
                   variants: list[LayerVariant], inter_op_parallel: bool = True, tp_async: bool = False,
                   overlap_slowdown: float = 0.0) -> LatencyTable:
    """Scheduled latencies of every part: {part: {field: [len(variants), len(tp)]}}; NaN where a shard was not extracted."""
    return LayerScheduler(workloads, point, network, schedule_cfg, tp_values, variants, inter_op_parallel, tp_async=tp_async,
                          overlap_slowdown=overlap_slowdown).solve_all()
