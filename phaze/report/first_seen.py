"""First-seen predictions: each published run's prediction recorded, with the commit that made it, before any change
it motivates, so that the validation page reports how the model does on runs it had never seen beside how it does
on them now (a model fitted to its runs is right on them now, not when it first saw them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from phaze.config_values import ConfigError

FIRST_SEEN_COLUMNS = ("first_seen_ratio", "first_seen_commit")
"""Runs-file columns: predicted / measured tokens/s per GPU when the run was first predicted, and the commit."""
CODE_PATHS = ("phaze", "conf")
"""What makes a prediction: a first-seen one is recorded only where these are as the commit has them."""
RATIO_DIGITS = 4
FIELD = "validate.record_first_seen"
IN_SAMPLE = "in-sample"
"""`first_seen_commit` of a run the model was built against: it never gets a first-seen prediction (the 58 runs of
the runs file before first-seen bookkeeping began)."""


def code_commit(repo: Path) -> str:
    """The commit the prediction is made at (short hash); ConfigError naming validate.record_first_seen where `repo`
    is no git checkout or its code differs from that commit (the prediction would name code it was not made with)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        if done.returncode:
            raise ConfigError(f"{FIELD}=true: needs the git checkout the prediction is made in ({done.stderr.strip()}); "
                              "allowed: false outside one")
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--", *CODE_PATHS)
    if changed:
        raise ConfigError(f"{FIELD}=true: {', '.join(CODE_PATHS)} differ from the commit ({changed.splitlines()[0].strip()} ...); "
                          "commit them first, so that the commit recorded is the code that predicted")
    return git("rev-parse", "--short", "HEAD")


def record(path: Path, ratios: dict[str, float], commit: str) -> list[str]:
    """Write `ratios` (run id -> predicted / measured) as first-seen predictions at `commit` into the runs file at
    `path`, for the runs that have none yet and are not marked IN_SAMPLE (recorded ones are never overwritten); the ids
    recorded."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in FIRST_SEEN_COLUMNS:
        if column not in frame.columns:
            frame[column] = ""
    todo = ((frame["measured_tokens_per_s_per_gpu"] != "") & (frame["first_seen_ratio"] == "") & (frame["first_seen_commit"] == "")
            & frame["id"].isin(ratios))
    frame.loc[todo, "first_seen_ratio"] = [f"{ratios[i]:.{RATIO_DIGITS}f}" for i in frame.loc[todo, "id"]]
    frame.loc[todo, "first_seen_commit"] = commit
    frame.to_csv(path, index=False)
    return frame.loc[todo, "id"].tolist()


def first_seen_summary(runs: pd.DataFrame, ratios: dict[str, float]) -> dict:
    """Over the runs with a first-seen prediction (`runs`: a runs file as load_runs reads it): how many, their median
    absolute error then and now (`ratios`: run id -> predicted / measured now), and the signed median then (positive:
    predicted too fast)."""
    seen = runs[runs["first_seen_ratio"] != ""]
    if seen.empty:
        return {"n_first_seen": 0}
    then = seen["first_seen_ratio"].astype(float).to_numpy()
    now = np.array([ratios[i] for i in seen["id"]])
    return {"n_first_seen": len(seen), "median_abs_first_seen_error": float(np.median(np.abs(then - 1.0))),
            "median_signed_first_seen_error": float(np.median(then - 1.0)),
            "median_abs_error_now_of_first_seen": float(np.median(np.abs(now - 1.0)))}


def first_seen_line(summary: dict) -> str:
    """The validation page's paragraph on first-seen predictions."""
    if not summary.get("n_first_seen"):
        return ("**First seen**: no run carries a first-seen prediction yet. "
                f"`python -m phaze.validate {FIELD}=true` records each new run's prediction and the commit "
                "(`first_seen_ratio`, `first_seen_commit`) before any change it motivates.")
    return (f"**First seen** ({summary['n_first_seen']} runs, each predicted before any change it motivated): median "
            f"absolute error {summary['median_abs_first_seen_error']:.1%} then (signed median "
            f"{summary['median_signed_first_seen_error']:+.1%}), {summary['median_abs_error_now_of_first_seen']:.1%} now "
            "(target: under 10% then).")
