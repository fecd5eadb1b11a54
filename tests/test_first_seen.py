"""First-seen predictions: written once per new run with the commit, never overwritten, refused outside a clean
checkout, and summarised against the same runs' errors now."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from phaze.config_values import ConfigError
from phaze.report.first_seen import IN_SAMPLE, code_commit, first_seen_line, first_seen_summary, record
from phaze.report.validation import RUNS_CSV, load_runs


def runs_file(tmp_path):
    """Four runs: a measured one, one already recorded, one with a memory figure only, one the model was built against."""
    frame = pd.DataFrame({"id": ["new", "seen", "memory_only", "built_on"], "measured_tokens_per_s_per_gpu": ["100", "200", "", "300"],
                          "first_seen_ratio": ["", "1.2500", "", ""], "first_seen_commit": ["", "abc1234", "", IN_SAMPLE]})
    path = tmp_path / "runs.csv"
    frame.to_csv(path, index=False)
    return path


def test_record_fills_only_new_measured_runs_and_keeps_recorded_ones(tmp_path):
    path = runs_file(tmp_path)
    assert record(path, {"new": 1.1234567, "seen": 0.9, "memory_only": float("nan"), "built_on": 1.3}, "def5678") == ["new"]
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert frame.first_seen_ratio.tolist() == ["1.1235", "1.2500", "", ""]
    assert frame.first_seen_commit.tolist() == ["def5678", "abc1234", "", IN_SAMPLE]
    assert record(path, {"new": 2.0, "seen": 2.0}, "0000000") == []  # recorded once: a later model never rewrites it


def test_record_adds_the_columns_to_a_runs_file_without_them(tmp_path):
    path = tmp_path / "runs.csv"
    pd.DataFrame({"id": ["a"], "measured_tokens_per_s_per_gpu": ["10"]}).to_csv(path, index=False)
    assert record(path, {"a": 0.95}, "abc") == ["a"]
    assert pd.read_csv(path, dtype=str).iloc[0].tolist() == ["a", "10", "0.9500", "abc"]


def test_summary_of_first_seen_runs_then_and_now(tmp_path):
    frame = pd.DataFrame({"id": ["a", "b", "c", "d"], "first_seen_ratio": ["1.30", "0.80", "1.10", ""]})
    summary = first_seen_summary(frame, {"a": 1.05, "b": 0.97, "c": 1.01, "d": 2.0})
    # then: errors 0.30, 0.20, 0.10 (median 0.20), signed +0.30, -0.20, +0.10 (median +0.10); now 0.05, 0.03, 0.01.
    assert summary["n_first_seen"] == 3
    assert summary["median_abs_first_seen_error"] == pytest.approx(0.20)
    assert summary["median_signed_first_seen_error"] == pytest.approx(0.10)
    assert summary["median_abs_error_now_of_first_seen"] == pytest.approx(0.03)
    assert first_seen_line(summary) == ("**First seen** (3 runs, each predicted before any change it motivated): median absolute "
                                        "error 20.0% then (signed median +10.0%), 3.0% now (target: under 10% then).")
    assert first_seen_summary(frame.iloc[3:], {"d": 2.0}) == {"n_first_seen": 0}


def test_the_project_runs_file_carries_the_columns_and_marks_the_runs_it_was_built_on():
    """docs/validation_runs.csv has the columns; the 58 runs with a measured throughput the model was built against are
    marked in-sample and carry no first-seen prediction; every run added since carries one (recorded before anything
    it motivates)."""
    header = RUNS_CSV.read_text().splitlines()[0].split(",")
    assert header[-2:] == ["first_seen_ratio", "first_seen_commit"]
    runs = load_runs()
    measured = runs[runs.measured_tokens_per_s_per_gpu != ""]
    in_sample = measured[measured.first_seen_commit == IN_SAMPLE]
    assert len(in_sample) == 58 and (in_sample.first_seen_ratio == "").all()
    added = measured[measured.first_seen_commit != IN_SAMPLE]
    assert (added.first_seen_ratio != "").all() and (added.first_seen_commit.str.fullmatch("[0-9a-f]{7,}")).all()


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_commit_is_refused_outside_a_checkout_or_with_the_code_changed(tmp_path):
    with pytest.raises(ConfigError, match="validate.record_first_seen=true: needs the git checkout"):
        code_commit(tmp_path)
    git(tmp_path, "init", "-q")
    (tmp_path / "phaze").mkdir()
    (tmp_path / "phaze" / "model.py").write_text("A = 1\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "model")
    commit = code_commit(tmp_path)
    assert len(commit) >= 7
    (tmp_path / "notes.txt").write_text("not code\n")  # outside phaze/ and conf/: the prediction is still the commit's
    assert code_commit(tmp_path) == commit
    (tmp_path / "phaze" / "model.py").write_text("A = 2\n")
    with pytest.raises(ConfigError, match="phaze, conf differ from the commit"):
        code_commit(tmp_path)
