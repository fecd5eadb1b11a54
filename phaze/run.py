"""`python -m phaze.run`: the architecture x placement search for one model on one space and cluster.

Composes the config, extracts (or loads) the workload, runs the Optuna study with exact bound
pruning (resumable: the study lives in search.storage), prints the best design against the
TPUv4-like chip with the expert placement, and logs the study to MLflow (parent run + one child per trial).
"""

from __future__ import annotations

import logging

import hydra
from hydra.core.hydra_config import HydraConfig

from phaze import schema  # noqa: F401  (registers the structured configs)
from phaze.config import attach_models, models_of
from phaze.config_check import checked, run_cli
from phaze.report.study import final_table, history_figure, scatter_figure
from phaze.search.study import run_study, study_name, tracker_for
from phaze.summary import workload_summary
from phaze.config_values import positive_ints
from phaze.workload.extract import extract_workload

log = logging.getLogger("phaze")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg) -> None:
    cfg = attach_models(cfg, HydraConfig.get().overrides.task)
    checked(cfg)
    model_metrics = {}
    for one in models_of(cfg):
        mbs = positive_ints(one.train.mbs, "train.mbs")[0]
        summary = workload_summary(extract_workload(one.model, mbs, one.train.bytes_per_elem, one.train.tp_widths, cache_dir=one.cache_dir))
        print(summary.to_string())
        prefix = "model" if not cfg.models else f"model.{one.model.name}"
        model_metrics.update({f"{prefix}.params": float(summary.params), f"{prefix}.train_flops_per_seq": summary.train_flops_per_seq})
    tracker = tracker_for(cfg)
    outcome = run_study(cfg, tracker)
    table = final_table(outcome)
    print(f"\nstudy {study_name(cfg)}: {outcome.n_trials} trials, {outcome.n_pruned} pruned, "
          f"{outcome.n_skipped} passed over on their bound, {outcome.n_full_evals} fully evaluated "
          f"({outcome.n_full_evals / len(outcome.evaluator):.3%} of {len(outcome.evaluator)} points), {outcome.wall_s:.0f} s")
    print(table.to_string(index=False))
    if tracker is not None:
        tracker.log_params({"model": "+".join(m.name for m in (cfg.models or [cfg.model])), "hw": cfg.hw.name, "cluster": cfg.cluster.name,
                            "search.sampler": cfg.search.sampler, "search.objective": cfg.search.objective})
        best_area = float(outcome.evaluator.points.area_mm2.iloc[outcome.best_index]) if outcome.best is not None else None
        tracker.finish(
            metrics={
                **model_metrics,
                "best.throughput_seq_s": outcome.best.throughput_seq_s if outcome.best else None, "best.area_mm2": best_area,
                "grid_size": len(outcome.evaluator), "n_trials": outcome.n_trials, "n_pruned": outcome.n_pruned,
                "n_skipped": outcome.n_skipped, "n_full_evals": outcome.n_full_evals, "baseline.throughput_seq_s": outcome.baseline.throughput_seq_s,
                "speedup_vs_baseline": outcome.speedup, "speedup_vs_baseline_searched": outcome.speedup_searched if outcome.baseline_searched is not None else None,
                "wall_s": outcome.wall_s,
                "logging_s_per_trial": tracker.overhead_per_trial_s,
            },
            tables={"best_strategy.json": table},
            figures={"throughput_vs_area.png": scatter_figure(outcome), "optimization_history.png": history_figure(outcome)},
        )
        print(f"logged study to MLflow run {tracker.parent_id} (experiment {cfg.tracking.experiment})")


if __name__ == "__main__":
    run_cli(main)
