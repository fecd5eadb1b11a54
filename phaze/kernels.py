"""Every Numba kernel of a search compiled (or loaded from Numba's on-disk cache) once, ahead of its first use.

Numba compiles a kernel at its first call and caches the machine code beside the module (`cache=True`), so a
search's first run after an install spends ~20 s compiling on its critical path. `start_warm_up` does it in a
background process while the search itself reads its configuration and extracts its workloads; the search then
loads the kernels from the cache (or, reaching one first, compiles it itself: the cache takes whichever copy is
written last, both alike).
"""

from __future__ import annotations

import multiprocessing

import numpy as np

from phaze.spawn import spawn_context

WARM_UP_LAYER = {
    "unit": ("tc", "vc", "tc", "vc", "net", "tc"),
    "single_s": (4.0, 1.0, 3.0, 2.0, 1.0, 2.0),
    "parallel_s": (1.5, 0.5, 1.0, 1.0, 1.0, 0.75),
    "src": (0, 0, 1, 2, 3, 3),
    "dst": (1, 2, 3, 3, 4, 5),
}
"""A six-operator layer on two tensor and two vector cores: list-scheduled, then through the mode search and its
refutation (milliseconds of work: the compilation is the point)."""


def warm_up_schedule() -> None:
    """Compile the list scheduler's and the mode search's kernels (phaze.schedule.sgs, phaze.schedule.modes)."""
    from phaze.schedule.bounds import problem_lower_bound_s
    from phaze.schedule.heuristic import best_list_schedule
    from phaze.schedule.instance import LayerProblem
    from phaze.schedule.layer import mode_search

    layer = WARM_UP_LAYER
    problem = LayerProblem.build((np.array(layer["src"]), np.array(layer["dst"])), layer["unit"], layer["single_s"],
                                 layer["parallel_s"], 2, 2)
    mode_search(problem, 0.0, best_list_schedule(problem), problem_lower_bound_s(problem))


def warm_up() -> None:
    """Compile (or load) the placement DP's kernels and the layer scheduler's."""
    from phaze.placement.solve import warm_up as warm_up_placement

    warm_up_placement()
    warm_up_schedule()


def start_warm_up() -> multiprocessing.Process:
    """warm_up in a background (daemon) process, started now; the caller need not wait for it."""
    process = spawn_context().Process(target=warm_up, name="phaze-kernel-warm-up", daemon=True)
    process.start()
    return process
