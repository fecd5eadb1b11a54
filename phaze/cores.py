"""The CPU cores this process may use: what parallel tracing and search workers share out."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on (its affinity where the OS reports one, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
