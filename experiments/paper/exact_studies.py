"""What the paper-reproduction experiments share: PHAZE's models and headline, one exact study logged to MLflow, and how
a study's best chip and plan are written in their tables."""

from __future__ import annotations

from phaze.config import CONF_DIR, compose_config, study_spec
from phaze.search.study import run_study, tracker_for

PAPER_AVERAGE_SPEEDUP = 2.9
"""PHAZE's common architecture vs TPUv4 with expert placement, mean over its models (ICML 2024 abstract, Sec. 6)."""
EXPERIMENT = "phaze-paper"
ALL_MODELS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml") if "num_experts:" not in p.read_text())
"""PHAZE's models: the dense ones of conf/model/ (the mixtures of experts are not in the paper)."""


def search(overrides: list[str], storage: str):
    """Run (or resume) one exact study and log it to MLflow; returns its outcome."""
    cfg = compose_config(*overrides, "search=bound", f"search.storage={storage}", f"tracking.experiment={EXPERIMENT}")
    tracker = tracker_for(study_spec(cfg))
    outcome = run_study(study_spec(cfg), tracker, progress=False)
    if tracker is not None:
        tracker.finish(metrics={"best.throughput_seq_s": outcome.best.throughput_seq_s if outcome.best else None,
                                "baseline.throughput_seq_s": outcome.baseline.throughput_seq_s,
                                "speedup_vs_baseline": outcome.speedup, "n_trials": outcome.n_trials,
                                "n_full_evals": outcome.n_full_evals, "grid_size": len(outcome.evaluator), "wall_s": outcome.wall_s})
    return outcome


def plan_of(result) -> str:
    """A placement as pp/dp/tp/mbs (rc: activation recompute), or that none fits."""
    if result is None or not result.feasible:
        return "none fits"
    s = result.strategy
    return f"pp{s.pp} dp{s.dp} tp{s.tp} mbs{s.mbs}{' rc' if s.recompute != 'none' else ''}"


def arch_of(outcome) -> str:
    """The study's best chip: cores, buffer, HBM and area."""
    row = outcome.evaluator.points.iloc[outcome.best_index]
    return (f"{int(row.n_tc)}x{int(row.tc_rows)}x{int(row.tc_cols)} TC, {int(row.n_vc)}x{int(row.vc_width)} VC, "
            f"{int(row.glb_mib)} MiB, {int(row.hbm_gib)} GiB, {row.area_mm2:.0f} mm2")
