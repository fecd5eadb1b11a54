"""Where a placement found on a point spends its step, from the layer schedules that timed it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.cost.latency import op_latencies
from phaze.cost.network import Network
from phaze.evaluation.latency_table import variant_graph
from phaze.evaluation.layer_scheduler import LayerScheduler
from phaze.placement import PlacementResult
from phaze.placement.breakdown import busiest_memory, busiest_time, memory_table, time_table
from phaze.placement.plan import PlanCost, evaluate_plan
from phaze.plan_space import LayerVariant
from phaze.workload.graph import Workload


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


def tensor_core_shares(point: pd.DataFrame, workloads: dict[int, Workload], network: Network, strategy) -> list[float]:
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


def explanation(layers: LayerScheduler, inputs, result: PlacementResult, point: pd.DataFrame, workloads: dict[int, Workload],
                network: Network) -> Explanation:
    """The breakdown of `result`, a placement found on `point`, from `layers`, the point's schedules (those its evaluation
    made, where it kept them: the entries its strategy reads are then scheduled already), through `inputs` (latencies ->
    the placement DP's input)."""
    layers.solve(layers.keys_of(result.strategy))
    cost = evaluate_plan(inputs(layers.values), result.strategy.to_plan())
    times = time_table(cost, tensor_core_shares(point, workloads, network, result.strategy))
    memory = memory_table(cost)
    return Explanation(times, memory, busiest_time(times), busiest_memory(memory), cost)
