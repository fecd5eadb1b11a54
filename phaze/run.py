"""`python -m phaze.run`: the architecture x placement search for one model on one space and cluster.

Composes the config, extracts (or loads) the workload, runs the Optuna study with exact bound
pruning (resumable: the study lives in search.storage), prints the best design against the
TPUv4-like chip with the expert placement, and logs the study to MLflow (parent run + one child per trial).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import hydra
from hydra.core.hydra_config import HydraConfig

import phaze.config  # noqa: F401  (registers the structured configs with Hydra)
from phaze.config import model_job, models_of
from phaze.config_check import checked, refusing_bad_config, run_cli
from phaze.kernels import start_warm_up
from phaze.report.breakdown import best_explanations, breakdown_figure
from phaze.report.runs import BEST_TRIAL_TAG, TOP_TABLE, best_metrics, best_trial_number, finite, fitting_throughput, top_trials_table
from phaze.report.study import MISSING, display_table, final_table, headline, history_figure, scatter_figure, study_summary
from phaze.report.study import top_table as study_top_table
from phaze.report.timeline import timeline_figure
from phaze.search.pareto import exact_fronts, fronts_figure
from phaze.search.study import run_study, tracker_for
from phaze.tracking import dashboard_url, resolve_tracking_uri
from phaze.summary import WorkloadSummary, workload_summary
from phaze.workload.extract import extract_jobs, workload_job

log = logging.getLogger("phaze")

PHAZE_WORLD = {"hw": ("phaze_grid", "tiny_grid", "tpuv4"), "cluster": ("phaze_1024",)}
"""Spaces and clusters that reproduce PHAZE's world (fixed DRAM bandwidth, flat 4 GiB/s links, ideal cores)."""


def phaze_world(cfg) -> bool:
    """Whether the job runs in PHAZE's world, whose MFUs are not today's chips'."""
    return cfg.hw.name in PHAZE_WORLD["hw"] or cfg.cluster.name in PHAZE_WORLD["cluster"]


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@refusing_bad_config
def main(cfg) -> None:
    cfg, spec = checked(cfg, HydraConfig.get().overrides.task)
    start_warm_up()
    with ThreadPoolExecutor(1, thread_name_prefix="phaze-mlflow") as background:
        tracker_soon = background.submit(tracker_for, spec)  # MLflow's parent run is created while the workloads are traced
        summaries = model_summaries(cfg)
        tracker = tracker_soon.result()
    model_metrics = {}
    for name, summary in summaries.items():
        print(summary.to_string())
        prefix = "model" if not cfg.models else f"model.{name}"
        model_metrics.update({f"{prefix}.params": float(summary.params), f"{prefix}.train_flops_per_seq": summary.train_flops_per_seq})
    if cfg.search.sampler == "pareto":
        report_fronts(cfg, spec, tracker, model_metrics)
        return
    outcome = run_study(spec, tracker)
    table = final_table(outcome)
    print(f"\n{study_summary(outcome, spec.name)}")
    print(f"\n{headline(outcome)}")
    ranked = "the best design" if len(outcome.top) == 1 else f"the {len(outcome.top)} best designs, ranked"
    print(f"\n{ranked} (search.top_n={cfg.search.top_n}), then the baseline chip:")
    print(display_table(study_top_table(outcome)).to_string(index=False, na_rep=MISSING))
    explanations = best_explanations(outcome)
    for model, e in explanations.items():
        print(f"\n{model} on the best point, per pipeline stage (s; each row sums to the time per batch):")
        print(e.time_s.round(4).to_string())
        print("memory per device (GiB):")
        print(e.memory_gib.round(3).to_string())
    if phaze_world(cfg):
        print(f"\nnote: this is PHAZE's world (hw={cfg.hw.name}, cluster={cfg.cluster.name}: DRAM at a fixed bandwidth, one flat "
              "4 GiB/s link per chip, ideal cores), and its MFUs are that world's; hw=modern_grid, the GPU presets and "
              "cluster=dgx_h100 / tpuv4_pod model today's chips (docs/realistic-world.md).")
    if tracker is not None:
        best_number = best_trial_number(outcome.study)
        tracker.finish(
            metrics={
                **model_metrics, **best_metrics(outcome.study),
                "grid_size": len(outcome.evaluator), "n_trials": outcome.n_trials, "n_pruned": outcome.n_pruned,
                "n_skipped": outcome.n_skipped, "n_full_evals": outcome.n_full_evals, "baseline.throughput_seq_s": fitting_throughput(outcome.baseline),
                "speedup_vs_baseline": finite(outcome.speedup), "speedup_vs_baseline_searched": finite(outcome.speedup_searched),
                "wall_s": outcome.wall_s,
                "logging_s_per_trial": tracker.overhead_per_trial_s,
            },
            tags={} if best_number is None else {BEST_TRIAL_TAG: best_number},
            tables={"best_strategy.json": table, TOP_TABLE: top_trials_table(outcome.study, cfg.search.top_n),
                    **{f"breakdown_time_{m}.json": e.time_s.reset_index() for m, e in explanations.items()},
                    **{f"breakdown_memory_{m}.json": e.memory_gib.reset_index() for m, e in explanations.items()}},
            figures={"throughput_vs_area.png": scatter_figure(outcome), "optimization_history.png": history_figure(outcome),
                     **{f"breakdown_{m}.png": breakdown_figure(e, f"{m} on the best point") for m, e in explanations.items()},
                     **{f"timeline_{m}.png": timeline_figure(e.cost, f"{m} on the best point: one training step") for m, e in explanations.items()}},
        )
        print(f"logged study to MLflow run {tracker.parent_id} (experiment {cfg.tracking.experiment})")
        print(f"open the dashboard: mlflow ui --backend-store-uri {resolve_tracking_uri(cfg.tracking.uri)}, then {dashboard_url(tracker.experiment_id)}")


def model_summaries(cfg) -> dict[str, WorkloadSummary]:
    """Each model's workload summary (the model as configured, at its first microbatch size), traced at once with
    the workloads its search then reads from the cache: the first trace of each process pays seconds of imports, which
    tracing the summary first, alone, left one core idle for (Llama-2-7B: 8.3 s)."""
    jobs = [model_job(one) for one in models_of(cfg)]
    summary_jobs = [workload_job(one.model, one.workload.mbs_values[0], one.train.bytes_per_elem, one.train.tp_widths, one.workload.cache_dir)
                    for one in jobs]
    search_jobs = [job for one in jobs for job in one.workload.jobs()] if cfg.cache_dir is not None else []
    traced = extract_jobs(summary_jobs + search_jobs, processes=cfg.get("workload_processes"))
    return {one.name: workload_summary(w) for one, w in zip(jobs, traced)}


def report_fronts(cfg, spec, tracker, model_metrics: dict) -> None:
    """search=pareto: print and log the exact fronts of throughput against area and against TDP."""
    ev, fronts = exact_fronts(spec)
    for front in fronts:
        print(f"\nexact front of throughput against {front.cost}: {len(front.table)} points of {len(ev)}; {front.n_evaluated} "
              f"evaluated, dismissed by their work bound {front.n_work}, placement bound {front.n_placement}, during "
              f"evaluation {front.n_ilp}; {front.wall_s:.0f} s")
        print(display_table(front.table).to_string(index=False))
    if tracker is not None:
        metrics = {**model_metrics, "grid_size": len(ev)}
        for front in fronts:
            metrics.update({f"front_{front.cost}.points": len(front.table), f"front_{front.cost}.evaluated": front.n_evaluated,
                            f"front_{front.cost}.wall_s": front.wall_s})
        tracker.finish(metrics=metrics, tables={f"pareto_{f.cost}.json": f.table for f in fronts},
                       figures={"pareto_fronts.png": fronts_figure(ev, fronts, f"{'+'.join(ev.model_names)} on {cfg.hw.name}")})
        print(f"logged the fronts to MLflow run {tracker.parent_id} (experiment {cfg.tracking.experiment})")
        print(f"open the dashboard: mlflow ui --backend-store-uri {resolve_tracking_uri(cfg.tracking.uri)}, then {dashboard_url(tracker.experiment_id)}")


if __name__ == "__main__":
    run_cli(main)
