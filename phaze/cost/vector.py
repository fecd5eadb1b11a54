"""Vector-core latency: elements over lanes (times the op's cycles per element), bounded below by
the op's bytes through HBM and through the buffer ports at their achievable (derated) bandwidths.
Every operand comes from and goes to HBM."""

from __future__ import annotations

import numpy as np


def vector_latency_s(elems, cycles_per_elem, io_bytes, chip):
    """(single-core, all-cores) latency in seconds; op arrays (n_ops, 1) broadcast against `chip` (1, n_points)."""
    hbm_s = io_bytes / chip.hbm_bytes_s
    single = np.maximum.reduce([
        np.ceil(elems / chip.vc_width) * cycles_per_elem / chip.freq_hz,
        hbm_s,
        io_bytes / np.minimum(chip.glb_bytes_s, chip.core_port_bytes_s),
    ])
    parallel = np.maximum.reduce([
        np.ceil(elems / (chip.n_vc * chip.vc_width)) * cycles_per_elem / chip.freq_hz,
        hbm_s,
        io_bytes / np.minimum(chip.glb_bytes_s, chip.n_vc * chip.core_port_bytes_s),
    ])
    return single, parallel
