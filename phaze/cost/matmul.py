"""Tensor-core matmul latency: tiling C[b,m,n] = A[b,m,k] @ B[b,k,n] onto `tc_rows x tc_cols` arrays.

Compute: two of (m, k, n) are laid on the array, the third streams through it, one row per cycle;
a dimension that is not a multiple of the array side pays for a whole extra tile. The mapper takes
the best of the six assignments (weight-, output- and input-stationary, each both ways), as
Sunstone's search over spatial unrollings does in PHAZE. On n cores the output tiles (b and the
output dimensions, never k) are split across the arrays; spare arrays split the streamed dimension
when it is an output dimension.

Memory: bytes through HBM and through the buffer ports from square blocking, whose tile side is set
by the buffer that holds the tiles (global buffer for HBM traffic, per-core buffer for the traffic
into a core); never less than the op's compulsory bytes. Latency is the largest of the three bounds,
each at the chip's achievable rate (array steps at `tc_clock_hz`, derated bandwidths: phaze.cost.chip).
"""

from __future__ import annotations

import itertools

import numpy as np

ORIENTATIONS = tuple(itertools.permutations(("m", "k", "n")))
"""(array rows, array columns, streamed) assignments of the GEMM dimensions."""

BLOCKING_OPERANDS = 3
"""A blocked GEMM keeps a square tile of A, of B and of C in the buffer at once, so the tile side is
sqrt(buffer / (3 * bytes per element)) (Goto & van de Geijn, ACM TOMS 2008; Hong & Kung 1981 bound)."""


def tile_side(buffer_bytes, elem_bytes):
    """Side (elements) of the square tiles a buffer can hold for blocking."""
    return np.maximum(1.0, np.floor(np.sqrt(buffer_bytes / (BLOCKING_OPERANDS * elem_bytes))))


def blocked_bytes(b, m, k, n, tile, elem_bytes):
    """Bytes read and written by a GEMM blocked with square `tile`s: A re-read per column block of C,
    B per row block, C written once."""
    words = m * k * np.ceil(n / tile) + k * n * np.ceil(m / tile) + m * n
    return elem_bytes * b * words


def array_cycles(b, m, k, n, rows, cols, n_cores):
    """Cycles of the best dataflow when the output tiles are split over `n_cores` arrays."""
    dims = {"m": m, "k": k, "n": n}
    best = None
    for x, y, z in ORIENTATIONS:
        tiles_x = np.ceil(dims[x] / rows)
        tiles_y = np.ceil(dims[y] / cols)
        k_tiles = tiles_x if x == "k" else tiles_y if y == "k" else 1.0
        out_tiles = b * (1.0 if x == "k" else tiles_x) * (1.0 if y == "k" else tiles_y)
        per_core = np.ceil(out_tiles / n_cores)
        if z == "k":
            stream = dims[z]
        else:
            stream = np.ceil(dims[z] / np.maximum(1.0, np.floor(n_cores / out_tiles)))
        cycles = k_tiles * per_core * stream
        best = cycles if best is None else np.minimum(best, cycles)
    return best


def tiled_cycles(b, m, k, n, rows, cols, n_cores, tile_rows, tile_cols, fill_k):
    """Cycles when each core computes `tile_rows x tile_cols` output blocks (a GPU's CTA tiles, either way
    round), streaming k (plus `fill_k` steps of pipeline fill, drain and epilogue) through its array, and the
    blocks are dealt to the `n_cores` cores in waves (NVIDIA, "Matrix Multiplication Background User's Guide":
    tile and wave quantization); idle cores split k when there are fewer blocks than cores (split-K)."""
    best = None
    for r, c in ((tile_rows, tile_cols), (tile_cols, tile_rows)):
        blocks = b * np.ceil(m / r) * np.ceil(n / c)
        waves = np.ceil(blocks / n_cores)
        stream = np.ceil(k / np.maximum(1.0, np.floor(n_cores / blocks)))
        cycles = waves * np.ceil(r / rows) * np.ceil(c / cols) * (stream + fill_k)
        best = cycles if best is None else np.minimum(best, cycles)
    return best


def core_cycles(b, m, k, n, chip, n_cores):
    """Array cycles on `n_cores` cores: PHAZE's best dataflow, or whole CTA tiles where the chip sets them."""
    mapped = array_cycles(b, m, k, n, chip.tc_rows, chip.tc_cols, n_cores)
    if not np.any(chip.tile_rows > 0):
        return mapped
    tiled = tiled_cycles(b, m, k, n, chip.tc_rows, chip.tc_cols, n_cores, np.maximum(chip.tile_rows, 1.0),
                         np.maximum(chip.tile_cols, 1.0), chip.tile_fill_k)
    return np.where(chip.tile_rows > 0, tiled, mapped)


def matmul_latency_s(b, m, k, n, elem_bytes, io_bytes, chip, on_chip=False, rate=1.0):
    """(single-core, all-cores) latency in seconds; op arrays (n_ops, 1) broadcast against `chip` (1, n_points).
    `rate` multiplies the arrays' steps per second (an FP8 GEMM: the chip's fp8_matmul_ratio).

    `on_chip` marks steps of a fused kernel: their operands never go to HBM, so HBM carries only
    their own io_bytes, while the core buffer ports still stream the blocked operands; the chip's fixed
    time per matmul kernel (`matmul_fixed_s`) is paid by standalone matmuls only.
    """
    blocked_hbm = np.maximum(io_bytes, blocked_bytes(b, m, k, n, tile_side(chip.glb_bytes, elem_bytes), elem_bytes))
    hbm_bytes = np.where(on_chip, io_bytes, blocked_hbm)
    port_bytes = np.maximum(hbm_bytes, blocked_bytes(b, m, k, n, tile_side(chip.tc_buffer_bytes, elem_bytes), elem_bytes))
    hbm_s = hbm_bytes / chip.hbm_bytes_s
    single = np.maximum.reduce([
        core_cycles(b, m, k, n, chip, 1.0) / (chip.tc_clock_hz * rate),
        hbm_s,
        port_bytes / np.minimum(chip.glb_bytes_s, chip.core_port_bytes_s),
    ])
    parallel = np.maximum.reduce([
        core_cycles(b, m, k, n, chip, chip.n_tc) / (chip.tc_clock_hz * rate),
        hbm_s,
        port_bytes / np.minimum(chip.glb_bytes_s, chip.n_tc * chip.core_port_bytes_s),
    ])
    fixed_s = np.where(on_chip, 0.0, chip.matmul_fixed_s)
    return single + fixed_s, parallel + fixed_s
