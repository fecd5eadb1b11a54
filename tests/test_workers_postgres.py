"""Two workers (two `python -m phaze.run` processes, as on two machines) share one PostgreSQL-backed
study and one MLflow store: no point evaluated twice, none lost, the same best as one worker."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import mlflow
import optuna
import pandas as pd
import pytest

from phaze.config import compose_config, study_spec
from phaze.search import run_study
from phaze.search.claims import DatabaseClaims
from tests.conftest import need_executable
from tests.test_search_sampler import check_claim_many
from tests.test_search_study import TINY_MODEL

pytestmark = [pytest.mark.services, pytest.mark.slow]

PG_ROOT = Path("/usr/lib/postgresql")
"""Where Debian's postgresql package puts each major version's server binaries."""
PG_USER = "postgres"
"""The OS account the package creates; initdb refuses to run as root."""
DB_USER = "phaze"
SERVER_TMP = "/tmp"
"""Parent of the server's directory: world-traversable, so the postgres account reaches it (pytest's tmp_path is private to root)."""
GRID = ["hw=tiny_grid", "hw.hbm_gib=[32]", "hw.inter_op_parallel=false", "search=grid", "search.prune=false"]
"""33 points, every one fully evaluated (no pruning), so both workers are busy for a while."""
N_WORKERS = 2
JOB_TIMEOUT_S = 600


def pg_bin(name: str) -> str:
    versions = sorted(PG_ROOT.glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return need_executable(str(versions[-1] / name) if versions else str(PG_ROOT / "<version>" / "bin" / name), "postgresql")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_owner(cmd: list[str]) -> list[str]:
    """Run a server command as the postgres account when we are root."""
    return ["runuser", "-u", PG_USER, "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="module")
def postgres():
    """A throw-away PostgreSQL server on 127.0.0.1 (free port, temp dir) with two databases; yields a URL maker."""
    initdb, pg_ctl, createdb = pg_bin("initdb"), pg_bin("pg_ctl"), pg_bin("createdb")
    root = Path(tempfile.mkdtemp(prefix="phaze-pg-", dir=SERVER_TMP))
    if os.geteuid() == 0:
        shutil.chown(root, PG_USER)
    data, port = root / "data", free_port()
    subprocess.run(as_owner([initdb, "-D", str(data), "-U", DB_USER, "-A", "trust", "--no-sync"]), check=True, capture_output=True)
    subprocess.run(as_owner([pg_ctl, "-D", str(data), "-l", str(root / "server.log"), "-w", "-o",
                             f"-p {port} -h 127.0.0.1 -k {root} -c fsync=off"]) + ["start"], check=True, capture_output=True)
    try:
        for db in ("optuna", "mlflow"):
            subprocess.run([createdb, "-h", "127.0.0.1", "-p", str(port), "-U", DB_USER, db], check=True, capture_output=True)
        yield lambda db: f"postgresql://{DB_USER}@127.0.0.1:{port}/{db}"  # as docs/scaling.md writes it
    finally:
        subprocess.run(as_owner([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_share_one_postgres_study(postgres, tmp_path, workload_cache):
    cache = [f"cache_dir={workload_cache}", f"schedule.cache_dir={workload_cache}/schedule"]
    storage, tracking = postgres("optuna"), postgres("mlflow")
    one = run_study(study_spec(compose_config(*TINY_MODEL, *GRID, *cache, "search.storage=memory", "tracking.enabled=false")), progress=False)

    # created once before the workers start, as docs/scaling.md says (two processes creating the schemas at once fail)
    optuna.create_study(study_name="shared", storage=storage, direction="maximize")
    mlflow.MlflowClient(tracking).search_experiments()
    cmd = [sys.executable, "-m", "phaze.run", *TINY_MODEL, *GRID, *cache, "search.study_name=shared",
           f"search.storage={storage}", f"tracking.uri={tracking}"]
    logs = [tmp_path / f"worker-{k}.log" for k in range(N_WORKERS)]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=log.open("w"), stderr=subprocess.STDOUT) for log in logs]
    for proc, log in zip(procs, logs):
        assert proc.wait(timeout=JOB_TIMEOUT_S) == 0, log.read_text()[-3000:]

    study = optuna.load_study(study_name="shared", storage=storage)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    points = sorted(t.params["point"] for t in complete)
    assert points == list(range(len(one.evaluator)))  # every point once: none duplicated, none lost
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in trials)
    workers = {t.user_attrs["mlflow_record"]["tags"]["worker"] for t in complete}
    assert len(workers) == N_WORKERS  # both processes evaluated points
    assert study.best_value == pytest.approx(one.best.throughput_seq_s, rel=1e-12)
    assert study.best_value == max(t.value for t in one.study.trials)

    mlflow.set_tracking_uri(tracking)
    parents = mlflow.search_runs(experiment_names=["phaze"], filter_string="tags.phaze_role = 'study'")
    assert len(parents) == 1  # the two workers raced to create it; one was kept
    children = mlflow.search_runs(experiment_names=["phaze"], filter_string=f"tags.mlflow.parentRunId = '{parents.run_id[0]}'")
    assert (children.status == "FINISHED").all()
    assert sorted(pd.to_numeric(children["params.trial_number"])) == sorted(t.number for t in complete)  # one child each


def test_claim_many_keeps_existing_claims_on_postgres(postgres):
    """DatabaseClaims.claim_many's PostgreSQL insert (ON CONFLICT DO NOTHING)."""
    check_claim_many(DatabaseClaims(postgres("optuna"), "claim-many"))
