"""PHAZE's comparisons (ICML 2024, Sec. 6) for every model: TPUv4-like chip with the expert placement,
TPUv4-like chip with the searched placement, the architecture searched with the expert placement
held fixed (hardware-only search, as Spotlight-style tools do), architecture and placement searched
together, and one common architecture for all models (mean throughput, PHAZE's headline 2.9x).

    python experiments/paper_comparison.py                       # every model in conf/model/
    python experiments/paper_comparison.py --models llama2 gpt2 --overrides hw.hbm_gib=[32]

Each search is an exact branch-and-bound study (`search=bound`), resumable from its SQLite
storage; every study is logged to MLflow (experiment `phaze-paper`). Writes
experiments/results/paper_comparison.{md,csv} and a figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from phaze.config import CONF_DIR, compose_config  # noqa: E402
from phaze.search.evaluator import throughput_of  # noqa: E402
from phaze.search.study import run_study, tracker_for  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PAPER_AVERAGE_SPEEDUP = 2.9
"""PHAZE's common architecture vs TPUv4 with expert placement, mean over its models (ICML 2024 abstract, Sec. 6)."""
EXPERIMENT = "phaze-paper"
ALL_MODELS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml") if "num_experts:" not in p.read_text())
"""PHAZE's models: the dense ones of conf/model/ (the mixtures of experts are not in the paper)."""


def search(overrides: list[str], storage: str):
    """Run (or resume) one exact study and log it to MLflow; returns its outcome."""
    cfg = compose_config(*overrides, "search=bound", f"search.storage={storage}", f"tracking.experiment={EXPERIMENT}")
    tracker = tracker_for(cfg)
    outcome = run_study(cfg, tracker, progress=False)
    if tracker is not None:
        tracker.finish(metrics={"best.throughput_seq_s": outcome.best.throughput_seq_s if outcome.best else None,
                                "baseline.throughput_seq_s": outcome.baseline.throughput_seq_s,
                                "speedup_vs_baseline": outcome.speedup, "n_trials": outcome.n_trials,
                                "n_full_evals": outcome.n_full_evals, "grid_size": len(outcome.evaluator), "wall_s": outcome.wall_s})
    return outcome


def model_rows(model: str, overrides: list[str], storage: str) -> dict:
    """One model: the TPUv4-like chip (expert and searched placement), hardware-only and co-optimised search."""
    start = time.perf_counter()
    co = search([f"model={model}", *overrides], storage)
    hw_only = search([f"model={model}", *overrides, "search.placement=expert"], storage)
    tpu_searched = co.evaluator.baseline(fixed=False).result
    base = throughput_of(co.baseline.result)
    return {
        "model": model,
        "tpuv4_expert_seq_s": base,
        "tpuv4_searched_seq_s": throughput_of(tpu_searched),
        "hw_only_seq_s": hw_only.best.throughput_seq_s,
        "co_opt_seq_s": co.best.throughput_seq_s,
        "tpuv4_expert_plan": plan_of(co.baseline.result),
        "co_opt_plan": plan_of(co.best.result),
        "co_opt_arch": arch_of(co),
        "co_opt_full_evals": co.n_full_evals,
        "grid_size": len(co.evaluator),
        "wall_s": time.perf_counter() - start,
    }


def plan_of(result) -> str:
    if result is None or not result.feasible:
        return "none fits"
    s = result.strategy
    return f"pp{s.pp} dp{s.dp} tp{s.tp} mbs{s.mbs}{' rc' if s.recompute != 'none' else ''}"


def arch_of(outcome) -> str:
    row = outcome.evaluator.points.iloc[outcome.best_index]
    return (f"{int(row.n_tc)}x{int(row.tc_rows)}x{int(row.tc_cols)} TC, {int(row.n_vc)}x{int(row.vc_width)} VC, "
            f"{int(row.glb_mib)} MiB, {int(row.hbm_gib)} GiB, {row.area_mm2:.0f} mm2")


def common_rows(models: list[str], overrides: list[str], storage: str) -> tuple[dict, str]:
    """One architecture for all models (mean throughput): per model throughput on it, and its description."""
    outcome = search([f"model=[{','.join(models)}]", *overrides], storage)
    return {m: throughput_of(r) for m, r in outcome.best.results.items()}, arch_of(outcome)


def table(rows: list[dict], common: dict, common_arch: str) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["common_arch_seq_s"] = df.model.map(common)
    base = df.tpuv4_expert_seq_s
    for col in ("tpuv4_searched", "hw_only", "co_opt", "common_arch"):
        df[f"{col}_speedup"] = df[f"{col}_seq_s"] / base
    return df


def markdown(df: pd.DataFrame, common_arch: str, overrides: list[str]) -> str:
    shown = df[["model", "tpuv4_expert_seq_s", "tpuv4_searched_speedup", "hw_only_speedup", "co_opt_speedup", "common_arch_speedup",
                "tpuv4_expert_plan", "co_opt_plan", "co_opt_arch", "co_opt_full_evals", "grid_size"]]
    mean = {c: float(np.exp(np.log(df[c]).mean())) for c in ("tpuv4_searched_speedup", "hw_only_speedup", "co_opt_speedup", "common_arch_speedup")}
    arith = float(df.common_arch_speedup.mean())  # over the models of the common study (NaN elsewhere)
    lines = [
        "# PHAZE's comparisons, reproduced",
        "",
        f"Generated by `python experiments/paper_comparison.py {' '.join(sys.argv[1:])}`.",
        "Throughput in sequences/s; without overrides: 1024 chips (`cluster=phaze_1024`), global batch 4096, fp16, SGD,",
        "the whole `hw=phaze_grid` space. Speedups are over the TPUv4-like chip (8 TCs of 128x128, 2 VCs of 128, 128 MiB)",
        "with each model's expert placement. Every search is exact (branch and bound with true-bound pruning).",
        "",
        shown.to_markdown(index=False, floatfmt=".3g"),
        "",
        f"Common architecture (mean throughput): {common_arch}.",
        "",
        "Geometric mean speedups over TPUv4 + expert placement: "
        + ", ".join(f"{k.removesuffix('_speedup')} {v:.2f}x" for k, v in mean.items()) + ".",
        f"Arithmetic mean speedup of the common architecture: **{arith:.2f}x** (PHAZE reports {PAPER_AVERAGE_SPEEDUP}x); "
        f"of each model's co-optimised design: {float(df.co_opt_speedup.mean()):.2f}x.",
    ]
    return "\n".join(lines) + "\n"


def figure(df: pd.DataFrame, path: Path) -> None:
    cols = ["tpuv4_searched_speedup", "hw_only_speedup", "co_opt_speedup", "common_arch_speedup"]
    labels = ["TPUv4 + searched placement", "HW-only search (expert placement)", "co-optimised", "common architecture"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    x = np.arange(len(df))
    for k, (c, label) in enumerate(zip(cols, labels)):
        ax.bar(x + (k - 1.5) * 0.2, df[c], width=0.2, label=label)
    ax.axhline(1.0, c="k", lw=0.8)
    ax.set_xticks(x, df.model, rotation=20)
    ax.set_ylabel("speedup over TPUv4 + expert")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=ALL_MODELS, choices=ALL_MODELS)
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides for every study, e.g. hw.hbm_gib=[32]")
    parser.add_argument("--storage", default=f"sqlite:///{RESULTS / 'paper_studies.db'}")
    parser.add_argument("--name", default="paper_comparison", help="output file stem under experiments/results/")
    parser.add_argument("--common-models", nargs="+", choices=ALL_MODELS,
                        help="models of the common-architecture study (default: all of --models); the others get no common column")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    rows = []
    for model in args.models:
        rows.append(model_rows(model, args.overrides, args.storage))
        print(pd.DataFrame(rows).to_string(index=False), flush=True)
    common_models = args.common_models or args.models
    common, common_arch = common_rows(common_models, args.overrides, args.storage)
    df = table(rows, common, common_arch)
    df.to_csv(RESULTS / f"{args.name}.csv", index=False)
    (RESULTS / f"{args.name}.md").write_text(markdown(df, f"{common_arch} (models: {', '.join(common_models)})", args.overrides))
    figure(df, RESULTS / f"{args.name}.png")
    print((RESULTS / f"{args.name}.md").read_text())


if __name__ == "__main__":
    main()
