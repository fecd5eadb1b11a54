"""From-scratch cost of one placement plan: the definition of the cost model every solver must meet.

Time per batch (1F1B) = max stage load x (m + s - 1) + the slowest stage's data-parallel gradient
all-reduce, run after the flush and not overlapped with compute. Each stage all-reduces its own
gradients (bytes = its weights on one device) over the d replicas, `devices_per_pipeline` apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.placement.dp import inflight_microbatches, stage_compute_s, stage_memory_bytes, stage_recomputes
from phaze.placement.inputs import PlacementInput
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.placement.timing import batch_time_s, pipeline_in_one_node


@dataclass(frozen=True)
class Plan:
    """A placement: microbatch size, recompute, data-parallel degree, stages (first_part, last_part, tp)."""

    mbs: int
    recompute: bool
    dp: int
    stages: tuple[tuple[int, int, int], ...]

    @property
    def devices_per_pipeline(self) -> int:
        return int(sum(t for _, _, t in self.stages))


@dataclass(frozen=True)
class PlanCost:
    """Per-stage loads, memory and all-reduce times of a plan, and its time per batch."""

    plan: Plan
    feasible: bool
    reason: str
    microbatches: int
    time_per_batch_s: float
    """Inf when the plan cannot be costed; the cost it would have otherwise, even if memory does not fit."""
    stage_load_s: tuple[float, ...] = ()
    stage_compute_s: tuple[float, ...] = ()
    """Load minus TP communication and pipeline sends."""
    stage_tp_comm_s: tuple[float, ...] = ()
    stage_p2p_s: tuple[float, ...] = ()
    stage_memory_bytes: tuple[float, ...] = ()
    stage_param_bytes: tuple[float, ...] = ()
    stage_dp_allreduce_s: tuple[float, ...] = ()

    @property
    def bottleneck(self) -> int:
        return int(np.argmax(self.stage_load_s)) if self.stage_load_s else -1


def _structure_error(inp: PlacementInput, plan: Plan) -> str:
    """Why the plan cannot be costed at all, or '' when it can."""
    if not plan.stages:
        return "no stages"
    mi = inp.mbs_index(plan.mbs)
    if mi is None:
        return f"microbatch size {plan.mbs} not among the costed sizes {inp.mbs_values.tolist()}"
    expected = 0
    for first, last, t in plan.stages:
        if first != expected or last < first:
            return f"stages must be contiguous and cover parts 0..{inp.num_parts - 1}: got {plan.stages}"
        ti = inp.tp_index(t)
        if ti is None:
            return f"TP width {t} not among the costed widths {inp.tp_values.tolist()}"
        if not inp.available(mi, ti):
            return f"no costs for microbatch {plan.mbs} at TP width {t}"
        expected = last + 1
    if expected != inp.num_parts:
        return f"stages must be contiguous and cover parts 0..{inp.num_parts - 1}: got {plan.stages}"
    if plan.dp < 1:
        return f"data-parallel degree must be >= 1, got {plan.dp}"
    if plan.dp * plan.mbs > inp.global_batch:
        return f"global batch {inp.global_batch} is smaller than dp x mbs = {plan.dp} x {plan.mbs}: some replica would get no microbatch"
    return ""


def microbatches_per_replica(global_batch: int, dp: int, mbs: int) -> int:
    """Microbatches of the busiest replica: the batch split as evenly as possible over dp replicas
    (PHAZE's OPT baseline runs dp = 85 on a batch of 4096); the step waits for that replica."""
    return -(-global_batch // (dp * mbs))


def evaluate_plan(inp: PlacementInput, plan: Plan) -> PlanCost:
    """Recompute every stage of `plan` from the per-part arrays, summing parts left to right."""
    error = _structure_error(inp, plan)
    if error:
        return PlanCost(plan, False, error, 0, float("inf"))
    mi = inp.mbs_index(plan.mbs)
    m = microbatches_per_replica(inp.global_batch, plan.dp, plan.mbs)
    s = len(plan.stages)
    k_pipe = plan.devices_per_pipeline
    same_node = pipeline_in_one_node(k_pipe, inp.network.node_size)
    mult = state_bytes_per_param_byte(inp.optimizer, inp.bytes_per_elem)
    per_layer = inp.per_layer_recompute
    loads, computes, tps, p2ps, mems, params, ars = [], [], [], [], [], [], []
    for idx, (first, last, t) in enumerate(plan.stages):
        ti = inp.tp_index(t)
        to_end = s - idx
        rcs = bool(stage_recomputes(plan.recompute, to_end, per_layer))
        fwd = bwd = prm = sav = inputs = tpf = tpb = 0.0
        rebuild_max = float("-inf")
        for part in range(first, last + 1):
            fwd += float(inp.fwd_s[mi, ti, part])
            bwd += float(inp.bwd_s[mi, ti, part])
            prm += float(inp.param_bytes[mi, ti, part])
            sav += float(inp.saved_bytes[mi, ti, part])
            inputs += float(inp.input_bytes[mi, ti, part])
            rebuild_max = max(rebuild_max, float(inp.saved_bytes[mi, ti, part]) - float(inp.input_bytes[mi, ti, part]))
            tpf += float(inp.tp_comm_fwd_s[mi, ti, part])
            tpb += float(inp.tp_comm_bwd_s[mi, ti, part])
        compute = float(stage_compute_s(fwd, bwd, rcs))
        recv = float(inp.network.p2p_s(float(inp.input_bytes[mi, ti, first]), same_node)) if idx > 0 else 0.0
        send = float(inp.network.p2p_s(float(inp.output_bytes[mi, ti, last]), same_node)) if idx < s - 1 else 0.0
        load = compute + recv + send
        tp_comm = tpf + tpb + tpf if rcs else tpf + tpb
        inflight = int(inflight_microbatches(to_end, m))
        first_input = float(inp.input_bytes[mi, ti, first])
        mem = float(stage_memory_bytes(prm, sav, first_input, inputs, rebuild_max, inflight, rcs, per_layer, mult))
        loads.append(load)
        computes.append(compute - tp_comm)
        tps.append(tp_comm)
        p2ps.append(recv + send)
        mems.append(mem)
        params.append(prm)
        ars.append(float(inp.network.allreduce_s(prm, plan.dp, k_pipe)))
    tpb_s = batch_time_s(max(loads), m, s, max(ars))
    reasons = []
    if plan.dp * k_pipe > inp.devices:
        reasons.append(f"needs dp x devices per pipeline = {plan.dp} x {k_pipe} = {plan.dp * k_pipe} > {inp.devices} devices")
    over = [i for i, mem in enumerate(mems) if mem > inp.hbm_bytes]
    if over:
        worst = max(over, key=lambda i: mems[i])
        reasons.append(
            f"stage(s) {over} exceed HBM: stage {worst} needs {mems[worst]:.4g} B > {inp.hbm_bytes:.4g} B"
        )
    return PlanCost(
        plan=plan,
        feasible=not reasons,
        reason="; ".join(reasons),
        microbatches=m,
        time_per_batch_s=tpb_s,
        stage_load_s=tuple(loads),
        stage_compute_s=tuple(computes),
        stage_tp_comm_s=tuple(tps),
        stage_p2p_s=tuple(p2ps),
        stage_memory_bytes=tuple(mems),
        stage_param_bytes=tuple(params),
        stage_dp_allreduce_s=tuple(ars),
    )
