"""From-scratch cost of one placement plan: the definition of the cost model every solver must meet.

A plan runs `dp` replicas of a pipeline; each pipeline rank holds `vp` model chunks (interleaved 1F1B,
Narayanan et al. 2021 §2.2; `vp` = 1: PipeDream-flush 1F1B) of contiguous parts, on `tp` x `cp`
devices (tensor x context parallel). Its layer variant (microbatch, sequence parallelism, context
parallelism, TP communication overlap) picks the per-part arrays; recompute, ZeRO and the
framework's overlaps shape each stage's load and tail (phaze.placement.dp, phaze.placement.stepcomm).

Two step models (PlacementInput.step_model):
- "phaze": max stage load x (m + s - 1) + the slowest stage's data-parallel gradient all-reduce,
  run after the flush and not overlapped; each stage all-reduces its own gradients (bytes = its
  weights on one device) over the d replicas, `devices_per_pipeline` apart.
- "timeline": max load L x (m + (p - 1) / vp - 1) + max(L, Z): the bottleneck's slots, then a last
  slot in which every rank runs its last microbatch with the step's gathers, reductions and updates
  (its tail Z); the step ends when the slowest rank's last slot ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.config_values import recompute_mode as recompute_value
from phaze.placement.dp import (
    S_B, S_F, S_OPT, S_P, S_PMAX, S_RB, S_S, S_SI, TL_FIELDS, extend_stage, inflight_microbatches, new_stage, stage_compute_s,
    stage_core_s, stage_memory_bytes, stage_recomputes,
)
from phaze.placement.inputs import PlacementInput
from phaze.placement.stepcomm import replicas_within, timeline_arrays
from phaze.placement.timing import batch_time_s, pipeline_in_one_node


def recompute_mode(value) -> str:
    """A plan's activation recompute as one of phaze.config_values.RECOMPUTE_VALUES: none; selective = the attention
    core (Korthikanti et al. 2022 §5); full = every layer (or PHAZE's stage input, train.recompute_granularity=stage).
    Booleans (NumPy's too) keep PHAZE's meaning."""
    return recompute_value(bool(value) if isinstance(value, np.bool_) else value)


@dataclass(frozen=True)
class Plan:
    """A placement: microbatch size, recompute, data-parallel degree, stages (first_part, last_part, tp),
    and the modern dimensions. With vp > 1, `stages` lists the pp x vp chunks in chain order; chunk c runs
    on pipeline rank c mod pp (Megatron's interleaved assignment)."""

    mbs: int
    recompute: str
    dp: int
    stages: tuple[tuple[int, int, int], ...]
    zero: int = 0
    sp: bool = False
    vp: int = 1
    cp: int = 1
    tp_comm_overlap: bool = False
    ep: int = 1

    def __post_init__(self):
        object.__setattr__(self, "recompute", recompute_mode(self.recompute))

    @property
    def pp(self) -> int:
        return max(1, len(self.stages) // self.vp)

    @property
    def rank_widths(self) -> tuple[int, ...]:
        """TP width of each pipeline rank."""
        return tuple(int(t) for _, _, t in self.stages[: self.pp])

    @property
    def devices_per_pipeline(self) -> int:
        return int(self.cp * sum(self.rank_widths))


@dataclass(frozen=True)
class PlanCost:
    """Per-rank loads, tails and memory of a plan, and its time per batch."""

    plan: Plan
    feasible: bool
    reason: str
    microbatches: int
    time_per_batch_s: float
    """Inf when the plan cannot be costed; the cost it would have otherwise, even if memory does not fit."""
    stage_load_s: tuple[float, ...] = ()
    """Per pipeline rank: the per-microbatch load (all its chunks)."""
    stage_compute_s: tuple[float, ...] = ()
    """Load minus TP communication, pipeline sends and exposed per-microbatch ZeRO communication."""
    stage_tp_comm_s: tuple[float, ...] = ()
    stage_p2p_s: tuple[float, ...] = ()
    stage_zero_comm_s: tuple[float, ...] = ()
    stage_memory_bytes: tuple[float, ...] = ()
    stage_param_bytes: tuple[float, ...] = ()
    stage_dp_allreduce_s: tuple[float, ...] = ()
    """PHAZE's step: each rank's gradient all-reduce after the flush."""
    stage_tail_s: tuple[float, ...] = ()
    """Timeline step: each rank's last slot (Z)."""
    bubble_slots: float = 0.0
    """(p - 1) / vp: pipeline fill and drain, in bottleneck loads."""
    stage_time_parts: tuple[dict, ...] = ()
    """Per pipeline rank, a microbatch's load by component (fwd, bwd, recompute: compute seconds; tp, p2p, zero:
    exposed communication; they sum to the load) and the step's optimizer update (opt)."""
    stage_memory_parts: tuple[dict, ...] = ()
    """Per pipeline rank, its memory by component (phaze.placement.memory.STATE_PARTS, activations of the microbatch
    in progress, the stash of the others in flight, ZeRO's unsharded buffers): they sum to stage_memory_bytes."""

    @property
    def bottleneck(self) -> int:
        return int(np.argmax(self.stage_load_s)) if self.stage_load_s else -1


def _structure_error(inp: PlacementInput, plan: Plan) -> str:
    """Why the plan cannot be costed at all, or '' when it can."""
    if not plan.stages:
        return "no stages"
    vi = inp.variant_index(plan.mbs, plan.sp, plan.cp, plan.tp_comm_overlap, plan.ep)
    if vi is None:
        return (f"microbatch size {plan.mbs} with sp={plan.sp}, cp={plan.cp}, tp_comm_overlap={plan.tp_comm_overlap}, ep={plan.ep} is not "
                f"among the costed layer variants (mbs, sp, cp, tp_comm_overlap, ep) {inp.variant_list()}")
    if plan.vp < 1 or len(plan.stages) % plan.vp:
        return f"{len(plan.stages)} chunks do not split into vp={plan.vp} chunks per pipeline rank"
    if plan.vp > 1 and len({t for _, _, t in plan.stages}) > 1:
        return f"interleaved schedule (vp={plan.vp}) with per-stage TP widths {plan.rank_widths}: Megatron's interleaving needs one width"
    expected = 0
    for first, last, t in plan.stages:
        if first != expected or last < first:
            return f"stages must be contiguous and cover parts 0..{inp.num_parts - 1}: got {plan.stages}"
        ti = inp.tp_index(t)
        if ti is None:
            return f"TP width {t} not among the costed widths {inp.tp_values.tolist()}"
        if not inp.available(vi, ti):
            return f"no costs for microbatch {plan.mbs} at TP width {t}"
        expected = last + 1
    if expected != inp.num_parts:
        return f"stages must be contiguous and cover parts 0..{inp.num_parts - 1}: got {plan.stages}"
    if plan.dp < 1:
        return f"data-parallel degree must be >= 1, got {plan.dp}"
    if plan.dp * plan.mbs > inp.global_batch:
        return f"global batch {inp.global_batch} is smaller than dp x mbs = {plan.dp} x {plan.mbs}: some replica would get no microbatch"
    if inp.step_model == "phaze" and (plan.zero or plan.cp > 1 or plan.ep > 1):
        return ("ZeRO, context and expert parallelism need train.step_model=timeline (PHAZE's step all-reduces every stage's "
                "weights over dp)")
    if plan.ep > 1 and (plan.dp % plan.ep or plan.zero > 1):
        return (f"expert parallelism ep={plan.ep} needs dp={plan.dp} divisible by it and ZeRO stage 0 or 1 (zero={plan.zero}): "
                "Megatron-Core forms EP groups from data-parallel ranks and shards experts with its distributed optimizer")
    m = microbatches_per_replica(inp.global_batch, plan.dp, plan.mbs)
    if plan.vp > 1 and m % plan.pp:
        return f"interleaved schedule: {m} microbatches per replica is not a multiple of pp={plan.pp} (Megatron-LM's rule)"
    return ""


def microbatches_per_replica(global_batch: int, dp: int, mbs: int) -> int:
    """Microbatches of the busiest replica: the batch split as evenly as possible over dp replicas
    (PHAZE's OPT baseline runs dp = 85 on a batch of 4096); the step waits for that replica."""
    return -(-global_batch // (dp * mbs))


def interleaved_inflight(rank, pp: int, vp: int, microbatches: int):
    """(Rank a scalar or an array.) Chunk-microbatches rank `rank` holds at its peak under Megatron's interleaved 1F1B: its warm-up
    forwards ((pp - rank - 1) x 2 + (vp - 1) x pp) plus the one in steady state, at most all m x vp."""
    return np.minimum((pp - rank - 1) * 2 + (vp - 1) * pp + 1, microbatches * vp)


def interleaved_chunk_inflight(rank, chunk, pp: int, vp: int, microbatches: int):
    """(Rank and chunk scalars or arrays.) Microbatches of the rank's model chunk `chunk` in flight at that peak: Megatron's schedule runs the
    warm-up forwards pp microbatches per chunk in turn (forward k runs chunk (k mod pp*vp) // pp), so the
    last rank holds one microbatch of its last chunk (with the loss) and pp of each other chunk."""
    rounds, rest = np.divmod(interleaved_inflight(rank, pp, vp, microbatches), pp * vp)
    return rounds * pp + np.minimum(pp, np.maximum(0, rest - chunk * pp))


def chain_arrays_of(inp: PlacementInput, vi: int, recompute: str) -> dict[str, np.ndarray]:
    """The per-part arrays [width, part] of one layer variant as the stage formulas read them: selective
    recompute runs the attention core's forward again in backward and keeps none of its activations."""
    arrays = {"fwd": inp.fwd_s[vi], "bwd": inp.bwd_s[vi], "prm": inp.param_bytes[vi], "sav": inp.saved_bytes[vi],
              "inb": inp.input_bytes[vi], "outb": inp.output_bytes[vi], "exp": inp.expert_param_bytes[vi]}
    if recompute == "selective":
        arrays["bwd"] = inp.bwd_s[vi] + inp.core_fwd_s[vi]
        arrays["sav"] = inp.saved_bytes[vi] - inp.core_saved_bytes[vi]
    return arrays


def plan_timeline(inp: PlacementInput, plan: Plan, prm: np.ndarray, widths: np.ndarray, same_pipeline_devices: int,
                  expert: np.ndarray | None = None) -> np.ndarray:
    """The timeline arrays of the plan's ZeRO stage, data-parallel group and framework overlaps."""
    return timeline_arrays(
        prm, widths, inp.network, zero=plan.zero, dp=plan.dp, cp=plan.cp,
        replicas=replicas_within(inp.network, plan.dp, same_pipeline_devices), expert=expert, ep=plan.ep,
        **inp.step_comm_options(),
    )


def evaluate_plan(inp: PlacementInput, plan: Plan) -> PlanCost:
    """Recompute every stage of `plan` from the per-part arrays, summing parts left to right."""
    error = _structure_error(inp, plan)
    if error:
        return PlanCost(plan, False, error, 0, float("inf"))
    vi = inp.variant_index(plan.mbs, plan.sp, plan.cp, plan.tp_comm_overlap, plan.ep)
    arrays = chain_arrays_of(inp, vi, plan.recompute)
    m = microbatches_per_replica(inp.global_batch, plan.dp, plan.mbs)
    pp, vp = plan.pp, plan.vp
    k_pipe = plan.devices_per_pipeline
    same_node = pipeline_in_one_node(k_pipe, inp.network.node_size)
    timeline = inp.timeline_mode(plan.zero)
    shards = plan.dp * plan.cp
    mult = inp.state_mult(plan.zero, shards)
    transient = inp.transient_copies(plan.zero)
    per_layer = inp.per_layer_recompute
    full = plan.recompute == "full"
    widths = inp.tp_values.astype(np.int64)
    tl = plan_timeline(inp, plan, arrays["prm"], widths, k_pipe, arrays["exp"]) if timeline and inp.reduces_gradients \
        else np.zeros((len(TL_FIELDS), len(widths), inp.num_parts))
    mem_prm = inp.memory_param_bytes(arrays["prm"], arrays["exp"], plan.zero, shards, plan.ep)
    n_chunks = len(plan.stages)
    ranks = [dict(load=0.0, tail=0.0, compute=0.0, tp=0.0, p2p=0.0, zero=0.0, param=0.0, saved=0.0, inputs=0.0,
                  rebuild=float("-inf"), pmax=0.0, first_input=0.0, activations=0.0, one_microbatch=0.0, fwd=0.0, bwd=0.0,
                  recompute=0.0, opt=0.0, param_raw=0.0, expert_raw=0.0) for _ in range(pp)]
    selective = plan.recompute == "selective"
    for idx, (first, last, t) in enumerate(plan.stages):
        rank = idx % pp
        ti = inp.tp_index(t)
        to_end = pp - rank if vp > 1 else n_chunks - idx
        rcs = bool(stage_recomputes(full, to_end, per_layer))
        st = new_stage()
        tpf = tpb = core_fwd = 0.0
        for part in range(first, last + 1):
            extend_stage(st, ti, part, arrays["fwd"], arrays["bwd"], mem_prm, arrays["sav"], arrays["inb"], tl,
                         rcs, per_layer, timeline)
            tpf += float(inp.tp_comm_fwd_s[vi, ti, part])
            tpb += float(inp.tp_comm_bwd_s[vi, ti, part])
            core_fwd += float(inp.core_fwd_s[vi, ti, part]) if selective else 0.0
            ranks[rank]["param_raw"] += float(arrays["prm"][ti, part])
            ranks[rank]["expert_raw"] += float(arrays["exp"][ti, part])
        width = np.array([t])
        recv = float(inp.boundary_s(arrays["inb"][[ti], first], vi, width, same_node)[0]) if idx > 0 else 0.0
        send = float(inp.boundary_s(arrays["outb"][[ti], last], vi, width, same_node)[0]) if idx < n_chunks - 1 else 0.0
        core, tail = stage_core_s(st, recv, rcs, per_layer, timeline)
        load = core + send
        tp_comm = tpf + tpb + tpf if rcs else tpf + tpb
        zero_comm = max(0.0, core - recv - float(stage_compute_s(st[S_F], st[S_B], rcs))) if timeline else 0.0
        r = ranks[rank]
        r["load"] += load
        r["tail"] += (tail + send) if timeline else 0.0
        r["tp"] += tp_comm
        r["p2p"] += recv + send
        r["zero"] += zero_comm
        r["compute"] += load - tp_comm - recv - send - zero_comm
        r["fwd"] += float(st[S_F]) - tpf
        r["bwd"] += float(st[S_B]) - tpb - core_fwd
        r["recompute"] += core_fwd + (float(st[S_F]) - tpf if rcs else 0.0)
        r["opt"] += float(st[S_OPT])
        if vp > 1:
            chunk_memory = (float(stage_memory_bytes(0.0, st[S_S], float(arrays["inb"][ti, first]), st[S_SI], 0.0, inflight, rcs, per_layer, mult))
                            for inflight in (interleaved_chunk_inflight(rank, idx // pp, pp, vp, m), 1))
            r["activations"] += next(chunk_memory)
            r["one_microbatch"] += next(chunk_memory)
        if r["param"] == 0.0 and r["saved"] == 0.0:
            r["first_input"] = float(arrays["inb"][ti, first])
        r["param"] += float(st[S_P])
        r["saved"] += float(st[S_S])
        r["inputs"] += float(st[S_SI])
        r["rebuild"] = max(r["rebuild"], float(st[S_RB]))
        r["pmax"] = max(r["pmax"], float(st[S_PMAX]))
        r["rcs"] = rcs
    loads, mems, ars, mem_parts = [], [], [], []
    dense_state, expert_state = inp.state_parts(plan.zero, shards), inp.state_parts(plan.zero, max(1, shards // plan.ep))
    for rank, r in enumerate(ranks):
        if vp > 1:
            rebuild = r["rebuild"] if r["rcs"] and per_layer else 0.0
            mem = r["param"] * mult + r["activations"] + rebuild
            one, held = r["one_microbatch"] + rebuild, r["activations"] + rebuild
        else:
            inflight = int(inflight_microbatches(pp - rank, m))
            mem = float(stage_memory_bytes(r["param"], r["saved"], r["first_input"], r["inputs"], r["rebuild"],
                                           inflight, r["rcs"], per_layer, mult))
            held = mem - r["param"] * mult
            one = float(stage_memory_bytes(0.0, r["saved"], r["first_input"], r["inputs"], r["rebuild"], 1, r["rcs"], per_layer, mult))
        if transient > 0.0:
            mem += transient * r["pmax"]
        dense = r["param_raw"] - r["expert_raw"]
        parts = {name: dense * dense_state[name] + r["expert_raw"] * expert_state[name] for name in dense_state}
        parts.update(activations=one, stash=held - one, zero_buffers=transient * r["pmax"])
        loads.append(r["load"])
        mems.append(mem)
        mem_parts.append(parts)
        ars.append(0.0 if timeline or not inp.reduces_gradients else float(inp.network.allreduce_s(r["param"], plan.dp, k_pipe)))
    bubble = (pp - 1) / vp
    max_load = max(loads)
    if timeline:
        tails = [r["tail"] for r in ranks]
        tpb_s = max_load * (m + bubble - 1.0) + max(max_load, max(tails))
    else:
        tails = []
        tpb_s = batch_time_s(max_load, m, pp, max(ars)) if vp == 1 else max_load * (m + bubble) + max(ars)
    reasons = []
    if plan.dp * k_pipe > inp.devices:
        reasons.append(f"needs dp x devices per pipeline = {plan.dp} x {k_pipe} = {plan.dp * k_pipe} > {inp.devices} devices")
    over = [i for i, mem in enumerate(mems) if mem > inp.hbm_bytes]
    if over:
        worst = max(over, key=lambda i: mems[i])
        reasons.append(f"stage(s) {over} exceed HBM: stage {worst} needs {mems[worst]:.4g} B > {inp.hbm_bytes:.4g} B")
    return PlanCost(
        plan=plan,
        feasible=not reasons,
        reason="; ".join(reasons),
        microbatches=m,
        time_per_batch_s=tpb_s,
        stage_load_s=tuple(loads),
        stage_compute_s=tuple(r["compute"] for r in ranks),
        stage_tp_comm_s=tuple(r["tp"] for r in ranks),
        stage_p2p_s=tuple(r["p2p"] for r in ranks),
        stage_zero_comm_s=tuple(r["zero"] for r in ranks),
        stage_memory_bytes=tuple(mems),
        stage_param_bytes=tuple(r["param"] for r in ranks),
        stage_dp_allreduce_s=tuple(ars),
        stage_tail_s=tuple(tails),
        bubble_slots=bubble,
        stage_time_parts=tuple({k: r[k] for k in ("fwd", "bwd", "recompute", "tp", "p2p", "zero", "opt")} for r in ranks),
        stage_memory_parts=tuple(mem_parts),
    )
