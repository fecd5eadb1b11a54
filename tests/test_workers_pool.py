"""WorkerPool (search.n_workers): the processes spawned when a run starts serve every study of the run, and a job that
fails in one of them fails the launcher's call with that worker's traceback."""

import os

import pytest

from phaze.search.workers import WorkerPool


def record_pid(path: str, worker: int) -> None:
    with open(path, "a") as f:
        f.write(f"{worker} {os.getpid()}\n")


def fail(message: str, worker: int) -> None:
    raise ValueError(f"{message} in worker {worker}")


def test_every_job_runs_in_the_same_spawned_processes(tmp_path):
    """Two jobs on a pool of three workers: workers 1 and 2 run each job once, each in one process of its own for
    both jobs (not a new interpreter per study), while worker 0 is the caller's here()."""
    path = tmp_path / "pids.txt"
    with WorkerPool(3) as pool:
        assert pool.run(record_pid, (str(path),), lambda: "first") == "first"
        assert pool.run(record_pid, (str(path),), lambda: "second") == "second"
    runs = [tuple(int(x) for x in line.split()) for line in path.read_text().splitlines()]
    assert sorted(worker for worker, _ in runs) == [1, 1, 2, 2]
    pids = {worker: {pid for w, pid in runs if w == worker} for worker in (1, 2)}
    assert all(len(p) == 1 for p in pids.values())
    assert len(pids[1] | pids[2] | {os.getpid()}) == 3


def test_a_failing_job_raises_in_the_launcher_with_the_workers_traceback():
    calls = []
    with WorkerPool(2) as pool:
        with pytest.raises(RuntimeError, match=r"(?s)phaze-worker-1.*ValueError: no good in worker 1"):
            pool.run(fail, ("no good",), lambda: calls.append("here"))
    assert calls == ["here"]  # worker 0 ran to its end before the failure was raised


def test_one_worker_spawns_nothing():
    with WorkerPool(1) as pool:
        assert pool.run(fail, ("never called",), lambda: 42) == 42
