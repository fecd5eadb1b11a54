"""What a finished study shows a person: the final table, the throughput-vs-area scatter with its
Pareto front, and the optimisation history (matplotlib figures, logged to MLflow by phaze.run)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from phaze.search.evaluator import throughput_of  # noqa: E402
from phaze.search.study import StudyOutcome, trials_frame  # noqa: E402
from phaze.tracking import EVALUATED, INFEASIBLE, PRUNED  # noqa: E402


PERCENT = 100.0
"""MFU is shown in per cent of the peak (the placement's mfu is a fraction)."""
MISSING = "-"
"""What a table shows for a field a row does not have (a baseline's rank, a plan where nothing fits)."""
PLAN_OFF = {"zero": 0, "sp": False, "vp": 1, "cp": 1, "tp_comm_overlap": False, "ep": 1}
"""Plan fields at these values (off) are left out of the headline's plan; dp, pp, tp, mbs and recompute always show."""
STAGE_WORDS = {"work_bound": "by the work bound", "placement_bound": "by the placement bound",
               "schedule_bound": "by the list-schedule bound", "ilp_bound": "during their layer MILPs"}
"""The pruning stages (phaze.search.objective.Objective) in the order a trial meets them, as the summary line says them."""


def strategy_row(result) -> dict:
    """A PlacementResult as a table row (placement, throughput, MFU in %, memory); empty when nothing fits."""
    if result is None or not result.feasible:
        return {"dp": None, "pp": None, "tp": None, "mbs": None, "recompute": None, "throughput_seq_s": 0.0}
    fields = result.strategy.fields()
    fields["tp"] = fields["tp"] if isinstance(fields["tp"], int) else str(fields["tp"])
    return {**fields, "throughput_seq_s": result.throughput_seq_s, "mfu_pct": PERCENT * result.mfu,
            "memory_per_device_gib": result.memory_per_device_bytes / 2**30, "time_per_batch_s": result.time_per_batch_s}


def baseline_name(outcome: StudyOutcome) -> str:
    """The baseline chip as the table names it: the hw.baseline preset, or PHAZE's TPUv4-like point."""
    return str(outcome.evaluator.spec.config.hw.baseline or "TPUv4-like")


def ranked(outcome: StudyOutcome) -> tuple:
    """The study's top points, (index, Evaluation) best first (the best alone for an outcome without them)."""
    if outcome.top:
        return outcome.top
    return ((outcome.best_index, outcome.best),) if outcome.best is not None else ()


def top_table(outcome: StudyOutcome) -> pd.DataFrame:
    """The study's answer, ranked: per model, its top search.top_n points (rank 1 the best: chip, area, plan, throughput,
    MFU %, memory per device, speedup over the baseline chip with the expert placement), then the baseline chip with
    its specs, with the expert placement and, for a preset baseline, with its searched one (rank missing)."""
    ev = outcome.evaluator
    chip = baseline_name(outcome)
    rows = []
    for model, base in outcome.baseline.results.items():
        base_row = strategy_row(base)

        def speedup(row):
            return row["throughput_seq_s"] / base_row["throughput_seq_s"] if base_row["throughput_seq_s"] else float("nan")

        for rank, (index, evaluation) in enumerate(ranked(outcome), start=1):
            row = strategy_row(evaluation.results[model])
            rows.append({"rank": rank, "model": model, "design": "searched", **ev.arch_params(index),
                         "area_mm2": float(ev.points.area_mm2.iloc[index]), **row, "speedup_vs_baseline": speedup(row)})
        rows.append({"rank": None, "model": model, "design": f"{chip} + expert placement", **(outcome.baseline.chip or {}),
                     **base_row, "speedup_vs_baseline": 1.0})
        if outcome.baseline_searched is not None:
            row = strategy_row(outcome.baseline_searched.results[model])
            rows.append({"rank": None, "model": model, "design": f"{chip} + searched placement", **(outcome.baseline_searched.chip or {}),
                         **row, "speedup_vs_baseline": speedup(row)})
    table = pd.DataFrame(rows)
    table["rank"] = table["rank"].astype("Int64")
    return table


def final_table(outcome: StudyOutcome) -> pd.DataFrame:
    """Per model, the best point and the baseline chip side by side (top_table without the ranks below the first)."""
    table = top_table(outcome)
    best = table["rank"].isna() | table["rank"].eq(1).fillna(False)
    return table[best].drop(columns="rank").reset_index(drop=True)


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table as a person reads it: columns whose values are all whole numbers (missing ones aside) as integers,
    missing values as MISSING (print it with `to_string(na_rep=MISSING)` for the other columns)."""
    out = df.copy()
    for column in out.columns:
        values = out[column]
        whole = pd.api.types.is_integer_dtype(values) or (pd.api.types.is_float_dtype(values) and values.notna().any()
                                                           and (values.dropna() % 1 == 0).all())
        if whole:
            ints = values.astype("Int64")
            out[column] = ints.astype(object).where(ints.notna(), MISSING) if ints.isna().any() else ints
    return out


def plan_text(result) -> str:
    """A placement in one phrase: dp×pp×tp, microbatch, recompute, then the fields PLAN_OFF does not switch off."""
    if result is None or not result.feasible:
        return "nothing fits"
    fields = result.strategy.fields()
    tp = fields.pop("tp")
    words = [f"dp×pp×tp {fields.pop('dp')}×{fields.pop('pp')}×{tp}", f"mbs {fields.pop('mbs')}", f"recompute {fields.pop('recompute')}"]
    words += [f"{k} {v}" for k, v in fields.items() if PLAN_OFF.get(k, not v) != v]
    return ", ".join(words)


def chip_text(params: dict, area_mm2: float) -> str:
    """A chip in one phrase: its hw.* params as name=value, then its area."""
    return " ".join(f"{k.removeprefix('hw.')}={v}" for k, v in params.items()) + f" ({area_mm2:.1f} mm²)"


def headline(outcome: StudyOutcome) -> str:
    """The answer in one line: the best chip, its plan (per model for several), throughput, MFU in % and speedup over the
    baseline chip with the expert placement (and with its searched one, for a preset baseline)."""
    if outcome.best is None:
        return "best: no point of the space fits the model"
    ev = outcome.evaluator
    chip = chip_text(ev.arch_params(outcome.best_index), float(ev.points.area_mm2.iloc[outcome.best_index]))
    results = outcome.best.results
    if len(results) == 1:
        result = next(iter(results.values()))
        plan = f"{plan_text(result)} · {result.throughput_seq_s:.6f} seq/s · MFU {PERCENT * result.mfu:.1f}%"
    else:
        plan = "; ".join(f"{m}: {plan_text(r)}, {throughput_of(r):.6f} seq/s, MFU {PERCENT * r.mfu:.1f}%" if throughput_of(r) else f"{m}: nothing fits"
                         for m, r in results.items())
        plan += f" · mean {outcome.best.throughput_seq_s:.6f} seq/s"
    name = baseline_name(outcome)
    speedups = [(outcome.speedup, f"{name} + expert placement")]
    if outcome.baseline_searched is not None:
        speedups.append((outcome.speedup_searched, f"{name} + searched placement"))
    speedup = ", ".join(f"{x:.2f}x over {over}" if np.isfinite(x) else f"no speedup over {over}: it fits nothing" for x, over in speedups)
    return f"best: {chip} · {plan} · {speedup}"


def study_summary(outcome: StudyOutcome, name: str) -> str:
    """What the study did, in counts that add up: its trials (evaluated, pruned by stage), the trials whose layer
    MILPs ran (the evaluated ones and those pruned during them), the points passed over without a trial, its time."""
    df = trials_frame(outcome)
    n_complete = int((df.state == "COMPLETE").sum())
    repeats = sum(t.user_attrs.get("duplicate_of") is not None for t in outcome.study.get_trials(deepcopy=False))
    by_stage = df[df.state == "PRUNED"].pruned_by.value_counts()
    stages = ", ".join(f"{by_stage[s]} {STAGE_WORDS.get(s, s)}" for s in [*STAGE_WORDS, *sorted(set(by_stage.index) - set(STAGE_WORDS))] if s in by_stage)
    parts = [f"{n_complete} evaluated" + (f" ({repeats} repeating a point already evaluated)" if repeats else ""),
             f"{int(by_stage.sum())} pruned" + (f" ({stages})" if stages else "")]
    n_failed = len(df) - n_complete - int(by_stage.sum())
    if n_failed:
        parts.append(f"{n_failed} failed or found their point taken")
    n_points = len(outcome.evaluator)
    return (f"study {name}: {outcome.n_trials} trials: {', '.join(parts)}; the layer MILPs ran for {outcome.n_full_evals} of them "
            f"({outcome.n_full_evals / n_points:.3%} of {n_points} points); {outcome.n_skipped} point{'s' * (outcome.n_skipped != 1)} passed "
            f"over on their bounds without a trial; {outcome.wall_s:.0f} s")


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


OBJECTIVE_LABELS = {"throughput": "throughput (sequences/s)", "throughput_per_tdp": "throughput per TDP (sequences/s/W)"}


def by_status(outcome: StudyOutcome) -> dict[str, pd.DataFrame]:
    """The study's trials split by their child-run status: evaluated (a throughput), pruned (only a bound) and
    infeasible (evaluated, but no placement fits: no throughput)."""
    df = trials_frame(outcome).sort_values("trial")
    return {status: df[df.status == status] for status in (EVALUATED, PRUNED, INFEASIBLE)}


def mark_infeasible(ax, positions: pd.Series, label: str) -> None:
    """Ticks along the bottom edge at `positions` (x data coordinates) for trials without a throughput."""
    if len(positions):
        ax.plot(positions, np.zeros(len(positions)), "|", ms=12, c="tab:orange", transform=ax.get_xaxis_transform(), label=label)


def scatter_figure(outcome: StudyOutcome):
    """Objective against area, in two panels sharing both axes: the evaluated points with their Pareto front, and the
    pruned points' bounds (upper bounds, not throughputs), each beside the best value found; infeasible points (no
    plan fits) are ticks along the evaluated panel's bottom."""
    trials = by_status(outcome)
    done, pruned = trials[EVALUATED], trials[PRUNED]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharex=True, sharey=True)
    left.scatter(done.area_mm2, done.value, s=14, c="tab:blue", label="evaluated")
    if len(done):
        front = done[pareto_mask(done.value.to_numpy(), done.area_mm2.to_numpy())].sort_values("area_mm2")
        left.step(front.area_mm2, front.value, where="post", c="tab:red", label="Pareto front")
    mark_infeasible(left, trials[INFEASIBLE].area_mm2, "infeasible (no plan fits)")
    right.scatter(pruned.area_mm2, pruned.bound, s=10, marker="v", facecolors="none", edgecolors="gray", label="pruned: its bound")
    for ax, title in ((left, f"evaluated points ({len(done)})"), (right, f"pruned points' upper bounds ({len(pruned)})")):
        if len(done):
            ax.axhline(done.value.max(), ls="--", lw=0.8, c="tab:red", label="best evaluated")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("area (mm²)")
        ax.legend(fontsize=8)
    left.set_ylabel(OBJECTIVE_LABELS[outcome.evaluator.spec.config.search.objective])
    fig.tight_layout()
    return fig


def history_figure(outcome: StudyOutcome):
    """The evaluated trials' objective by trial number and the best so far; infeasible trials as ticks along the bottom
    (pruned trials have no value to show)."""
    trials = by_status(outcome)
    done = trials[EVALUATED]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.scatter(done.trial, done.value, s=10, label="evaluated")
    ax.step(done.trial, done.value.cummax(), where="post", c="tab:red", label="best so far")
    mark_infeasible(ax, trials[INFEASIBLE].trial, "infeasible (no plan fits)")
    ax.set_xlabel("trial")
    ax.set_ylabel(OBJECTIVE_LABELS[outcome.evaluator.spec.config.search.objective])
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
