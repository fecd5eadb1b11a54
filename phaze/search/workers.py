"""`search.n_workers`: several processes on one machine, each running the job it is given (a study's loop, phaze.search.loop).

The launching process creates the study, the MLflow parent run and the claims table before any
worker starts (two processes creating a fresh SQLite database at once fail, docs/dependencies.md §1.3), and
recovers the trials of dead processes; the workers then only load them. The launcher is worker 0 itself
(its loop runs while the others do, with its progress bar), so n workers take n processes, not n + 1.
The others are spawned, not forked: each builds its own database connections and Numba state. They are
spawned when the study starts (WorkerPool) and stay for every study of the run (a several-model study runs one per
model first), so a new interpreter's imports are paid once.
Each study hands them the launcher's SpaceEvaluator (pickled before any point is evaluated), so the per-point
bounds over the whole space are computed once, not once more in every worker. Each worker's BLAS gets its share
of the cores. Work the study does not wait on (the baseline chip) goes to the last worker before its share
(WorkerPool.run_first), so that the others' trials cover its time instead of a core idling after the study.
"""

from __future__ import annotations

import threading
import traceback
from multiprocessing.reduction import ForkingPickler
from typing import Callable, TypeVar

from threadpoolctl import threadpool_limits

from phaze.cores import usable_cores
from phaze.spawn import spawn_context

T = TypeVar("T")


def blas_threads(n_workers: int) -> int:
    """BLAS threads per worker: this machine's cores shared out. The schedule bounds multiply reachability matrices of
    ~100 operators with numpy; OpenBLAS runs each on every core and its threads spin while they wait, so two workers
    with a thread per core each took twice as long per bound as one worker (docs/scaling.md)."""
    return max(1, usable_cores() // n_workers)


INTERRUPTED = "interrupted (Ctrl-C)"
"""A worker's answer when its job ended on KeyboardInterrupt: the launcher raises KeyboardInterrupt in turn."""


def serve(conn, worker: int, n_workers: int) -> None:
    """Worker process `worker` of n_workers: call each job the launcher sends, (function, args) as function(*args, worker)
    with BLAS on this worker's share of the cores, and answer (its value, None), or (None, the traceback) before exiting
    with the error (a Ctrl-C that ends a job: answered INTERRUPTED, and the worker stops quietly); stop at None, once the
    launcher is gone, or on an interrupt while waiting (a job handles its own: phaze.search.resume)."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if job is None:
            return
        function, args = job
        try:
            with threadpool_limits(limits=blas_threads(n_workers), user_api="blas"):
                value = function(*args, worker)
        except KeyboardInterrupt:  # Ctrl-C: the job stopped as phaze.search.resume says; nothing to show
            answer(conn, (None, INTERRUPTED))
            return
        except BaseException:
            answer(conn, (None, traceback.format_exc()))
            raise
        if not answer(conn, (value, None)):
            return


def first_then(first: tuple, target: int, function: Callable, args: tuple, worker: int):
    """Worker `target` calls first = (function, args) before its share, function(*args, worker), and returns first's
    value; every other worker only its share (None)."""
    value = first[0](*first[1]) if worker == target else None
    function(*args, worker)
    return value


def answer(conn, message) -> bool:
    """Send the launcher a job's outcome; False when it is gone (killed: nothing waits for the answer)."""
    try:
        conn.send(message)
    except (BrokenPipeError, OSError):
        return False
    return True


def send_later(conns: list, job: tuple) -> threading.Thread:
    """Send `job` to every connection from a thread, pickled here first. A send returns once the other process has read
    it (a pickled evaluator is larger than a pipe's buffer), so a process still importing would hold this one back;
    pickled here, the job is what it is now, whatever this process changes in it while the thread sends."""
    payload = ForkingPickler.dumps(job)

    def send() -> None:
        for conn in conns:
            try:
                conn.send_bytes(payload)
            except (BrokenPipeError, OSError):  # that process is gone (stopped, or failed): its reader says how
                pass

    sender = threading.Thread(target=send, name="phaze-send-jobs", daemon=True)
    sender.start()
    return sender


def serve_one(conn) -> None:
    """A side process: run the one job the launcher sends, (function, args), with one BLAS thread, and answer
    (result, None), or (None, the traceback)."""
    try:
        function, args = conn.recv()
    except (EOFError, OSError, KeyboardInterrupt):  # the launcher stopped, or was killed mid-send ("end of file during message")
        return
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            outcome = (function(*args), None)
    except BaseException:
        outcome = (None, traceback.format_exc())
    answer(conn, outcome)


class SideJob:
    """function(*args) in a spawned process beside this one, for work that does not wait on the study (the baseline
    chip), on a core the study leaves idle. result() waits for its value; close() (a context manager's exit) stops it if
    it is still running (an interrupted study)."""

    def __init__(self, function: Callable[..., T], args: tuple):
        ctx = spawn_context()
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=serve_one, args=(theirs,), name="phaze-side-job")
        self._proc.start()
        theirs.close()
        self._sender = send_later([self._conn], (function, args))

    def result(self) -> T:
        """The job's return value once it has finished; RuntimeError with its traceback if it failed."""
        self._sender.join()
        try:
            value, error = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(f"{self._proc.name} exited with code {self._proc.exitcode}") from None
        self._proc.join()
        if error is not None:
            raise RuntimeError(f"{self._proc.name} failed:\n{error}")
        return value

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._sender.join()
        self._conn.close()

    def __enter__(self) -> "SideJob":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class WorkerPool:
    """Workers 1..n_workers-1 of a run, spawned at once and kept until closed (a context manager); worker 0 is the
    calling process. With one worker it spawns nothing and run() calls here() alone."""

    def __init__(self, n_workers: int):
        self.n_workers = n_workers
        ctx = spawn_context()
        self._conns, self._procs = [], []
        for k in range(1, n_workers):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=serve, args=(theirs, k, n_workers), name=f"phaze-worker-{k}")
            proc.start()
            theirs.close()
            self._conns.append(ours)
            self._procs.append(proc)

    def run(self, function: Callable, args: tuple, here: Callable[[], T]) -> T:
        """function(*args, k) in every worker k >= 1 while here() runs in this process, each with BLAS on its share of
        the cores; here()'s result once all have finished, or RuntimeError naming the workers that failed."""
        return self._run((function, args), here)[0]

    def run_first(self, first: tuple, function: Callable, args: tuple, here: Callable[[], T]) -> tuple[T, object]:
        """run(), with first = (function, args), work that the study does not wait on, called by the last worker before
        its share (the others share the study meanwhile), or by this process after here() when it is the only worker:
        (here()'s result, first's value)."""
        if not self._conns:
            result = self.run(function, args, here)
            return result, first[0](*first[1])
        result, values = self._run((first_then, (first, self.n_workers - 1, function, args)), here)
        return result, values[-1]

    def _run(self, job: tuple, here: Callable[[], T]) -> tuple[T, list]:
        """(here()'s result, each worker's value) once every process has run its share of `job`; KeyboardInterrupt when the
        workers that failed were all interrupted (Ctrl-C)."""
        sender = send_later(self._conns, job)
        failed, values = {}, []
        try:
            with threadpool_limits(limits=blas_threads(self.n_workers), user_api="blas"):
                result = here()
        finally:
            sender.join()
            for proc, conn in zip(self._procs, self._conns):
                try:
                    value, error = conn.recv()
                except EOFError:
                    proc.join()
                    value, error = None, f"exit code {proc.exitcode}"
                values.append(value)
                if error is not None:
                    failed[proc.name] = error
        if failed and set(failed.values()) == {INTERRUPTED}:
            raise KeyboardInterrupt
        if failed:
            raise RuntimeError(f"search workers failed: {failed}")
        return result, values

    def release(self) -> None:
        """Tell the workers to stop once their current job ends, without waiting: their interpreters shut down
        (a second or two) while this process goes on (the baseline, the report)."""
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):  # that worker is gone already
                pass
        self._conns = []

    def close(self) -> None:
        """Stop the workers (each ends after its current job) and wait for them."""
        self.release()
        for proc in self._procs:
            proc.join()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
