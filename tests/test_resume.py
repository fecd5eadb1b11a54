"""A study stopped mid-run (Ctrl-C, then SIGKILL) and started again with the same command finishes as
if never interrupted: one finished trial per point, one MLflow child run per finished trial."""

import signal
import sqlite3
import subprocess
import sys
import time

import mlflow
import optuna
import pandas as pd
import pytest

from phaze.config import compose_config
from phaze.config_check import EXIT_INTERRUPTED
from phaze.hardware.space import enumerate_space
from phaze.search.claims import DatabaseClaims
from phaze.search.resume import fail_dead_trials, make_storage
from phaze.search.samplers import ClaimedOrderSampler, SpaceExhausted
from tests.test_search_study import TINY_MODEL

pytestmark = pytest.mark.slow

SMALL_GRID = ["hw=tiny_grid", "hw.hbm_gib=[32]", "hw.glb_mib=[2]", "hw.inter_op_parallel=false"]
"""hw=tiny_grid cut to 17 points, so three starts of the job stay within a minute or two on 2 cores."""
HEARTBEAT = ["search.heartbeat_interval_s=1", "search.grace_period_s=5"]
"""A dead trial is noticed 5 s after its last heartbeat (the default waits 30 s: see conf/search and docs/scaling.md)."""
KILLS = ((signal.SIGINT, 4), (signal.SIGKILL, 8))
"""Each interruption and the number of completed trials it waits for: Ctrl-C first (the running trial
is finished, then the job stops), then a hard kill (the running trial is cut off)."""
POLL_S = 0.2
START_TIMEOUT_S = 300


def command(tmp_path, cache) -> list[str]:
    return [sys.executable, "-m", "phaze.run", *TINY_MODEL, *SMALL_GRID, "search=grid", "search.prune=false", *HEARTBEAT,
            "search.study_name=resume", f"search.storage=sqlite:///{tmp_path / 'studies.db'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"cache_dir={cache}", f"schedule.cache_dir={cache}/schedule"]


def count(db, state: str) -> int:
    """Trials in a state, read straight from the Optuna database while the study runs."""
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return conn.execute("SELECT count(*) FROM trials WHERE state = ?", (state,)).fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not created yet
        return 0


def interrupt(cmd, cwd, db, sig, after_complete: int) -> None:
    """Start the job and send it `sig` once `after_complete` trials are done and one is running."""
    log = cwd / f"run-{sig.name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (count(db, "COMPLETE") >= after_complete and count(db, "RUNNING") == 1):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the study never got going"
        time.sleep(POLL_S)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    if sig == signal.SIGINT:  # one line and the shell's status for Ctrl-C, no traceback
        assert proc.returncode == EXIT_INTERRUPTED and "Traceback" not in log.read_text(), log.read_text()[-3000:]
    assert proc.returncode != 0


def test_interrupted_study_resumes_without_losing_or_repeating_a_point(tmp_path, workload_cache):
    cmd = command(tmp_path, workload_cache)
    db = tmp_path / "studies.db"
    n_points = len(enumerate_space(compose_config(*SMALL_GRID).hw))
    for sig, after in KILLS:
        interrupt(cmd, tmp_path, db, sig, after)
        assert after <= count(db, "COMPLETE") < n_points
        if sig == signal.SIGINT:
            assert count(db, "RUNNING") == count(db, "FAIL") == 0  # Ctrl-C let the running trial finish
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]

    study = optuna.load_study(study_name="resume", storage=f"sqlite:///{db}")
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert sorted(t.params["point"] for t in complete) == list(range(n_points))  # each point exactly once
    with_point = [t for t in failed if "point" in t.params]
    assert len(with_point) <= 1  # the trial running at the hard kill (unless it landed between trials), failed ...
    for dead in with_point:
        retry = [t for t in complete if t.params["point"] == dead.params["point"]]
        assert len(retry) == 1 and retry[0].number > dead.number  # ... and its point re-proposed
    # A trial killed between its creation and recording its point failed with no point (its claim taken over or
    # released); its retry, started once the others had taken every point, failed with none either: nothing else fails.
    pointless = sorted(t.number for t in failed if "point" not in t.params)
    assert not pointless or (len(pointless) <= 2 and not with_point)
    assert all(t.system_attrs.get("failed_trial") == pointless[0] for t in failed if t.number in pointless[1:])
    assert len(trials) == n_points + len(failed)

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parents = mlflow.search_runs(experiment_names=["phaze"], filter_string="tags.phaze_role = 'study'")
    assert len(parents) == 1
    children = mlflow.search_runs(experiment_names=["phaze"], filter_string=f"tags.mlflow.parentRunId = '{parents.run_id[0]}'")
    finished = children[children.status == "FINISHED"]
    numbers = pd.to_numeric(finished["params.trial_number"])
    assert sorted(numbers) == sorted(t.number for t in complete)  # one finished child per completed trial
    closed = pd.to_numeric(children[children.status != "FINISHED"]["tags.phaze.trial_number"])
    assert set(closed) <= {t.number for t in failed} and (children[children.status != "FINISHED"].status == "FAILED").all()
    by_trial = {t.number: t.values[0] for t in complete}
    logged = pd.to_numeric(finished["metrics.throughput_seq_s"]).to_numpy()
    assert logged == pytest.approx([by_trial[n] for n in numbers], rel=1e-12)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_trial_killed_before_its_first_heartbeat_is_retried(tmp_path):
    """A process killed between creating a trial and its first heartbeat leaves a RUNNING trial that
    Optuna's stale check never sees; it is failed after the grace period and its point re-enqueued."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name="silent", storage=make_storage(url, heartbeat_interval_s=1, grace_period_s=1))
    dead = study.ask({"point": optuna.distributions.IntDistribution(0, 9)})  # no heartbeat thread: as if killed at once
    assert fail_dead_trials(study, url, grace_period_s=1, wait_s=0) == 1  # too young to call dead
    assert fail_dead_trials(study, url, grace_period_s=1, wait_s=10) == 0
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]
    assert trials[1].params == {"point": dead.params["point"]}


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_trial_killed_between_claiming_and_recording_its_point_hands_the_claim_to_its_retry(tmp_path):
    """A process killed after its trial claimed a point but before Optuna recorded it leaves a claim that no
    trial's params show; the dead trial's retry (no params to copy) takes that claim over, so the point is
    proposed again instead of staying claimed by a dead trial for ever."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    claims = DatabaseClaims(url, "claimed")
    sampler = ClaimedOrderSampler(list(range(3)), claims)
    study = optuna.create_study(study_name="claimed", storage=make_storage(url, heartbeat_interval_s=1, grace_period_s=1), sampler=sampler)
    dead = study.ask()
    assert claims.claim(0, dead.number)  # the sampler's claim, written; the process dies before the param is
    assert fail_dead_trials(study, url, grace_period_s=1, wait_s=10) == 0
    proposed = []
    study.optimize(lambda trial: proposed.append(trial.suggest_int("point", 0, 2)) or 0.0, catch=(SpaceExhausted,))
    assert sorted(proposed) == [0, 1, 2]
    assert claims.owners_by_point() == {t.params["point"]: t.number for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
