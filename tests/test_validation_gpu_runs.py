"""Predicted vs measured throughput of published GPU runs: the median error stays under 20%."""

import pytest

from phaze.report.validation import SELECTED, compare, load_runs, median_abs_error, run_overrides

pytestmark = pytest.mark.slow

MEDIAN_ABS_ERROR_TARGET = 0.20
"""Issue 5: median absolute error of predicted/measured throughput under 20%."""


@pytest.fixture(scope="module")
def comparisons(tmp_path_factory):
    runs = {r["id"]: r for r in load_runs()}
    cache = str(tmp_path_factory.mktemp("validation-cache"))
    return [compare(runs[rid], cache_dir=cache) for rid in SELECTED]


def test_at_least_five_runs_are_compared(comparisons):
    assert len(comparisons) >= 5
    assert {c.run_id.split("_")[0] for c in comparisons} >= {"nar21", "kor22"}


def test_median_absolute_error_under_target(comparisons):
    errors = {c.run_id: round(c.ratio, 3) for c in comparisons}
    assert median_abs_error(comparisons) < MEDIAN_ABS_ERROR_TARGET, errors


def test_published_placements_fit_memory(comparisons):
    assert all(c.memory_gib <= 80.0 for c in comparisons)


def test_overrides_describe_the_run():
    run = next(r for r in load_runs() if r["id"] == "nar21_t1_18.4B")
    overrides = run_overrides(run)
    assert "hw=a100" in overrides and "cluster=dgx_a100" in overrides
    assert {"placement.dp=32", "placement.pp=1", "placement.tp=8", "train.mbs=8", "train.recompute=true", "model.attention=eager"} <= set(overrides)
