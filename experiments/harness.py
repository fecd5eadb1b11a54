"""What every experiment shares: job configs with empty caches, runs of `python -m phaze.run` from empty caches, the
command line and commit that made a result, and each result written twice: a markdown page and its numbers as JSON.

Run an experiment as a module from the repository root, e.g. `python -m experiments.performance.bench_bounds`: the
repository root is then on the path and nothing edits sys.path. Every page lies in experiments/results/ under the
name its script gives it, its JSON beside it (same stem).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from phaze.config import compose_config
from phaze.report.results_log import append_section
from phaze.search.study import MILPS_ATTR

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
DATA = ROOT / "experiments" / "data"
PHAZE_RUN = (sys.executable, "-m", "phaze.run")
SEARCHED_ROW = " searched "
"""The row of phaze.run's final table that holds the searched design."""
THROUGHPUT_HEADER = "throughput_seq_s"


def fresh_overrides(folder: Path) -> list[str]:
    """Overrides that put the workload and schedule caches and the study storage in `folder`, MLflow off."""
    return [f"cache_dir={folder / 'cache'}", f"schedule.cache_dir={folder / 'cache' / 'schedule'}",
            f"search.storage=sqlite:///{folder / 'studies.db'}", "tracking.enabled=false"]


@contextmanager
def fresh_config(*overrides: str):
    """The job config with empty caches and study storage in a new temporary folder (later overrides win, e.g.
    search.storage=memory); the folder is removed when the block ends."""
    with tempfile.TemporaryDirectory() as tmp:
        yield compose_config(*fresh_overrides(Path(tmp)), *overrides)


def repository_env() -> dict[str, str]:
    """This process's environment with the repository root on PYTHONPATH, so that a child started in another folder
    can run `python -m experiments...`."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def module_command(module: str, *args: str) -> tuple[str, ...]:
    """`python -m <module> <args>` for a child process."""
    return (sys.executable, "-m", module, *args)


def run_in(folder: Path, overrides: list[str], command: tuple[str, ...] = PHAZE_RUN) -> tuple[float, subprocess.CompletedProcess, str]:
    """One run of `command` (`python -m phaze.run`, or a module taking its arguments) on the caches, study storage
    and MLflow store in `folder` (whatever earlier runs left there): (wall s, the finished process with its stdout and
    stderr, the study storage URL)."""
    storage = f"sqlite:///{folder / 'studies.db'}"
    start = time.perf_counter()
    out = subprocess.run([*command, *overrides, f"cache_dir={folder / 'cache'}",
                          f"schedule.cache_dir={folder / 'cache' / 'schedule'}", f"search.storage={storage}",
                          f"tracking.uri=sqlite:///{folder / 'mlflow.db'}"], check=True, capture_output=True, text=True, cwd=folder,
                         env=repository_env())
    return time.perf_counter() - start, out, storage


@contextmanager
def fresh_run(overrides: list[str], command: tuple[str, ...] = PHAZE_RUN):
    """run_in a fresh temporary directory (empty caches): yields its (wall s, process, storage URL), the directory kept
    until the block ends."""
    with tempfile.TemporaryDirectory() as tmp:
        yield run_in(Path(tmp), overrides, command)


def best_throughput(stdout: str) -> str:
    """The searched design's throughput in phaze.run's final table (pandas right-aligns a value under its header)."""
    lines = stdout.splitlines()
    header = next((line for line in lines if THROUGHPUT_HEADER in line), "")
    row = next((line for line in lines if SEARCHED_ROW in line), "")
    end = header.find(THROUGHPUT_HEADER) + len(THROUGHPUT_HEADER)
    return row[:end].split()[-1] if header and row else "?"


def headline(overrides: list[str], workers: int) -> tuple[float, str]:
    """(wall s, the best throughput found) of one `python -m phaze.run` from empty caches with `workers` workers."""
    with fresh_run([*overrides, f"search.n_workers={workers}"]) as (wall, out, _):
        return wall, best_throughput(out.stdout)


def study_milps(storage: str) -> pd.DataFrame:
    """Every layer MILP of the study in `storage` (its only study): status, gap, solve seconds and whether the schedule
    came from the cache (solved earlier, its solve seconds then)."""
    study = optuna.load_study(study_name=None, storage=storage)
    rows = [m for t in study.get_trials(deepcopy=False) for m in t.user_attrs.get(MILPS_ATTR, [])]
    return pd.DataFrame(rows, columns=["status", "mip_gap", "solve_s", "from_cache"])


def command_line() -> str:
    """The command that runs this process's experiment: `python -m <module> <its arguments>`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    launcher = ["python", "-m", spec.name] if spec is not None else ["python", sys.argv[0]]
    return " ".join([*launcher, *sys.argv[1:]])


def commit() -> str:
    """The repository's short commit hash."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def as_data(value):
    """`value` as JSON data: a table as a list of rows (its index a column when it carries names), a series as a
    mapping, numpy numbers as Python ones, NaN and infinities as null."""
    if isinstance(value, pd.DataFrame):
        frame = value if isinstance(value.index, pd.RangeIndex) else value.reset_index()
        return [as_data(row) for row in frame.to_dict("records")]
    if isinstance(value, pd.Series):
        return {str(k): as_data(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {str(k): as_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_data(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def write_result(name: str, page: str, **data) -> Path:
    """Write experiments/results/<name>.md (the page) and <name>.json beside it (the command, the commit and `data`),
    print the page; returns the page's path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(page)
    record = {"command": command_line(), "commit": commit(), **data}
    path.with_suffix(".json").write_text(json.dumps(as_data(record), indent=1) + "\n")
    print(page)
    return path


def append_result(name: str, title: str, section: str, **data) -> Path:
    """Append `section` to experiments/results/<name>.md (titled `title` when new) and its record (the command, the
    commit and `data`) to the list in <name>.json beside it; print the section."""
    path = RESULTS / f"{name}.md"
    append_section(path, title, section)
    records = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else []
    records.append(as_data({"command": command_line(), "commit": commit(), **data}))
    path.with_suffix(".json").write_text(json.dumps(records, indent=1) + "\n")
    print(section)
    return path
