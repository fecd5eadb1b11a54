"""Where a costed plan's training step goes: its time per pipeline rank by component (each rank's row sums to the
time per batch) and its memory per rank by component (each row sums to the rank's memory).

Time, for rank r of a plan with m microbatches and bottleneck load L (phaze.placement.plan):
- m x its microbatch's compute, split into tensor- and vector-core seconds where the caller gives each part's
  tensor-core share (else one `compute_s`), and its recomputed forward (`recompute_s`);
- m x its exposed TP communication, pipeline sends and per-microbatch ZeRO communication;
- the bubble, (p - 1) / vp slots of L (every rank waits through the fill and drain);
- the step's tail, the same for every rank: PHAZE's gradient all-reduce after the flush (`dp_allreduce_s`), or in
  the timeline the slowest last slot beyond L, the optimizer update of that rank first (`optimizer_s`), the rest
  exposed data-parallel / ZeRO communication (`dp_comm_s`);
- `idle_s`: what is left, the time a rank lighter than the bottleneck waits for it (0 on the bottleneck).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from phaze.placement.plan import PlanCost

GIB = 2**30


def step_tail(cost: PlanCost) -> dict[str, float]:
    """The step's time past the pipeline's slots, as components (the same for every rank)."""
    if not cost.stage_tail_s:
        return {"dp_allreduce_s": max(cost.stage_dp_allreduce_s)}
    load = max(cost.stage_load_s)
    slowest = int(np.argmax(cost.stage_tail_s))
    extra = max(load, cost.stage_tail_s[slowest]) - load
    optimizer = min(extra, cost.stage_time_parts[slowest]["opt"]) if cost.stage_time_parts else 0.0
    return {"dp_comm_s": extra - optimizer, "optimizer_s": optimizer}


def rank_time(cost: PlanCost, rank: int, tc_share: float | None = None) -> dict[str, float]:
    """One rank's row: components in seconds per step, summing to the time per batch (idle_s closes it)."""
    parts = cost.stage_time_parts[rank]
    m = cost.microbatches
    compute = m * (parts["fwd"] + parts["bwd"])
    row = ({"compute_tc_s": compute * tc_share, "compute_vc_s": compute * (1.0 - tc_share)} if tc_share is not None
           else {"compute_s": compute})
    row.update(recompute_s=m * parts["recompute"], tp_comm_s=m * parts["tp"], p2p_s=m * parts["p2p"], zero_comm_s=m * parts["zero"],
               bubble_s=cost.bubble_slots * max(cost.stage_load_s), **step_tail(cost))
    row["idle_s"] = max(0.0, cost.time_per_batch_s - sum(row.values()))
    return row


def time_table(cost: PlanCost, tc_shares: list[float] | None = None) -> pd.DataFrame:
    """Every pipeline rank's row (rank_time), `tc_shares` the fraction of each rank's compute on the tensor cores."""
    rows = [rank_time(cost, r, tc_shares[r] if tc_shares is not None else None) for r in range(len(cost.stage_load_s))]
    return pd.DataFrame(rows).rename_axis("stage")


def memory_table(cost: PlanCost) -> pd.DataFrame:
    """Every pipeline rank's memory by component, in GiB (rows sum to the rank's memory)."""
    return (pd.DataFrame(list(cost.stage_memory_parts)) / GIB).add_suffix("_gib").rename_axis("stage")


def busiest_time(table: pd.DataFrame) -> dict[str, float]:
    """The bottleneck rank's components (the row with the least idle time), summing to the time per batch."""
    row = table.loc[table["idle_s"].idxmin()].drop("idle_s")
    return {k: float(v) for k, v in row.items()}


def busiest_memory(table: pd.DataFrame) -> dict[str, float]:
    """The components of the rank with the most memory, summing to the memory per device."""
    row = table.loc[table.sum(axis=1).idxmax()]
    return {k: float(v) for k, v in row.items()}
