"""What the placement stage hands on: the chosen strategy, its time per batch, throughput, memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import Plan, PlanCost

TERA = 1e12


@dataclass(frozen=True)
class Strategy:
    """dp replicas of a pipeline of pp stages; `tp` is an int when every stage has the same width."""

    dp: int
    pp: int
    tp: int | tuple[int, ...]
    mbs: int
    recompute: bool
    stage_bounds: tuple[tuple[int, int], ...]
    """(first_part, last_part) of each stage, inclusive, in chain order."""
    devices_used: int
    tp_per_stage: tuple[int, ...] = ()

    @classmethod
    def from_plan(cls, plan: Plan) -> "Strategy":
        widths = tuple(int(t) for _, _, t in plan.stages)
        return cls(
            dp=plan.dp,
            pp=len(plan.stages),
            tp=widths[0] if len(set(widths)) == 1 else widths,
            mbs=plan.mbs,
            recompute=plan.recompute,
            stage_bounds=tuple((int(a), int(b)) for a, b, _ in plan.stages),
            devices_used=plan.dp * plan.devices_per_pipeline,
            tp_per_stage=widths,
        )

    def to_plan(self) -> Plan:
        return Plan(self.mbs, self.recompute, self.dp, tuple((a, b, t) for (a, b), t in zip(self.stage_bounds, self.tp_per_stage)))


@dataclass(frozen=True)
class PlacementResult:
    """A costed placement. Infeasible results keep the reason, per-stage memory and the breakdown
    the plan would have, with time inf and throughput 0. Per-device rates divide by devices used."""

    strategy: Strategy
    time_per_batch_s: float
    throughput_seq_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    model_tflops_per_device: float
    mfu: float
    memory_per_device_bytes: float
    """Largest over stages."""
    memory_per_stage_bytes: tuple[float, ...]
    breakdown: dict[str, float] = field(default_factory=dict)
    """compute_s, bubble_s, tp_comm_s, p2p_s, dp_allreduce_s: they sum to the time per batch."""
    stage_load_s: tuple[float, ...] = ()
    feasible: bool = True
    reason: str = ""


def breakdown_of(cost: PlanCost) -> dict[str, float]:
    """Split the time per batch: m loads of the bottleneck stage (compute, TP, p2p), the bubble, the all-reduce."""
    if not cost.stage_load_s:
        return {}
    b = cost.bottleneck
    m = cost.microbatches
    load = cost.stage_load_s[b]
    return {
        "compute_s": m * cost.stage_compute_s[b],
        "bubble_s": (len(cost.stage_load_s) - 1) * load,
        "tp_comm_s": m * cost.stage_tp_comm_s[b],
        "p2p_s": m * cost.stage_p2p_s[b],
        "dp_allreduce_s": max(cost.stage_dp_allreduce_s),
    }


def result_from_cost(inp: PlacementInput, cost: PlanCost) -> PlacementResult:
    """Throughput, MFU and memory of a costed plan."""
    strategy = Strategy.from_plan(cost.plan)
    mems = cost.stage_memory_bytes
    feasible = cost.feasible
    tpb = cost.time_per_batch_s if feasible else float("inf")
    seq_s = inp.global_batch / tpb if feasible and tpb > 0 else 0.0
    devices = max(strategy.devices_used, 1)
    tflops = inp.model_flops_per_seq * seq_s / devices / TERA
    return PlacementResult(
        strategy=strategy,
        time_per_batch_s=tpb,
        throughput_seq_s=seq_s,
        tokens_per_s=seq_s * inp.seq_len,
        tokens_per_s_per_device=seq_s * inp.seq_len / devices,
        model_tflops_per_device=tflops,
        mfu=tflops * TERA / inp.peak_flops_s if inp.peak_flops_s > 0 else 0.0,
        memory_per_device_bytes=max(mems) if mems else float("nan"),
        memory_per_stage_bytes=tuple(mems),
        breakdown=breakdown_of(cost),
        stage_load_s=cost.stage_load_s,
        feasible=feasible,
        reason=cost.reason,
    )
