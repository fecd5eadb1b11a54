"""phaze's helper processes start inside a joblib (loky) worker, where `hydra/launcher=local` runs its jobs."""

import joblib

from phaze.spawn import spawn_context


def child_exit_code(context_of) -> int:
    """Spawn a child that does nothing, with the context context_of() gives; its exit code (0: it started)."""
    proc = context_of().Process(target=int)
    proc.start()
    proc.join(120)
    return proc.exitcode


def in_loky_workers(context_of) -> list:
    return joblib.Parallel(n_jobs=2, backend="loky")(joblib.delayed(child_exit_code)(context_of) for _ in range(2))


def test_a_process_spawned_in_a_loky_worker_starts():
    """With multiprocessing.get_context("spawn") instead, both children die ("cannot find context for 'loky'")."""
    assert in_loky_workers(spawn_context) == [0, 0]

