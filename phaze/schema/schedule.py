"""schedule.*: the per-layer operator-scheduling ILP's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from phaze.config_values import ConfigError, choice, positive, positive_ints
from phaze.schema.choices import Backend


@dataclass
class ScheduleCfg:
    """Per-layer operator-scheduling ILP settings."""

    backend: str = "auto"  # auto | gurobi | highs
    mip_gap: float = 0.01
    time_limit_s: float = 60.0
    # Gurobi effort per layer MILP in work units (~1 s of one core each; null: none). Unlike a time limit it
    # is deterministic, so a search and the grid that checks it get the same layer latencies on any load;
    # more effort rarely improves the MILP's schedule (experiments/results/work_limit_bench.md). HiGHS (a layer over
    # Gurobi's size-limited licence) has no work units and takes it as seconds.
    work_limit: Optional[float] = 5.0
    threads: int = 1
    # Before the MILP, refute makespans over the tensor unit's mode decisions and list-schedule the assignments left
    # (phaze.schedule.modes): shorter schedules and proven bounds, so most layers close without the MILP. null: on
    # with train.step_model=timeline, off with PHAZE's step, whose world keeps the schedules (and numbers) it had
    # (phaze.inputs.execution_model); schedule_layer reads null as on.
    mode_search: Optional[bool] = None
    cache: bool = True
    cache_dir: str = ".cache/phaze/schedule"  # on-disk cache of solved layers (one JSON file per problem)

    def __post_init__(self) -> None:
        """The settings' own rules: a known backend, a gap in [0, 1), positive limits and threads."""
        choice(self.backend, "schedule.backend", Backend.values())
        if not 0 <= self.mip_gap < 1:
            raise ConfigError(f"schedule.mip_gap={self.mip_gap}: allowed values are in [0, 1)")
        positive(self.time_limit_s, "schedule.time_limit_s")
        if self.work_limit is not None:
            positive(self.work_limit, "schedule.work_limit")
        positive_ints(self.threads, "schedule.threads")
        choice(self.mode_search, "schedule.mode_search", (None, True, False))
