"""The MLflow UI shows a real study's runs: `mlflow ui` on the test's SQLite store, opened in headless Chromium."""

import math
import os
from pathlib import Path

import mlflow
import pytest

from experiments.dashboard_screenshots import CHROMEDRIVER, CHROMIUM, Dashboard, chromium, mlflow_ui, run_tracked_study, runs_table, screenshot
from tests.conftest import need_executable
from tests.test_search_study import TINY_MODEL

pytestmark = [pytest.mark.services, pytest.mark.slow]

N_TRIALS = 8
# TPE on hw=tiny_grid with pruning: a few trials, some complete (with throughput), some pruned (without).
STUDY = ["hw=tiny_grid", "hw.inter_op_parallel=false", "search=tpe", f"search.n_trials={N_TRIALS}", "search.storage=memory", "search.seed=3"]
SCREENSHOT = "dashboard-runs-grouped.png"
# MLflow's table prints a missing metric as a dash.
MISSING = "-"


def cell_text(dash: Dashboard, run_id: str, column: str, inner: str = "") -> str:
    """The text of `column` (of its `inner` element, e.g. the run link) in the table row of run `run_id`."""
    return dash.find(f"//div[@role='row'][@row-id='{run_id}']//div[@role='gridcell'][@col-id='{column}']{inner}").text.strip()


def test_mlflow_ui_lists_the_trials_with_their_throughput(tmp_path):
    need_executable(CHROMIUM, "chromium")
    need_executable(CHROMEDRIVER, "chromium-driver")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = run_tracked_study(TINY_MODEL + STUDY, uri, tmp_path / "cache")
    mlflow.set_tracking_uri(uri)
    trials = mlflow.search_runs(experiment_ids=[tracker.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}'")
    assert len(trials) == N_TRIALS
    throughput = trials.set_index("run_id")["metrics.throughput_seq_s"]
    assert throughput.notna().any() and throughput.isna().any()  # complete and pruned trials both shown

    with mlflow_ui(uri, tmp_path / "mlflow-ui.log") as url, chromium(tmp_path / "chromium") as driver:
        dash = Dashboard(driver, url)
        runs_table(dash, tracker.experiment_id, parent_id=tracker.parent_id)
        header = dash.find("//*[@role='columnheader'][@col-id='metrics.`throughput_seq_s`']")
        assert header.text.strip() == "throughput_seq_s"
        for run_id, name in trials.set_index("run_id")["tags.mlflow.runName"].items():
            assert cell_text(dash, run_id, "attributes.`Run Name`", "//a") == name
            shown = cell_text(dash, run_id, "metrics.`throughput_seq_s`")
            if math.isnan(throughput[run_id]):
                assert shown == MISSING, name
            else:
                assert float(shown) == pytest.approx(throughput[run_id], rel=1e-9), name
        paths = [tmp_path / SCREENSHOT]
        if os.environ.get("PHAZE_SAVE_SCREENSHOTS"):
            paths.append(Path(os.environ["PHAZE_SAVE_SCREENSHOTS"]) / SCREENSHOT)
        screenshot(driver.get_screenshot_as_png(), *paths)
    assert all(path.stat().st_size > 0 for path in paths)
