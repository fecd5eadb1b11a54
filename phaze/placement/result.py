"""What the placement stage hands on: the chosen strategy, its time per batch, throughput, memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from phaze.placement.breakdown import rank_time
from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import Plan, PlanCost

TERA = 1e12


@dataclass(frozen=True)
class Strategy:
    """dp replicas of a pipeline of pp stages; `tp` is an int when every stage has the same width.
    With vp > 1 the pipeline's pp x vp chunks are listed in chain order (chunk c on rank c mod pp)."""

    dp: int
    pp: int
    tp: int | tuple[int, ...]
    mbs: int
    recompute: str
    """none | selective | full."""
    stage_bounds: tuple[tuple[int, int], ...]
    """(first_part, last_part) of each stage (chunk), inclusive, in chain order."""
    devices_used: int
    tp_per_stage: tuple[int, ...] = ()
    zero: int = 0
    sp: bool = False
    vp: int = 1
    cp: int = 1
    tp_comm_overlap: bool = False
    ep: int = 1

    @classmethod
    def from_plan(cls, plan: Plan) -> "Strategy":
        widths = tuple(int(t) for _, _, t in plan.stages)
        return cls(
            dp=plan.dp,
            pp=plan.pp,
            tp=widths[0] if len(set(widths)) == 1 else widths,
            mbs=plan.mbs,
            recompute=plan.recompute,
            stage_bounds=tuple((int(a), int(b)) for a, b, _ in plan.stages),
            devices_used=plan.dp * plan.devices_per_pipeline,
            tp_per_stage=widths,
            zero=plan.zero,
            sp=plan.sp,
            vp=plan.vp,
            cp=plan.cp,
            tp_comm_overlap=plan.tp_comm_overlap,
            ep=plan.ep,
        )

    def to_plan(self) -> Plan:
        return Plan(self.mbs, self.recompute, self.dp, tuple((a, b, t) for (a, b), t in zip(self.stage_bounds, self.tp_per_stage)),
                    zero=self.zero, sp=self.sp, vp=self.vp, cp=self.cp, tp_comm_overlap=self.tp_comm_overlap, ep=self.ep)

    def fields(self) -> dict:
        """The plan's dimensions as flat fields (the names of placement.* and train.*)."""
        return {"dp": self.dp, "pp": self.pp, "tp": self.tp if isinstance(self.tp, int) else list(self.tp), "mbs": self.mbs,
                "recompute": self.recompute, "zero": self.zero, "sp": self.sp, "vp": self.vp, "cp": self.cp,
                "tp_comm_overlap": self.tp_comm_overlap, "ep": self.ep}


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
    """Where the time per batch goes (its values sum to it); see breakdown_of."""
    stage_load_s: tuple[float, ...] = ()
    feasible: bool = True
    reason: str = ""


def breakdown_of(cost: PlanCost) -> dict[str, float]:
    """Where the time per batch goes on the bottleneck rank (phaze.placement.breakdown.rank_time: compute,
    recompute, exposed TP / p2p / ZeRO communication over m microbatches, the bubble, the step's tail); the
    values sum to it."""
    if not cost.stage_load_s:
        return {}
    row = rank_time(cost, cost.bottleneck)
    row.pop("idle_s")
    return row


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
