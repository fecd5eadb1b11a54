"""The chip and plan a mixture of experts wants, against the dense optimum of similar active size.

    python -m experiments.paper.moe_vs_dense                                   # train=phaze and train=megatron
    python -m experiments.paper.moe_vs_dense --trains megatron --overrides hw.area_budget_mm2=600

For each training preset, runs the exact study (`search=bound`) of `model=mixtral_8x7b` and of
`model=llama2` (Llama-2-7B: the dense model nearest Mixtral's 12.9 B active parameters among ours) on
the same architecture space and area budget (`hw=phaze_grid`, `cluster=phaze_1024` unless overridden),
both with FlashAttention (`train.attention=flash`: Llama-2's own is PHAZE's eager attention, whose s^2
scores move through HBM; the comparison is then about the experts alone),
and appends to experiments/results/moe_vs_dense.{md,json}: each optimum's chip (cores, on-chip buffer, HBM), its
plan, throughput (sequences and tokens per second), MFU on active FLOPs, memory per chip, the speedup
over the TPUv4-like chip, and the search's wall time (issue 13: the Mixtral study under 15 minutes).
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone

import pandas as pd

from experiments.harness import append_result, command_line
from phaze.config import compose_config, study_spec
from phaze.hardware.space import AXES
from phaze.search.study import run_study
from phaze.workload.families import count_params

MODELS = ("mixtral_8x7b", "llama2")
GIB = 2**30


def optimum(model: str, train: str, overrides: list[str]) -> dict:
    """One exact study: the best point's chip and plan, and how long the search took."""
    cfg = compose_config(f"model={model}", f"train={train}", "hw=phaze_grid", "train.attention=flash", *overrides, "search=bound",
                         "search.storage=memory", "tracking.enabled=false")
    start = time.perf_counter()
    out = run_study(study_spec(cfg), progress=False)
    wall_s = time.perf_counter() - start
    total, active = count_params(cfg.model)
    row = out.evaluator.points.iloc[out.best_index]
    result = out.best.result
    plan = result.strategy.fields()
    return {
        "model": model, "train": train, "params (B)": total / 1e9, "active (B)": active / 1e9,
        **{a: int(row[a]) for a in AXES}, "area mm2": float(row.area_mm2), "tdp W": float(row.tdp_w),
        "plan": " ".join(f"{k}={v}" for k, v in plan.items() if k in ("dp", "pp", "tp", "ep", "mbs", "recompute", "zero", "sp", "cp", "vp")),
        "seq/s": result.throughput_seq_s, "tokens/s/chip": result.tokens_per_s_per_device, "MFU": result.mfu,
        "GiB/chip": result.memory_per_device_bytes / GIB, "vs TPUv4-like": out.speedup, "trials": out.n_trials,
        "full evals": out.n_full_evals, "search s": wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trains", nargs="+", default=["phaze", "megatron"])
    parser.add_argument("--overrides", nargs="*", default=[])
    args = parser.parse_args()
    rows = [optimum(model, train, args.overrides) for train in args.trains for model in MODELS]
    table = pd.DataFrame(rows)
    text = "\n".join([
        f"## {' '.join(args.overrides) or 'hw=phaze_grid cluster=phaze_1024'} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
        f"`{command_line()}`", "",
        table.to_markdown(index=False, floatfmt=".4g"), "",
    ])
    append_result("moe_vs_dense", "Mixture of experts against dense: the optimal chip and plan", text, trains=args.trains,
                  overrides=args.overrides, table=table)


if __name__ == "__main__":
    main()
