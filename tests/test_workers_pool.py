"""WorkerPool (search.n_workers): the processes spawned when a run starts serve every study of the run, and a job that
fails in one of them fails the launcher's call with that worker's traceback. SideJob: one job beside the study (the
baseline chip), its value sent back."""

import os
import pickle
import subprocess
import sys
import threading
import time

import pytest
from threadpoolctl import threadpool_info

from phaze.config import compose_config, study_spec
from phaze.cores import usable_cores
from phaze.search.evaluator import SpaceEvaluator
from phaze.search.workers import SideJob, WorkerPool, blas_threads
from tests.test_search_study import TINY_MODEL


def record_pid(path: str, worker: int) -> None:
    with open(path, "a") as f:
        f.write(f"{worker} {os.getpid()}\n")


def blas_thread_counts() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def record_blas_threads(path: str, worker: int) -> None:
    with open(path, "a") as f:
        f.write(f"{worker} {' '.join(str(n) for n in blas_thread_counts())}\n")


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


def test_the_first_job_runs_in_the_last_worker_before_its_share(tmp_path):
    """run_first: the last worker computes `first` (the baseline) and then its share of the job, and first's value comes
    back with here()'s; the other workers and here() only run their share."""
    path = tmp_path / "pids.txt"
    with WorkerPool(3) as pool:
        here, (pid, total) = pool.run_first((pid_and_sum, ([1, 2, 3],)), record_pid, (str(path),), lambda: "here")
    runs = dict(tuple(int(x) for x in line.split()) for line in path.read_text().splitlines())
    assert here == "here" and total == 6
    assert sorted(runs) == [1, 2] and pid == runs[2] != os.getpid()


def test_with_one_worker_the_first_job_runs_here_after_the_study():
    calls = []
    with WorkerPool(1) as pool:
        result = pool.run_first((lambda: calls.append("first") or len(calls), ()), fail, ("never called",), lambda: calls.append("here") or "done")
    assert result == ("done", 2) and calls == ["here", "first"]


def test_one_worker_spawns_nothing():
    with WorkerPool(1) as pool:
        assert pool.run(fail, ("never called",), lambda: 42) == 42


def test_each_worker_runs_blas_on_its_share_of_the_cores(tmp_path):
    """Two workers each get half the cores for BLAS, the caller's worker 0 included while its loop runs (OpenBLAS on
    every core in each worker made the list-schedule bounds twice as slow), and the caller gets them all back after."""
    assert blas_thread_counts(), "numpy links a BLAS that threadpoolctl sees"
    share = max(1, usable_cores() // 2)
    assert blas_threads(2) == share and blas_threads(1) == usable_cores() and blas_threads(10 * usable_cores()) == 1
    before = blas_thread_counts()
    path = tmp_path / "blas.txt"
    with WorkerPool(2) as pool:
        here = pool.run(record_blas_threads, (str(path),), blas_thread_counts)
    worker, *counts = path.read_text().split()
    assert worker == "1" and [int(n) for n in counts] == [share] * len(counts) and counts
    assert here == [share] * len(here)
    assert blas_thread_counts() == before


def test_released_workers_exit_while_the_launcher_goes_on():
    """release() returns at once (the workers' interpreters shut down while the launcher computes the baseline and the
    report); close() after it only waits for them."""
    pool = WorkerPool(3)
    assert pool.run(record_blas_threads, (os.devnull,), lambda: "done") == "done"
    pool.release()
    for proc in pool._procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0, proc
    pool.close()


WORKER_WITHOUT_TORCH = """
import pickle, sys
import phaze.run  # a spawned worker imports the command's module again (multiprocessing's spawn)
from phaze.search.loop import work
evaluator = pickle.load(open(sys.argv[1], "rb"))
values = [round(evaluator.evaluate(i).throughput_seq_s, 9) for i in range(int(sys.argv[2]))]
print(sorted(m for m in ("torch", "transformers") if m in sys.modules), values)
"""


def test_a_worker_evaluates_points_without_torch(tmp_path):
    """What a search's worker does (import the command's module, load the launcher's evaluator, evaluate points) needs
    neither torch nor transformers, only tracing a model does: a worker starts in ~1 s instead of ~4 (docs/scaling.md).
    The points' values are those the launcher computes."""
    cfg = compose_config(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={tmp_path}", f"schedule.cache_dir={tmp_path / 'schedule'}")
    evaluator = SpaceEvaluator(study_spec(cfg))
    path = tmp_path / "evaluator.pkl"
    path.write_bytes(pickle.dumps(evaluator))
    n = 3
    out = subprocess.run([sys.executable, "-c", WORKER_WITHOUT_TORCH, str(path), str(n)], capture_output=True, text=True, check=True)
    expected = [round(evaluator.evaluate(i).throughput_seq_s, 9) for i in range(n)]
    assert out.stdout.strip() == f"[] {expected}"


class PickledWhere:
    """Records the thread that pickles it: a job must be pickled by the caller, as it is when sent."""

    def __init__(self):
        self.threads = []

    def __getstate__(self):
        self.threads.append(threading.current_thread().name)
        return {"threads": []}


def pid_and_sum(values: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(values)


def test_a_side_job_returns_its_value_from_another_process():
    """The value comes back from a spawned process, computed on the arguments as they were when the job started: they
    are pickled by the caller, so what it changes afterwards (the study evaluating points) does not reach the job."""
    values = [1, 2, 3]
    with SideJob(pid_and_sum, (values,)) as job:
        values.append(100)
        pid, total = job.result()
    assert pid != os.getpid() and total == 6


def test_jobs_are_pickled_by_the_caller_not_the_sending_thread():
    """WorkerPool.run and SideJob pickle the job in the calling thread (a thread sends the bytes): pickling in the
    sending thread raced with the caller's study, which changes the evaluator while the thread pickled it."""
    job = PickledWhere()
    with WorkerPool(2) as pool:
        pool.run(fail_unless_pickled, (job,), lambda: None)
    with SideJob(len, ([job],)) as side:
        assert side.result() == 1
    assert job.threads == [threading.current_thread().name] * 2


def fail_unless_pickled(job: PickledWhere, worker: int) -> None:
    assert isinstance(job, PickledWhere)


def test_a_failing_side_job_raises_with_its_traceback():
    with SideJob(fail, ("no good", 7)) as job:
        with pytest.raises(RuntimeError, match=r"(?s)phaze-side-job failed.*ValueError: no good in worker 7"):
            job.result()


def test_closing_a_running_side_job_stops_it():
    """An interrupted study closes its side job: the process is stopped, not waited for."""
    start = time.perf_counter()
    with SideJob(time.sleep, (120,)) as job:
        pass
    assert not job._proc.is_alive() and time.perf_counter() - start < 60


def interrupted(worker: int) -> None:
    raise KeyboardInterrupt


def test_a_job_interrupted_in_a_worker_interrupts_the_launcher_without_a_traceback(capfd):
    """Ctrl-C reaches every process of the terminal's group: a worker whose job ends on KeyboardInterrupt answers so and
    stops quietly, and the launcher raises KeyboardInterrupt (one line at the command's end), not a RuntimeError with
    the worker's traceback."""
    with WorkerPool(2) as pool:
        with pytest.raises(KeyboardInterrupt):
            pool.run(interrupted, (), lambda: "here")
    assert "Traceback" not in capfd.readouterr().err
