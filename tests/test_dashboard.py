"""The MLflow UI on two real studies, `train=phaze` and `train=megatron` on hw=tiny_grid, logged by `python -m phaze.run`
into one SQLite store and opened in headless Chromium: the link phaze.run prints opens the classic machine-learning view;
filtered on `tags.status = 'evaluated'` and sorted by throughput_seq_s through the UI's controls, the table lists exactly
the evaluated trials of both studies, best first; the compare view of the two parent runs shows the params they differ in."""

import os
import re
from pathlib import Path

import mlflow
import pytest

from phaze.tracking.dashboard import (CHROMEDRIVER, CHROMIUM, EMPTY_COLUMNS, THROUGHPUT_COLUMN, THROUGHPUT_WIDEN_PX, TINY_MODEL, Dashboard,
                                      chromium, mlflow_ui, run_cli_studies, screenshot)
from tests.conftest import need_executable

pytestmark = [pytest.mark.services, pytest.mark.slow]

N_TRIALS = 10
# TPE on hw=tiny_grid, pruning against the second best: some trials evaluated (with throughput), the others pruned.
STUDY = [*TINY_MODEL, "hw=tiny_grid", "hw.inter_op_parallel=false", "search=tpe", f"search.n_trials={N_TRIALS}", "search.seed=3",
         "search.top_n=2"]
PRESETS = ("phaze", "megatron")
SCREENSHOTS = {"sorted": "dashboard-runs-sorted.png", "compare": "dashboard-compare-studies.png"}
# What the two presets set differently (conf/train/phaze.yaml, conf/train/megatron.yaml), as the parents log it.
DIFFERING = {"train": ["phaze", "megatron"], "train.step_model": ["phaze", "timeline"], "train.optimizer": ["sgd", "adam"]}
# The experiment's pages of the UI's GenAI view, which the classic view does not list.
GENAI_ONLY = ("Judges", "Evaluation runs", "Sessions")
PRINTED_URL = re.compile(r"then (http://127\.0\.0\.1:5000)(/#/experiments/\S+)")


def save(driver, name: str, tmp_path: Path) -> None:
    """Write the page's screenshot under tmp_path, and under $PHAZE_SAVE_SCREENSHOTS when set (docs/img)."""
    paths = [tmp_path / name] + ([Path(os.environ["PHAZE_SAVE_SCREENSHOTS"]) / name] if os.environ.get("PHAZE_SAVE_SCREENSHOTS") else [])
    screenshot(driver.get_screenshot_as_png(), *paths)
    assert all(path.stat().st_size > 0 for path in paths)


def test_mlflow_ui_ranks_the_evaluated_trials_and_compares_the_studies(tmp_path):
    need_executable(CHROMIUM, "chromium")
    need_executable(CHROMEDRIVER, "chromium-driver")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    printed = run_cli_studies({p: [*STUDY, f"train={p}"] for p in PRESETS}, uri, tmp_path)
    mlflow.set_tracking_uri(uri)
    parents = mlflow.search_runs(experiment_names=["phaze"], filter_string="tags.phaze_role = 'study'").set_index("tags.mlflow.runName")
    names = {p: f"gpt2 train={p} hw=tiny_grid cluster=phaze_1024" for p in PRESETS}
    assert sorted(parents.index) == sorted(names.values())
    experiment_id = str(parents["experiment_id"].iloc[0])
    children = mlflow.search_runs(experiment_ids=[experiment_id], filter_string="tags.phaze_role = 'trial'")
    assert len(children) == 2 * N_TRIALS and set(children["tags.status"]) == {"evaluated", "pruned"}
    evaluated = children[children["tags.status"] == "evaluated"].set_index("run_id")["metrics.throughput_seq_s"]
    assert evaluated.notna().all() and children.loc[children["tags.status"] == "pruned", "metrics.throughput_seq_s"].isna().all()
    assert set(children.loc[children["tags.status"] == "evaluated", "tags.mlflow.parentRunId"]) == set(parents["run_id"])  # both studies ranked

    with mlflow_ui(uri, tmp_path / "mlflow-ui.log") as url, chromium(tmp_path / "chromium") as driver:
        dash = Dashboard(driver, url)
        link = PRINTED_URL.search(printed["phaze"])
        assert link, printed["phaze"][-1000:]
        dash.open(url + link.group(2))  # the dashboard link phaze.run prints, on this server's port
        items = dash.sidebar_items()
        assert "Runs" in items and not set(GENAI_ONLY) & set(items), items
        dash.collapse_sidebar()
        dash.toggle_columns([*EMPTY_COLUMNS, "throughput_seq_s", "area_mm2", "train.mbs", "placement.dp", "placement.pp"])
        dash.filter_runs("tags.status = 'evaluated'")
        dash.sort_by("throughput_seq_s", descending=True)
        assert dash.matching_runs(len(evaluated)) == len(evaluated)
        listed = dash.listed_runs()
        assert sorted(listed) == sorted(evaluated.index)  # the evaluated trials of both studies, no pruned run, no parent
        shown = [float(dash.find(f"//div[@role='row'][@row-id='{run}']//div[@role='gridcell'][@col-id='{THROUGHPUT_COLUMN}']").text) for run in listed]
        assert shown == sorted(shown, reverse=True)  # best first
        assert shown == pytest.approx(evaluated[listed].tolist(), rel=1e-9)
        dash.widen_column(THROUGHPUT_COLUMN, THROUGHPUT_WIDEN_PX)
        save(driver, SCREENSHOTS["sorted"], tmp_path)

        dash.filter_runs("tags.phaze_role = 'study'")
        assert dash.matching_runs(len(PRESETS)) == len(PRESETS)
        dash.compare(list(parents["run_id"]))
        ids, params = dash.compared_params(diff_only=True)
        by_preset = [ids.index(parents.loc[names[p], "run_id"]) for p in PRESETS]
        logged = parents.filter(like="params.")
        differing = {c.removeprefix("params."): logged[c].tolist() for c in logged if logged[c].nunique(dropna=False) > 1}
        assert set(params) == set(differing) and set(DIFFERING) <= set(params)
        for name, values in DIFFERING.items():
            assert [params[name][i] for i in by_preset] == values, name
        save(driver, SCREENSHOTS["compare"], tmp_path)
        _, every = dash.compared_params(diff_only=False)
        assert every["cluster.devices"] == ["16", "16"] and every["train.global_batch"] == ["64", "64"] and "hw.area_budget_mm2" in every
