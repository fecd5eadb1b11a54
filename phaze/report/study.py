"""What a finished study shows a person: the final table, the throughput-vs-area scatter with its
Pareto front, and the optimisation history (matplotlib figures, logged to MLflow by phaze.run)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from phaze.search.study import StudyOutcome, trials_frame  # noqa: E402


def strategy_row(result) -> dict:
    """A PlacementResult as a table row (placement, throughput, MFU, memory); empty when nothing fits."""
    if result is None or not result.feasible:
        return {"dp": None, "pp": None, "tp": None, "mbs": None, "recompute": None, "throughput_seq_s": 0.0}
    fields = result.strategy.fields()
    fields["tp"] = fields["tp"] if isinstance(fields["tp"], int) else str(fields["tp"])
    return {**fields, "throughput_seq_s": result.throughput_seq_s, "mfu": result.mfu,
            "memory_per_device_gib": result.memory_per_device_bytes / 2**30, "time_per_batch_s": result.time_per_batch_s}


def baseline_name(outcome: StudyOutcome) -> str:
    """The baseline chip as the table names it: the hw.baseline preset, or PHAZE's TPUv4-like point."""
    return str(outcome.evaluator.cfg.hw.get("baseline") or "TPUv4-like")


def final_table(outcome: StudyOutcome) -> pd.DataFrame:
    """Per model, the best point and the baseline chip side by side (with the expert placement, and with the
    searched one for a preset baseline): architecture, placement, throughput, area and the speedup of each
    over the baseline with the expert placement."""
    ev = outcome.evaluator
    chip = baseline_name(outcome)
    rows = []
    for model, base in outcome.baseline.results.items():
        base_row = strategy_row(base)

        def speedup(row):
            return row["throughput_seq_s"] / base_row["throughput_seq_s"] if base_row["throughput_seq_s"] else float("nan")

        if outcome.best is not None:
            row = strategy_row(outcome.best.results[model])
            rows.append({"model": model, "design": "searched", **ev.arch_params(outcome.best_index),
                         "area_mm2": float(ev.points.area_mm2.iloc[outcome.best_index]), **row, "speedup_vs_baseline": speedup(row)})
        rows.append({"model": model, "design": f"{chip} + expert placement", **base_row, "speedup_vs_baseline": 1.0})
        if outcome.baseline_searched is not None:
            row = strategy_row(outcome.baseline_searched.results[model])
            rows.append({"model": model, "design": f"{chip} + searched placement", **row, "speedup_vs_baseline": speedup(row)})
    return pd.DataFrame(rows)


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table as a person reads it: columns whose values are all whole numbers (missing ones aside) as integers."""
    out = df.copy()
    for column in out.columns:
        values = out[column]
        if pd.api.types.is_float_dtype(values) and values.notna().any() and (values.dropna() % 1 == 0).all():
            out[column] = values.astype("Int64")
    return out


def pareto_mask(throughput: np.ndarray, area: np.ndarray) -> np.ndarray:
    """Points no other point beats on both throughput (higher) and area (lower)."""
    order = np.lexsort((-throughput, area))
    mask = np.zeros(len(area), dtype=bool)
    best = -np.inf
    for i in order:
        if throughput[i] > best:
            mask[i] = True
            best = throughput[i]
    return mask


def scatter_figure(outcome: StudyOutcome):
    df = trials_frame(outcome)
    done = df[df.state == "COMPLETE"]
    fig, ax = plt.subplots(figsize=(6, 4))
    pruned = df[df.state == "PRUNED"]
    ax.scatter(pruned.area_mm2, pruned.bound, s=8, c="lightgray", label="pruned (bound)")
    ax.scatter(done.area_mm2, done.value, s=14, c="tab:blue", label="evaluated")
    if len(done):
        front = done[pareto_mask(done.value.to_numpy(), done.area_mm2.to_numpy())].sort_values("area_mm2")
        ax.step(front.area_mm2, front.value, where="post", c="tab:red", label="Pareto front")
    ax.set_xlabel("area (mm²)")
    ax.set_ylabel("objective (sequences/s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def history_figure(outcome: StudyOutcome):
    df = trials_frame(outcome).sort_values("trial")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    done = df[df.state == "COMPLETE"]
    ax.scatter(done.trial, done.value, s=10, label="evaluated")
    ax.plot(df.trial, df.value.fillna(-np.inf).cummax().replace(-np.inf, np.nan), c="tab:red", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel("objective")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
