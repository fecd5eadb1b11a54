"""One hardware point through the stages: operator graphs -> latencies -> layer schedules -> placement.

This is the only module below the entry points that knows every stage; `phaze.evaluate` and the
search call it for each accelerator point they consider.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.hardware import Accelerator
from phaze.placement import PartCosts, PlacementInput, PlacementResult, evaluate_fixed, optimize
from phaze.schedule import heuristic_schedule, schedule_layer
from phaze.validate import bools, positive_ints
from phaze.workload.extract import extract_workload
from phaze.workload.graph import PARTS, Workload

GIB = 2**30


LATENCY_FIELDS = ("fwd_s", "bwd_s", "tp_comm_fwd_s", "tp_comm_bwd_s")
DIRECTIONS = ("fwd", "bwd")


class LayerLatencies:
    """Every (mbs, TP width, part, direction) of one point, scheduled only as far as a placement needs.

    `values` is shaped as part_latencies returns ({part: {field: [len(mbs), len(tp)]}}, NaN where a
    width was not extracted). Up front each entry gets the list schedule and the schedule's lower
    bound; where they agree within schedule.mip_gap the list schedule is the scheduled makespan (as
    schedule_layer would return it), elsewhere the entry holds the lower bound and is `pending`
    until `solve` runs the ILP on it. Without inter-operator parallelism (a GPU's single stream)
    every operator runs alone on all cores: the layer takes the sum of the all-core latencies.
    """

    def __init__(self, workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values, inter_op_parallel: bool = True):
        self.mbs_values = sorted(workloads)
        self.tp_values = list(tp_values)
        self.schedule_cfg = schedule_cfg
        row = point.iloc[0]
        self.cores = (int(row.n_tc), int(row.n_vc))
        shape = (len(self.mbs_values), len(self.tp_values))
        self.values = {p: {f: np.full(shape, np.nan) for f in LATENCY_FIELDS} for p in PARTS}
        self.pending: dict[tuple, tuple] = {}
        """Entries holding a lower bound, with the schedule_layer arguments that solve them."""
        self.solve_s = 0.0
        self.n_solved = 0
        start = time.perf_counter()
        for mi, mbs in enumerate(self.mbs_values):
            for ti, t in enumerate(self.tp_values):
                if t not in workloads[mbs].graphs:
                    continue
                for part in PARTS:
                    g = workloads[mbs].part(t, part)
                    for direction, graph in zip(DIRECTIONS, (g.fwd, g.bwd)):
                        compute = graph.without_views()
                        lat = op_latencies(compute.ops, point, network, t)
                        single, parallel = lat.single_s[:, 0], lat.parallel_s[:, 0]
                        self.values[part][f"tp_comm_{direction}_s"][mi, ti] = float(single[lat.unit == "net"].sum())
                        if not inter_op_parallel:
                            self.values[part][f"{direction}_s"][mi, ti] = float(parallel.sum())
                            continue
                        listed = heuristic_schedule(compute, lat.unit, single, parallel, *self.cores)
                        if listed.mip_gap <= schedule_cfg.mip_gap:
                            self.values[part][f"{direction}_s"][mi, ti] = float(listed.makespan_s)
                        else:
                            self.values[part][f"{direction}_s"][mi, ti] = float(listed.bound_s)
                            self.pending[(mi, ti, part, direction)] = (compute, lat.unit, single, parallel)
        self.solve_s += time.perf_counter() - start

    def solve(self, keys) -> None:
        """Schedule the pending ones of these (mbs index, tp index, part, direction) entries (the ILP, cached on disk)."""
        for key in sorted(set(keys) & self.pending.keys()):
            mi, ti, part, direction = key
            start = time.perf_counter()
            sched = schedule_layer(*self.pending.pop(key), *self.cores, self.schedule_cfg)
            self.solve_s += time.perf_counter() - start
            self.n_solved += 1
            self.values[part][f"{direction}_s"][mi, ti] = float(sched.makespan_s)

    def solve_all(self) -> dict[str, dict[str, np.ndarray]]:
        self.solve(list(self.pending))
        return self.values

    def keys_of(self, strategy) -> set[tuple]:
        """The entries a strategy's time depends on: its microbatch at each of its stages' TP widths."""
        mi = self.mbs_values.index(strategy.mbs)
        widths = strategy.tp_per_stage or (strategy.tp,) * strategy.pp
        return {(mi, self.tp_values.index(int(t)), part, d) for t in set(widths) for part in PARTS for d in DIRECTIONS}

    def best(self, place):
        """place(latencies) -> PlacementResult | None, solved lazily and exactly.

        `place` must be monotone: its throughput never drops when latencies shrink (the placement
        DP, a fixed plan, or the best of several). Pending entries hold lower bounds, so
        place() on the current values bounds the fully scheduled optimum from above; once the
        placement it returns depends only on scheduled entries, it is that optimum. Otherwise its
        entries are scheduled and place() runs again: usually a handful of layers, not all of them.
        """
        while True:
            result = place(self.values)
            need = self.keys_of(result.strategy) & self.pending.keys() if result is not None and result.feasible else set()
            if not need:
                return result
            self.solve(need)


def part_latencies(workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values, inter_op_parallel: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """Scheduled latencies of every part: {part: {field: [len(mbs), len(tp)]}}; NaN where a width was not extracted."""
    return LayerLatencies(workloads, point, network, schedule_cfg, tp_values, inter_op_parallel).solve_all()


def part_costs(workloads: dict[int, Workload], tp_values, latencies: dict[str, dict[str, np.ndarray]]) -> dict[str, PartCosts]:
    """PartCosts per part: the given latencies plus the workload's bytes (parameters, activations, boundaries)."""
    mbs_values = sorted(workloads)
    costs = {}
    for part in PARTS:
        sizes = {f: np.full((len(mbs_values), len(tp_values)), np.nan) for f in ("param_bytes", "saved_bytes", "input_bytes", "output_bytes")}
        for mi, mbs in enumerate(mbs_values):
            for ti, t in enumerate(tp_values):
                if t in workloads[mbs].graphs:
                    g = workloads[mbs].part(t, part)
                    for f in sizes:
                        sizes[f][mi, ti] = getattr(g, f)
        costs[part] = PartCosts(**latencies[part], **sizes)
    return costs


def tp_values_of(workloads: dict[int, Workload]) -> list[int]:
    return sorted({t for w in workloads.values() for t in w.graphs})


def load_workloads(cfg) -> dict[int, Workload]:
    """The model's workload at every microbatch size of the training config (cached on disk)."""
    return {
        int(mbs): extract_workload(cfg.model, int(mbs), cfg.train.bytes_per_elem, cfg.train.tp_widths, cache_dir=cfg.cache_dir)
        for mbs in positive_ints(cfg.train.mbs, "train.mbs", powers_of_two=False)
    }


def placement_input(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, latencies=None) -> PlacementInput:
    """The placement DP's input for one accelerator point: every part scheduled (or the given latencies)."""
    tp_values = tp_values_of(workloads)
    if latencies is None:
        latencies = part_latencies(workloads, point, network, cfg.schedule, tp_values, bool(cfg.hw.inter_op_parallel))
    costs = part_costs(workloads, tp_values, latencies)
    any_w = next(iter(workloads.values()))
    chip = Accelerator.from_row(point.iloc[0])
    return PlacementInput.from_parts(
        costs["pre"], costs["layer"], costs["post"], any_w.num_layers,
        mbs_values=np.array(sorted(workloads)), tp_values=np.array(tp_values),
        devices=int(cfg.cluster.devices), global_batch=int(cfg.train.global_batch), seq_len=int(any_w.seq_len),
        hbm_bytes=float(point.iloc[0].hbm_gib) * GIB, network=network, optimizer=cfg.train.optimizer,
        bytes_per_elem=int(cfg.train.bytes_per_elem), recompute_granularity=cfg.train.recompute_granularity,
        model_flops_per_seq=any_w.train_matmul_flops_per_seq(any_w.tp_widths[0]),
        peak_flops_s=chip.peak_matmul_flops, part_names=("pre",) + tuple(f"layer{i}" for i in range(any_w.num_layers)) + ("post",),
    )


def placer(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network):
    """latencies -> the best placement on this point, or the fixed one when cfg.placement sets dp, pp and tp."""
    recompute = bools(cfg.train.recompute, "train.recompute")
    mbs = sorted(workloads)
    fixed = cfg.placement

    def place(latencies) -> PlacementResult | None:
        inp = placement_input(cfg, point, workloads, network, latencies)
        if fixed.dp and fixed.pp and fixed.tp:
            return evaluate_fixed(inp, dp=int(fixed.dp), pp=int(fixed.pp), tp=int(fixed.tp), mbs=mbs[0], recompute=recompute[-1])
        return optimize(inp, recompute_options=tuple(recompute), mbs_options=mbs)

    return place


def layer_latencies(cfg, point: pd.DataFrame, workloads: dict[int, Workload], network: Network) -> LayerLatencies:
    return LayerLatencies(workloads, point, network, cfg.schedule, tp_values_of(workloads), bool(cfg.hw.inter_op_parallel))


def evaluate_point(cfg, point: pd.DataFrame, workloads: dict[int, Workload] | None = None, latencies=None) -> PlacementResult | None:
    """Best placement on this point, or the fixed one when cfg.placement sets dp, pp and tp.

    Layers are scheduled only as far as the placement needs them (LayerLatencies.best); the result
    equals the one on every layer scheduled. `latencies` (as from part_latencies) replaces the
    scheduled ones: the search passes per-layer lower bounds to get an upper bound on the throughput.
    """
    workloads = workloads or load_workloads(cfg)
    network = Network.from_cfg(cfg.cluster)
    place = placer(cfg, point, workloads, network)
    if latencies is not None:
        return place(latencies)
    return layer_latencies(cfg, point, workloads, network).best(place)
