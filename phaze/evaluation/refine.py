"""Which layer of a point to schedule next, and how far, until its placement is settled or shown unable to beat a
value: the refinement policy the search (and a single point's evaluation, with nothing to beat) runs on a
LayerScheduler. It asks the placement what a makespan would change on copies of the latency table, never on it."""

from __future__ import annotations

import time

from phaze.evaluation.latency_table import Key, LatencyTable, with_makespans
from phaze.evaluation.layer_scheduler import OPEN, LayerScheduler, Stage
from phaze.schedule import LayerProblem, mode_bound_s, split_bound_s, split_ceiling_s
from phaze.schedule.cache import store_for
from phaze.schedule.layer import uses_modes

STOP_REL_TOL = 1e-5
"""Relative width at which LayerLatencies.stop_for's search ends (its answer lies at most this far above the least
makespan that settles the point): far below the 0.05-0.2% by which the headline run's MILP bounds clear the makespans
they prune at (experiments/results/milp_pruning.md)."""
STOP_STEPS = 30
"""Placement DPs stop_for may run after its two ends: false position needs a handful; 30 halvings would reach 1e-9."""


def value_now(value):
    """A value to beat given as a number (or None), or as a callable returning the latest one."""
    return value() if callable(value) else value


def excess(place, values: LatencyTable, keys, makespan_s: float, beat: float) -> float:
    """place()'s throughput over `beat` with these entries at least makespan_s (negative: it cannot beat it), on a
    copy of `values`."""
    result = place(with_makespans(values, keys, makespan_s))
    return (result.throughput_seq_s if result is not None and result.feasible else 0.0) - beat


class LayerLatencies(LayerScheduler):
    """A point's LayerScheduler, refined lazily and exactly for a placement (best): usually a handful of layers are
    scheduled, not all of them."""

    def __init__(self, workloads, point, network, schedule_cfg, tp_values, variants, inter_op_parallel: bool = True,
                 lower_bounds: LatencyTable | None = None, tp_async: bool = False, overlap_slowdown: float = 0.0):
        super().__init__(workloads, point, network, schedule_cfg, tp_values, variants, inter_op_parallel, lower_bounds, tp_async,
                         overlap_slowdown)
        self.prepares = inter_op_parallel and uses_modes(schedule_cfg)
        """Whether `best` runs a pending entry's mode search, and places again, before its MILP (schedule.mode_search)."""
        self.bounds_modes = inter_op_parallel and not self.prepares
        """Whether `best`, asked to beat a value, raises a pending entry to the mode search's bound alone before its MILP
        (schedule.mode_search off: the schedules, and so PHAZE's numbers, stay the MILP's; the bound only prunes sooner)."""

    def listed_bound(self, place):
        """place() once every entry its placement depends on is list-scheduled: an upper bound on the
        fully scheduled optimum (pending entries hold lower bounds), before any ILP runs."""
        while True:
            result = place(self.values)
            need = self.needed(result, (Stage.UNLISTED,))
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
        place() runs again. With `beat`, it stops as soon as that upper bound is at most `beat` (exact=False: the point
        cannot beat it). `beat` may be a callable, read again before every step (value_now): a value another search
        worker has found meanwhile then prunes at once.
        """
        to_beat = beat
        while True:
            beat = value_now(to_beat)
            result = place(self.values)
            if beat is not None and (result is None or not result.feasible or result.throughput_seq_s <= beat):
                return result, not self.needed(result, OPEN)
            need = self.needed(result, (Stage.UNLISTED,))
            if need:
                self.list_schedule(need)
                continue
            need = self.needed(result, (Stage.PENDING,))
            if not need:
                return result, True
            key = max(need, key=self._pending_gap)
            entry = self.entries[key]
            if self.prepares and entry.prepared is None:
                self.prepare(key)
            elif self.bounds_modes and beat is not None and not entry.mode_bounded:
                self.bound_modes(key, place, beat)
            else:
                self.solve([key], self.stop_for(place, key, beat))

    def _pending_gap(self, key: Key) -> tuple:
        """Solve first the pending entry used most (the part of most blocks) whose bound is largest."""
        return (self.uses[key[2]], self.value(key), key)

    def bound_modes(self, key: Key, place, beat: float) -> None:
        """Raise a pending entry (and its twins) to the largest makespan the mode search refutes below its list schedule,
        or to its split bound where that is larger (phaze.schedule.split); its MILP, if it still runs, is unchanged. The
        split's side MILPs run only where its ceiling (split_ceiling_s) would leave place() unable to beat `beat`."""
        start = time.perf_counter()
        entry = self.entries[key]
        problem = LayerProblem.build(*entry.inputs, *self.cores)
        bound = mode_bound_s(problem, self.value(key), entry.listed_s, store_for(self.schedule_cfg))
        ceiling = min(split_ceiling_s(problem), entry.listed_s)
        if ceiling > bound and excess(place, self.values, self._twin_keys(key), ceiling, beat) <= 0:
            bound = max(bound, split_bound_s(problem, self.schedule_cfg))
        self.solve_s += time.perf_counter() - start
        for twin in self.raise_to(key, bound):
            twin.mode_bounded = True

    def _twin_keys(self, key: Key) -> list[Key]:
        """The keys of the entry and its pending twins, whose makespans move together."""
        return [twin.key for twin in self.pending_twins(key)]

    def stop_for(self, place, key: Key, beat: float | None) -> float | None:
        """The least makespan of the pending `key` (its twins alike) from which place() cannot beat `beat`, between its
        value and its list schedule (Illinois false position on place()'s throughput, which falls as the makespan
        grows): its MILP may stop once its bound proves that much. None without `beat`, where even the list schedule
        beats it, or where a MILP stopped on this entry before (place() beats again only for a lower `beat`, or by
        round-off: the MILP then runs to its end)."""
        if beat is None or self.entries[key].refuted:
            return None
        twins = self._twin_keys(key)

        def over(makespan_s: float) -> float:
            return excess(place, self.values, twins, makespan_s, beat)

        lo, hi = min(self.value(k) for k in twins), self.entries[key].listed_s
        f_lo, f_hi = over(lo), over(hi)
        if f_hi > 0:
            return None
        kept_side = 0
        for _ in range(STOP_STEPS):
            if f_lo <= 0 or hi - lo <= STOP_REL_TOL * hi:
                break
            mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
            mid = mid if lo < mid < hi else 0.5 * (lo + hi)
            f_mid = over(mid)
            if f_mid > 0:
                lo, f_lo = mid, f_mid
                f_hi *= 0.5 if kept_side == 1 else 1.0  # Illinois: the same end kept twice counts half
                kept_side = 1
            else:
                hi, f_hi = mid, f_mid
                f_lo *= 0.5 if kept_side == -1 else 1.0
                kept_side = -1
        return hi
