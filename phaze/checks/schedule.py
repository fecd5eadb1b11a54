"""schedule.*: the layer ILP's backend, gap, limits and threads."""

from __future__ import annotations

from phaze.checks.values import choice, positive
from phaze.config_values import ConfigError, positive_ints
from phaze.schedule.backends import BACKEND_CHOICES


def check_schedule(s) -> None:
    """Layer ILP settings: backend, MIP gap, time and work limits, threads."""
    choice(s.backend, "schedule.backend", BACKEND_CHOICES)
    if not 0 <= s.mip_gap < 1:
        raise ConfigError(f"schedule.mip_gap={s.mip_gap}: allowed values are in [0, 1)")
    positive(s.time_limit_s, "schedule.time_limit_s")
    if s.work_limit is not None:
        positive(s.work_limit, "schedule.work_limit")
    positive_ints(s.threads, "schedule.threads")
    choice(s.mode_search, "schedule.mode_search", (None, True, False))
