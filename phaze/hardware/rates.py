"""Peak rates of an accelerator, shared by the Accelerator dataclass and the design-space frames."""

from __future__ import annotations

import numpy as np

GHZ = 1e9
GB = 1e9
"""Clock in GHz and bandwidths in GB/s (10^9 bytes per second) in the hardware configs."""
GBIT = 1e9
"""Off-chip lane rates in Gb/s (10^9 bits per second): `hw.interconnect_gbit_s_per_lane`, HBM pin rates."""
FLOPS_PER_MAC = 2
"""A multiply-accumulate is two floating-point operations (the convention of published peak FLOP/s)."""
KIB = 1024
MIB = 1024 * 1024


def peak_matmul_flops(n_tc, tc_rows, tc_cols, freq_ghz):
    """FLOP/s of all tensor cores: one MAC per PE per cycle."""
    return FLOPS_PER_MAC * np.asarray(n_tc, float) * tc_rows * tc_cols * freq_ghz * GHZ


def peak_vector_ops(n_vc, vc_width, freq_ghz):
    """Element operations per second of all vector cores: one per lane per cycle."""
    return np.asarray(n_vc, float) * vc_width * freq_ghz * GHZ


def core_buffer_kib(pes, bytes_per_pe: float, min_kib: float):
    """Per-core SRAM in KiB for a core of `pes` MACs or lanes (PHAZE: max(1, pes/64) KiB at 16 B per PE)."""
    return np.maximum(float(min_kib), np.asarray(pes, float) * bytes_per_pe / KIB)
