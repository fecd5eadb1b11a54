"""One hardware point through the stages: operator graphs -> latencies -> layer schedules -> placement.

This is the only module below the entry points that knows every stage; `phaze.evaluate` and the
search call it for each accelerator point they consider.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.hardware import Accelerator
from phaze.placement import PartCosts, PlacementInput, PlacementResult, evaluate_fixed, optimize
from phaze.schedule import schedule_layer
from phaze.validate import bools, positive_ints
from phaze.workload.extract import extract_workload
from phaze.workload.graph import PARTS, OpGraph, Workload

GIB = 2**30


@dataclass(frozen=True)
class DirectionCost:
    """A part's scheduled latency in one direction, and the share of it spent in TP collectives."""

    latency_s: float
    tp_comm_s: float
    solve_s: float


def schedule_direction(graph: OpGraph, point: pd.DataFrame, network: Network, tp: int, schedule_cfg, inter_op_parallel: bool = True) -> DirectionCost:
    """Cost every operator of one direction on the point and schedule them on its cores.

    Without inter-operator parallelism (a GPU's single stream) every operator runs alone on all
    cores, so the layer takes the sum of the all-core latencies and no ILP is needed.
    """
    compute = graph.without_views()
    lat = op_latencies(compute.ops, point, network, tp)
    single, parallel = lat.single_s[:, 0], lat.parallel_s[:, 0]
    tp_comm_s = float(single[lat.unit == "net"].sum())
    if not inter_op_parallel:
        return DirectionCost(float(parallel.sum()), tp_comm_s, 0.0)
    row = point.iloc[0]
    sched = schedule_layer(compute, lat.unit, single, parallel, int(row.n_tc), int(row.n_vc), schedule_cfg)
    return DirectionCost(float(sched.makespan_s), tp_comm_s, float(sched.solve_s))


LATENCY_FIELDS = ("fwd_s", "bwd_s", "tp_comm_fwd_s", "tp_comm_bwd_s")


def part_latencies(workloads: dict[int, Workload], point: pd.DataFrame, network: Network, schedule_cfg, tp_values, inter_op_parallel: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """Scheduled latencies per part: {part: {field: [len(mbs), len(tp)]}}; NaN where a width was not extracted."""
    mbs_values = sorted(workloads)
    out = {p: {f: np.full((len(mbs_values), len(tp_values)), np.nan) for f in LATENCY_FIELDS} for p in PARTS}
    for mi, mbs in enumerate(mbs_values):
        w = workloads[mbs]
        for ti, t in enumerate(tp_values):
            if t not in w.graphs:
                continue
            for part in PARTS:
                g = w.part(t, part)
                fwd = schedule_direction(g.fwd, point, network, t, schedule_cfg, inter_op_parallel)
                bwd = schedule_direction(g.bwd, point, network, t, schedule_cfg, inter_op_parallel)
                a = out[part]
                a["fwd_s"][mi, ti], a["bwd_s"][mi, ti] = fwd.latency_s, bwd.latency_s
                a["tp_comm_fwd_s"][mi, ti], a["tp_comm_bwd_s"][mi, ti] = fwd.tp_comm_s, bwd.tp_comm_s
    return out


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


def evaluate_point(cfg, point: pd.DataFrame, workloads: dict[int, Workload] | None = None, latencies=None) -> PlacementResult | None:
    """Best placement on this point, or the fixed one when cfg.placement sets dp, pp and tp.

    `latencies` (as from part_latencies) replaces the scheduled ones: the search passes per-layer
    lower bounds to get an upper bound on the throughput.
    """
    workloads = workloads or load_workloads(cfg)
    network = Network.from_cfg(cfg.cluster)
    inp = placement_input(cfg, point, workloads, network, latencies)
    recompute = bools(cfg.train.recompute, "train.recompute")
    mbs = sorted(workloads)
    fixed = cfg.placement
    if fixed.dp and fixed.pp and fixed.tp:
        return evaluate_fixed(inp, dp=int(fixed.dp), pp=int(fixed.pp), tp=int(fixed.tp), mbs=mbs[0], recompute=recompute[-1])
    return optimize(inp, recompute_options=tuple(recompute), mbs_options=mbs)
