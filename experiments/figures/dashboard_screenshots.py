"""Screenshots of the MLflow UI comparing a phaze study's runs, for docs/dashboard.md.

    python -m experiments.figures.dashboard_screenshots [OUT_DIR]     # default docs/img

Runs an exhaustive, unpruned search on hw=tiny_grid (the tiny model of the search tests) into a
temporary SQLite store, starts `mlflow ui` on it, and drives headless Chromium (Debian packages
`chromium`, `chromium-driver`) as a user would, in the UI's classic machine-learning view: the runs
table with metric, hw.* and placement.* columns, a parallel-coordinates chart of hw.* against
throughput_seq_s, and a scatter of area_mm2 against throughput_seq_s. Then `python -m phaze.run` on
the same model with a two-stage expert plan, and the artifacts it logs with its best trial: the
per-stage breakdown and the pipeline timeline. The server, the browser and the page's controls are
phaze.tracking.dashboard's, which tests/test_dashboard.py drives too (the filter, the sort, the compare view).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from experiments.harness import ROOT
from phaze.config import study_spec
from phaze.tracking.dashboard import (EMPTY_COLUMNS, THROUGHPUT_COLUMN, THROUGHPUT_WIDEN_PX, TINY_MODEL, Dashboard, chromium, mlflow_ui,
                                      run_cli_studies, screenshot)

HW_PARAMS = ["hw.n_tc", "hw.tc_rows", "hw.tc_cols", "hw.n_vc", "hw.glb_mib"]
TABLE_COLUMNS = ["throughput_seq_s", "area_mm2", "mfu", *HW_PARAMS, "placement.dp", "placement.pp", "placement.tp"]
# The titles MLflow gives the new charts: a fixed one, and "<x> vs. <y>" for a scatter.
PARALLEL_TITLE = "Parallel Coordinates"
SCATTER_TITLE = "area_mm2 vs. throughput_seq_s"
# The docs' study: every point of hw=tiny_grid evaluated (66 runs), so the charts show the whole space.
DOCS_STUDY = ["hw=tiny_grid", "hw.inter_op_parallel=false", "search=grid", "search.prune=false", "search.storage=memory", "search.seed=3"]


def run_tracked_study(overrides: list[str], uri: str, cache: Path):
    """Run a phaze study logged to MLflow at `uri`; returns its tracker once the parent run is finished."""
    from phaze.config import compose_config
    from phaze.search import run_study
    from phaze.search.study import tracker_for

    cfg = compose_config(*overrides, f"cache_dir={cache}", f"schedule.cache_dir={cache / 'schedule'}", "tracking.enabled=true", f"tracking.uri={uri}")
    tracker = tracker_for(study_spec(cfg))
    out = run_study(study_spec(cfg), tracker, progress=False)
    tracker.finish({"n_trials": out.n_trials})
    return tracker


def run_cli_study(overrides: list[str], uri: str, workdir: Path) -> tuple[str, str]:
    """`python -m phaze.run` logged to `uri`: (experiment id, the study's parent run id)."""
    import mlflow

    run_cli_studies({"study": overrides}, uri, workdir)
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["phaze"], filter_string="tags.phaze_role = 'study'")
    return str(runs.experiment_id.iloc[0]), str(runs.run_id.iloc[0])


def runs_table(dash: Dashboard, experiment_id: str, parent_id: str | None = None, order_by: str | None = None) -> None:
    """The runs table with the metric and hw.* columns; the parent's group expanded, or sorted (which lists runs flat)."""
    dash.open_runs(experiment_id, order_by=order_by)
    dash.collapse_sidebar()
    if parent_id:
        dash.expand(parent_id)
    dash.toggle_columns(EMPTY_COLUMNS + TABLE_COLUMNS)
    dash.widen_column(THROUGHPUT_COLUMN, THROUGHPUT_WIDEN_PX)


def capture(url: str, experiment_id: str, out: Path, profile: Path) -> list[Path]:
    """Write the docs' three screenshots of the study under `out`; returns their paths."""
    paths = [out / "dashboard-runs-table.png", out / "dashboard-parallel-coordinates.png", out / "dashboard-scatter.png"]
    with chromium(profile) as driver:
        dash = Dashboard(driver, url)
        runs_table(dash, experiment_id, order_by="throughput_seq_s")
        screenshot(driver.get_screenshot_as_png(), paths[0])
        dash.open_runs(experiment_id, chart=True, order_by="throughput_seq_s")
        dash.show_all_runs()
        dash.add_chart("parallel", {"Params": HW_PARAMS, "Metrics": ["area_mm2", "throughput_seq_s"]})
        screenshot(dash.fullscreen(PARALLEL_TITLE).screenshot_as_png, paths[1])
        dash.close_dialog()
        dash.add_chart("scatter", {"X axis": ["area_mm2"], "Y axis": ["throughput_seq_s"]})
        screenshot(dash.fullscreen(SCATTER_TITLE).screenshot_as_png, paths[2])
    return paths


EXPLAINED_STUDY = ["hw=tiny_grid", "hw.inter_op_parallel=false", "search.placement=expert", "model.expert.pp=2", "model.expert.dp=8",
                   "model.expert.tp=1"]
"""The study whose best trial's breakdown and timeline are shown: the tiny model on a two-stage expert pipeline."""
ARTIFACTS = ("breakdown_gpt2.png", "timeline_gpt2.png")


def capture_artifacts(url: str, experiment_id: str, run_id: str, out: Path, profile: Path) -> list[Path]:
    """Screenshots of the best trial's breakdown and timeline figures as MLflow shows the parent run's artifacts."""
    paths = [out / f"dashboard-{name}" for name in ARTIFACTS]
    with chromium(profile) as driver:
        dash = Dashboard(driver, url)
        for name, path in zip(ARTIFACTS, paths):
            dash.open_artifact(experiment_id, run_id, name)
            screenshot(driver.get_screenshot_as_png(), path)
    return paths


def main() -> None:
    """Run the docs' study, serve it with `mlflow ui` and write the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "docs" / "img", help="folder of the screenshots")
    out = parser.parse_args().out
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        tracker = run_tracked_study(TINY_MODEL + DOCS_STUDY, uri, tmp / "cache")
        with mlflow_ui(uri, tmp / "mlflow-ui.log") as url:
            for path in capture(url, tracker.experiment_id, out, tmp / "chromium"):
                print(path, path.stat().st_size, "bytes")
        explained = tmp / "explained"
        explained.mkdir()
        experiment_id, run_id = run_cli_study(TINY_MODEL + EXPLAINED_STUDY, f"sqlite:///{explained / 'mlflow.db'}", explained)
        with mlflow_ui(f"sqlite:///{explained / 'mlflow.db'}", tmp / "mlflow-ui-2.log") as url:
            for path in capture_artifacts(url, experiment_id, run_id, out, tmp / "chromium-2"):
                print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
