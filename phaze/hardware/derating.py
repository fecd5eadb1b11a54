"""How far a real chip falls short of its ideal roofline: the achievable fraction of the tensor-core
peak and of the memory bandwidths, and a fixed time per operator (kernel launch and tail).

PHAZE's abstract accelerators are ideal (1, 1, 0 s); the GPU presets take measured values
(conf/hw/a100.yaml, h100.yaml, docs/hardware.md §5).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

EFFICIENCY_COLUMNS = ("matmul_efficiency", "memory_efficiency")
"""Fractions in (0, 1]: of the tensor-core peak, and of the HBM and on-chip buffer bandwidths."""
OVERHEAD_COLUMN = "op_overhead_s"
"""Seconds >= 0 added to every tensor- and vector-core operator."""
DERATING_COLUMNS = EFFICIENCY_COLUMNS + (OVERHEAD_COLUMN,)


def check_derating(values: Mapping[str, object], where: str) -> None:
    """Raise ValueError naming the field and its allowed range when a value (scalar or array) is out of it.

    `where` prefixes the field name in the message: "hw." for a config, "points column " for a frame.
    """
    for name in EFFICIENCY_COLUMNS:
        v = np.atleast_1d(np.asarray(values[name], dtype=np.float64))
        bad = ~((v > 0) & (v <= 1))
        if bad.any():
            raise ValueError(f"{where}{name} must be in (0, 1], got {v[bad][0]}")
    v = np.atleast_1d(np.asarray(values[OVERHEAD_COLUMN], dtype=np.float64))
    bad = ~(np.isfinite(v) & (v >= 0))
    if bad.any():
        raise ValueError(f"{where}{OVERHEAD_COLUMN} must be a finite number of seconds >= 0, got {v[bad][0]}")
