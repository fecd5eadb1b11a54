"""One training step of a plan as a pipeline timeline (stages x time): the forward and backward blocks of
Megatron's 1F1B or interleaved 1F1B schedule (one stage's microbatches one after the other where pp = 1), then each
stage's step tail, laid out from the same cost model that times the plan (phaze.placement.plan): every slot runs at
the bottleneck's pace, as the model charges it.

A rank's microbatch load L (its forward share F, the rest B) is split over its vp chunks; each block starts when
its rank is free and its input has arrived (the previous stage's forward, the next stage's backward). With the
microbatch count a multiple of pp (Megatron's rule for vp > 1) the last backward ends at L (m + (pp - 1) / vp),
and the step's tail (gradient reductions, parameter gathers and optimizer update beyond one slot) runs after the
flush: the figure ends at the plan's time per batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from phaze.placement.breakdown import step_tail  # noqa: E402
from phaze.placement.plan import PlanCost  # noqa: E402

COLORS = {"forward": "tab:blue", "recompute": "tab:purple", "backward": "tab:orange", "communication": "tab:gray",
          "optimizer": "tab:green"}
"""What a block's time is spent on: compute of each kind, exposed communication (TP, pipeline sends and ZeRO within
the slots; in the step's tail the gradient reductions and parameter gathers after the flush), and the optimizer update."""
ROW_IN = 0.45
"""Height of one pipeline rank's row in the figure (inches)."""
FRAME_IN = 1.5
"""Height the title, the time axis and its label take (inches), so that a one-stage plan's row keeps its height."""


@dataclass(frozen=True)
class Block:
    """One operation on one pipeline rank: forward or backward of (microbatch, chunk), or the step's tail."""

    rank: int
    kind: str
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


def rank_order(rank: int, pp: int, vp: int, m: int) -> list[tuple[str, int, int]]:
    """Megatron's order of (kind, microbatch, chunk) on one rank: warm-up forwards, one forward one backward, the
    remaining backwards (Megatron-LM schedules.py: pp - rank - 1 warm-up forwards, or (pp - rank - 1) x 2 +
    (vp - 1) x pp interleaved; forward k runs chunk (k mod pp vp) // pp on microbatch (k // (pp vp)) pp + k mod pp,
    backward k the chunks in reverse)."""
    total = m * vp
    warmup = min(total, pp - rank - 1 if vp == 1 else (pp - rank - 1) * 2 + (vp - 1) * pp)

    def op(kind: str, k: int) -> tuple[str, int, int]:
        chunk = (k % (pp * vp)) // pp
        return kind, (k // (pp * vp)) * pp + k % pp, chunk if kind == "F" else vp - 1 - chunk

    order = [op("F", k) for k in range(warmup)]
    for k in range(total - warmup):
        order += [op("F", k + warmup), op("B", k)]
    return order + [op("B", k) for k in range(total - warmup, total)]


def schedule_blocks(pp: int, vp: int, m: int, forward_s: float, backward_s: float, tails_s: list[float] | None = None) -> list[Block]:
    """Every block of the step: chunks of `forward_s / vp` and `backward_s / vp`, simulated in Megatron's order with
    their pipeline dependencies, then each rank's tail after the last backward."""
    f, b = forward_s / vp, backward_s / vp
    done: dict[tuple[str, int, int, int], float] = {}
    orders = [rank_order(r, pp, vp, m) for r in range(pp)]
    cursor, free = [0] * pp, [0.0] * pp
    blocks = []
    while any(cursor[r] < len(orders[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            if cursor[r] == len(orders[r]):
                continue
            kind, mb, chunk = orders[r][cursor[r]]
            if kind == "F":
                needs = [("F", mb, chunk, r - 1)] if r > 0 else ([("F", mb, chunk - 1, pp - 1)] if chunk > 0 else [])
            else:
                needs = [("F", mb, chunk, r)] + ([("B", mb, chunk, r + 1)] if r < pp - 1 else ([("B", mb, chunk + 1, 0)] if chunk < vp - 1 else []))
            if any(n not in done for n in needs):
                continue
            start = max([free[r]] + [done[n] for n in needs])
            end = start + (f if kind == "F" else b)
            done[(kind, mb, chunk, r)] = end
            blocks.append(Block(r, "forward" if kind == "F" else "backward", mb, chunk, start, end))
            free[r], cursor[r] = end, cursor[r] + 1
            progressed = True
        if not progressed:
            raise ValueError(f"no schedulable block: pp={pp}, vp={vp}, m={m} (the interleaved schedule needs m a multiple of pp)")
    flush = max(free)
    for r, tail in enumerate(tails_s or []):
        if tail > 0:
            blocks.append(Block(r, "tail", -1, -1, flush, flush + tail))
    return blocks


def block_segments(cost: PlanCost) -> dict[str, list[tuple[str, float]]]:
    """How the bottleneck's microbatch divides a forward and a backward block, as (what, fraction of the block): its
    exposed communication shared between them in proportion to their compute; and the step's tail: its exposed
    data-parallel communication, then the optimizer update (phaze.placement.breakdown.step_tail)."""
    p = cost.stage_time_parts[cost.bottleneck]
    comm = p["tp"] + p["p2p"] + p["zero"]
    compute = p["fwd"] + p["bwd"] + p["recompute"]
    fwd_comm = comm * p["fwd"] / compute if compute > 0 else 0.0
    forward, backward = p["fwd"] + fwd_comm, p["recompute"] + p["bwd"] + comm - fwd_comm
    return {"forward": [(k, v / forward) for k, v in (("forward", p["fwd"]), ("communication", fwd_comm)) if forward > 0],
            "backward": [(k, v / backward) for k, v in (("recompute", p["recompute"]), ("backward", p["bwd"]),
                                                       ("communication", comm - fwd_comm)) if backward > 0],
            "tail": tail_segments(step_tail(cost))}


def tail_segments(tail: dict[str, float]) -> list[tuple[str, float]]:
    """The step's tail as (what, fraction): its communication (PHAZE's all-reduce, or the data-parallel / ZeRO
    collectives left exposed), then the optimizer update."""
    total = sum(tail.values())
    optimizer = tail.get("optimizer_s", 0.0)
    return [(k, v / total) for k, v in (("communication", total - optimizer), ("optimizer", optimizer)) if total > 0]


def plan_blocks(cost: PlanCost) -> list[Block]:
    """The step of a costed plan: every rank at the bottleneck's load and forward share, then the step's tail."""
    plan = cost.plan
    p = cost.stage_time_parts[cost.bottleneck]
    load = max(cost.stage_load_s)
    comm = p["tp"] + p["p2p"] + p["zero"]
    compute = p["fwd"] + p["bwd"] + p["recompute"]
    forward = load * (p["fwd"] + comm * p["fwd"] / compute) / (compute + comm) if compute > 0 else 0.0
    tail = sum(step_tail(cost).values())
    return schedule_blocks(plan.pp, plan.vp, cost.microbatches, forward, load - forward, [tail] * plan.pp)


def timeline_figure(cost: PlanCost, title: str = ""):
    """The plan's step as a Gantt chart, one row per pipeline rank, each block divided as block_segments says."""
    blocks = plan_blocks(cost)
    segments = block_segments(cost)
    bars: dict[str, list[list[tuple[float, float]]]] = {kind: [[] for _ in range(cost.plan.pp)] for kind in COLORS}
    for b in blocks:
        start = b.start_s
        for kind, fraction in segments[b.kind]:
            width = fraction * (b.end_s - b.start_s)
            if width > 0:
                bars[kind][b.rank].append((start, width))
            start += width
    fig, ax = plt.subplots(figsize=(10, FRAME_IN + ROW_IN * cost.plan.pp))
    edge = 0.2 if len(blocks) < 400 else 0.0
    for kind, color in COLORS.items():
        for rank, spans in enumerate(bars[kind]):
            if spans:
                ax.broken_barh(spans, (rank - 0.4, 0.8), facecolors=color, edgecolor="black", linewidth=edge,
                               label=kind if not any(bars[kind][:rank]) else None)
    ax.set_yticks(range(cost.plan.pp), [f"stage {r}" for r in range(cost.plan.pp)])
    ax.invert_yaxis()
    ax.set_xlabel("time in the step (s)")
    ax.set_title(title or f"pp {cost.plan.pp}, vp {cost.plan.vp}, {cost.microbatches} microbatches: {cost.time_per_batch_s:.4g} s per step")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
