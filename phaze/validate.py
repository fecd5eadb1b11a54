"""`python -m phaze.validate`: the fidelity check. Predicts every published run of a CSV with its own
placement and compares with what was measured.

    python -m phaze.validate                                   # docs/validation_runs.csv
    python -m phaze.validate validate.runs=my_runs.csv         # any file with the same columns
    python -m phaze.validate validate.markdown=docs/validation.md
    python -m phaze.validate validate.record_first_seen=true   # new rows: their prediction and the commit, first

Prints predicted vs measured tokens/s per GPU (and memory per GPU where the source publishes it), the
iteration-time ratios of paired runs, then the median and maximum absolute error and the runs the model finds
infeasible (they ran; counted at their plan's time); logs a run with the table and a predicted-vs-measured figure to
MLflow (experiment `phaze-validation`). Exits 0 when every run was evaluated; a bad runs file exits 2 before any is.
"""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from omegaconf import OmegaConf
from tqdm import tqdm

import phaze.config  # noqa: F401  (registers the structured configs with Hydra)
from phaze.kernels import start_warm_up
from phaze.config_check import check_output_file, check_tracking, refusing_bad_config, run_cli
from phaze.config_values import ConfigError
from phaze.report.validation import (
    REPO, comparison_figure, comparison_table, compare, error_summary, load_runs, ratio_table, resolve_runs_path, run_config,
)
from phaze.report.first_seen import code_commit, first_seen_line, first_seen_summary, record
from phaze.report.validation_page import infeasible_count, markdown_page


def summary_lines(summary: dict, comparisons: list) -> list[str]:
    """The error summary, then the rows the model finds infeasible (results like the others: they ran, the model says
    they would not fit)."""
    lines = [f"median absolute error {summary['median_abs_error']:.1%}, max {summary['max_abs_error']:.1%} over {summary['n_runs']} runs, "
             f"signed median {summary['median_signed_error']:+.1%}"]
    if "n_memory" in summary:
        lines.append(f"memory: median absolute error {summary['median_abs_memory_error']:.1%}, max {summary['max_abs_memory_error']:.1%} "
                     f"over {summary['n_memory']} published figures")
    infeasible = [c for c in comparisons if c.reason]
    if infeasible:
        lines.append(f"{infeasible_count(len(infeasible))}; counted above at their plan's time per batch:")
        lines += [f"  {c.run_id}: {c.reason}" for c in infeasible]
    return lines


@hydra.main(version_base="1.3", config_path="../conf", config_name="validate")
@refusing_bad_config
def main(cfg) -> None:
    path = resolve_runs_path(cfg.validate.runs)
    check_tracking(cfg.tracking)
    if cfg.validate.markdown:
        check_output_file(cfg.validate.markdown, "validate.markdown")
    if not path.exists():
        raise ConfigError(f"validate.runs={cfg.validate.runs!r}: no such file; allowed: a CSV with the columns of docs/validation_runs.csv")
    try:
        runs = load_runs(path)
    except ValueError as e:
        raise ConfigError(f"validate.runs={cfg.validate.runs!r}: {e}") from None
    commit = code_commit(REPO) if cfg.validate.record_first_seen else None  # refused before any run is evaluated
    start = time.perf_counter()
    records = runs.to_dict("records")
    configs = [run_config(run, cfg.cache_dir) for run in records]  # every run checked before any is evaluated
    start_warm_up()
    comparisons = [compare(run, run_cfg) for run, run_cfg in tqdm(list(zip(records, configs)), desc="runs", unit="run")]
    elapsed_s = time.perf_counter() - start
    table = comparison_table(comparisons, runs)
    ratios = ratio_table(comparisons, runs)
    summary = error_summary(comparisons)
    now = {c.run_id: c.ratio for c in comparisons}
    if commit is not None:
        recorded = record(path, now, commit)
        print(f"recorded the first-seen predictions of {len(recorded)} runs at commit {commit} in {path}")
        runs = load_runs(path)
    first_seen = first_seen_summary(runs, now)
    print(table.drop(columns=["source"]).to_string(index=False))
    if len(ratios):
        print("\niteration-time ratios of paired runs")
        print(ratios.to_string(index=False))
    print()
    for line in summary_lines(summary, comparisons):
        print(line)
    print(first_seen_line(first_seen).replace("**", ""))
    if cfg.validate.markdown:
        page = markdown_page(table, ratios, summary, str(cfg.validate.runs), elapsed_s, first_seen)
        out = Path(cfg.validate.markdown)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page)
        print(f"wrote {cfg.validate.markdown}")
    if cfg.tracking.enabled:
        from phaze.tracking import log_summary_run, resolve_tracking_uri

        uri = resolve_tracking_uri(cfg.tracking.uri)
        run_id = log_summary_run(
            uri, cfg.tracking.experiment, "validation", {"runs": str(cfg.validate.runs), "n_runs": len(comparisons)},
            {**summary, **first_seen, "wall_s": elapsed_s}, OmegaConf.to_yaml(cfg), tags={"phaze_role": "validation"},
            tables={"validation.csv": table, "ratios.csv": ratios}, figures={"predicted_vs_measured.png": comparison_figure(comparisons)},
        )
        print(f"logged to MLflow run {run_id} (experiment {cfg.tracking.experiment})")


if __name__ == "__main__":
    run_cli(main)
