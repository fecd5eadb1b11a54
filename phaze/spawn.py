"""multiprocessing's spawn context for phaze's helper processes (traces, search workers, kernel warm-up).

A spawned child first re-applies its parent's default start method. Inside a worker of a library with a start method
of its own (joblib's loky, which runs the jobs of `hydra/launcher=local`) that default is the library's, which a fresh
interpreter does not know: every child died with "cannot find context for 'loky'". The default is reset to spawn there.
"""

from __future__ import annotations

import multiprocessing


def spawn_context():
    """The spawn context, with this process's default start method made one that a spawned child can re-apply."""
    if multiprocessing.get_start_method(allow_none=True) not in (None, *multiprocessing.get_all_start_methods()):
        multiprocessing.set_start_method("spawn", force=True)
    return multiprocessing.get_context("spawn")
