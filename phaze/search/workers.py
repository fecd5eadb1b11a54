"""`search.n_workers`: several processes on one machine, each running the study's loop against its storage.

The launching process creates the study, the MLflow parent run and the claims table before any
worker starts (two processes creating a fresh SQLite database at once fail, ecosystem.md §1), and
recovers the trials of dead processes; the workers then only load them. The launcher is worker 0 itself
(its loop runs while the others do, with its progress bar), so n workers take n processes, not n + 1.
The others are spawned, not forked: each builds its own database connections and Numba state. They are
handed the launcher's SpaceEvaluator (pickled before any point is evaluated), so the per-point bounds over
the whole space are computed once, not once more in every worker.
"""

from __future__ import annotations

import multiprocessing
from typing import Callable, TypeVar

from omegaconf import OmegaConf

T = TypeVar("T")


def work(cfg_yaml: str, worker: int, evaluator) -> None:
    """One worker process: load the study with this worker's sampler and run trials until it is done."""
    from phaze import schema  # noqa: F401  (registers the structured configs in the new process)
    from phaze.search.study import search, tracker_for, worker_study

    cfg = OmegaConf.create(cfg_yaml)
    study = worker_study(cfg, evaluator, worker)
    search(cfg, study, evaluator, tracker_for(cfg), durable=True)


def run_workers(cfg, n_workers: int, evaluator, here: Callable[[], T]) -> T:
    """Run worker 0 as `here()` in this process and workers 1..n_workers-1 as processes, each with a copy of
    `evaluator` (a SpaceEvaluator of cfg), to the end; return here()'s result, or raise if any worker failed."""
    ctx = multiprocessing.get_context("spawn")
    text = OmegaConf.to_yaml(cfg, resolve=True)
    procs = [ctx.Process(target=work, args=(text, k, evaluator), name=f"phaze-worker-{k}") for k in range(1, n_workers)]
    for p in procs:
        p.start()
    try:
        result = here()
    finally:
        for p in procs:
            p.join()
    failed = {p.name: p.exitcode for p in procs if p.exitcode != 0}
    if failed:
        raise RuntimeError(f"search workers failed (exit codes): {failed}")
    return result
