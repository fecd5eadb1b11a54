"""Vector-core latency: elements over lanes (times the op's cycles per element), bounded below by
the op's bytes through HBM and through the buffer ports at their achievable (derated) bandwidths.
Every operand comes from and goes to HBM, except the steps of a fused kernel, whose bytes are the kernel's own."""

from __future__ import annotations

import numpy as np

FUSED_SOFTMAX_LANE_OPS = 4.0
"""Lane operations per score of FlashAttention's online softmax beside its exponential (FlashAttention-2, arXiv
2307.08691, Algorithm 1, lines 9-10): the scaled subtraction of the running row maximum (one fused multiply-add), the
row maximum, the row sum, and the conversion of P to 16 bits for the P V matmul."""


def compute_cycles(elems, cycles_per_elem, n_cores, chip, fused_softmax=False):
    """Cycles of `elems` elements over `n_cores` vector cores. A fused softmax step (FlashAttention's) on a chip with
    special-function units puts its one exponential per score through them while its other operations
    (FUSED_SOFTMAX_LANE_OPS) go through the lanes, in parallel: the slower of the two; elsewhere the op's cycles per
    element on the lanes."""
    on_sfu = np.asarray(fused_softmax, dtype=bool) & (chip.sfu_lanes > 0)
    lanes = np.ceil(elems / (n_cores * chip.vc_width)) * np.where(on_sfu, FUSED_SOFTMAX_LANE_OPS, cycles_per_elem)
    sfu = np.ceil(elems / (n_cores * np.maximum(chip.sfu_lanes, 1.0)))
    return np.where(on_sfu, np.maximum(lanes, sfu), lanes)


def vector_latency_s(elems, cycles_per_elem, io_bytes, chip, fused_softmax=False):
    """(single-core, all-cores) latency in seconds; op arrays (n_ops, 1) broadcast against `chip` (1, n_points). A fused
    softmax step runs at the sustained clock of its kernel's matmul steps (Chip.sustained_clock_hz), the rest at the
    chip's clock."""
    hbm_s = io_bytes / chip.hbm_bytes_s
    clock_hz = np.where(np.asarray(fused_softmax, dtype=bool), chip.sustained_clock_hz, chip.freq_hz)
    single = np.maximum.reduce([
        compute_cycles(elems, cycles_per_elem, 1.0, chip, fused_softmax) / clock_hz,
        hbm_s,
        io_bytes / np.minimum(chip.glb_bytes_s, chip.core_port_bytes_s),
    ])
    parallel = np.maximum.reduce([
        compute_cycles(elems, cycles_per_elem, chip.n_vc, chip, fused_softmax) / clock_hz,
        hbm_s,
        io_bytes / np.minimum(chip.glb_bytes_s, chip.n_vc * chip.core_port_bytes_s),
    ])
    return single, parallel
