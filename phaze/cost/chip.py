"""The accelerator columns the cost model reads, as float arrays shaped (1, n_points) for broadcasting."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.hardware.derating import DERATING_COLUMNS, check_derating
from phaze.hardware.rates import GB, GHZ, KIB, MIB

COST_COLUMNS = (
    "n_tc", "tc_rows", "tc_cols", "n_vc", "vc_width", "glb_mib", "hbm_gbps", "glb_gbps", "freq_ghz",
    "core_buffer_bytes_per_cycle", "tc_buffer_kib",
) + DERATING_COLUMNS
"""The point columns that change an operator's latency (HBM capacity, area and TDP do not)."""


@dataclass(frozen=True, eq=False)
class Chip:
    """Per-point rates in SI units, derated to what kernels achieve; every array has shape (1, n_points).

    `tc_clock_hz` is the clock times `matmul_efficiency` over `matmul_sustained_slowdown` (array steps per second at
    the matmul rate a training step achieves); the bandwidths are their peaks times `memory_efficiency`; vector lanes and
    special-function units (`sfu_lanes` per vector core) run at `freq_hz`, except in a fused attention kernel, whose
    softmax steps share its matmul steps' clock, `sustained_clock_hz` (the clock over `matmul_sustained_slowdown`).
    """

    n_tc: np.ndarray
    tc_rows: np.ndarray
    tc_cols: np.ndarray
    n_vc: np.ndarray
    vc_width: np.ndarray
    freq_hz: np.ndarray
    sustained_clock_hz: np.ndarray
    tc_clock_hz: np.ndarray
    hbm_bytes_s: np.ndarray
    glb_bytes_s: np.ndarray
    core_port_bytes_s: np.ndarray
    glb_bytes: np.ndarray
    tc_buffer_bytes: np.ndarray
    op_overhead_s: np.ndarray
    matmul_fixed_s: np.ndarray
    tile_rows: np.ndarray
    tile_cols: np.ndarray
    tile_fill_k: np.ndarray
    fp8_matmul_ratio: np.ndarray
    fp8_matmul_efficiency: np.ndarray
    sfu_lanes: np.ndarray
    mma_sync_fraction: np.ndarray

    @classmethod
    def from_matrix(cls, values: np.ndarray) -> "Chip":
        """From a (n_points, len(COST_COLUMNS)) matrix of the COST_COLUMNS."""
        col = {name: values[:, i][None, :].astype(np.float64) for i, name in enumerate(COST_COLUMNS)}
        freq_hz = col["freq_ghz"] * GHZ
        memory = col["memory_efficiency"]
        return cls(
            n_tc=col["n_tc"], tc_rows=col["tc_rows"], tc_cols=col["tc_cols"], n_vc=col["n_vc"], vc_width=col["vc_width"],
            freq_hz=freq_hz, sustained_clock_hz=freq_hz / col["matmul_sustained_slowdown"],
            tc_clock_hz=freq_hz * col["matmul_efficiency"] / col["matmul_sustained_slowdown"],
            hbm_bytes_s=col["hbm_gbps"] * GB * memory, glb_bytes_s=col["glb_gbps"] * GB * memory,
            core_port_bytes_s=col["core_buffer_bytes_per_cycle"] * freq_hz * memory,
            glb_bytes=col["glb_mib"] * MIB, tc_buffer_bytes=col["tc_buffer_kib"] * KIB,
            op_overhead_s=col["op_overhead_s"], matmul_fixed_s=col["matmul_fixed_s"], tile_rows=col["matmul_tile_rows"], tile_cols=col["matmul_tile_cols"],
            tile_fill_k=col["matmul_tile_fill_k"], fp8_matmul_ratio=col["fp8_matmul_ratio"],
            fp8_matmul_efficiency=col["fp8_matmul_efficiency"], sfu_lanes=col["sfu_lanes"],
            mma_sync_fraction=col["mma_sync_fraction"],
        )


def cost_signatures(points: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct COST_COLUMNS signature, each row's signature): points with one signature
    (differing only in HBM capacity, area or TDP) have the same operator latencies."""
    missing = [c for c in COST_COLUMNS if c not in points.columns]
    if missing:
        raise KeyError(f"the points frame lacks {missing}: build it with phaze.hardware.enumerate_space")
    values = points[list(COST_COLUMNS)].astype(np.float64)
    if values.isna().to_numpy().any():
        raise ValueError(f"the points frame has missing values in {list(COST_COLUMNS)}")
    if len(values) == 1:  # one point (an evaluation): its own signature, without a groupby's fixed cost
        return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    codes = values.groupby(list(COST_COLUMNS), sort=False).ngroup().to_numpy()  # hashing: O(n), no row sort
    _, first = np.unique(codes, return_index=True)
    return first, codes


def unique_chips(points: pd.DataFrame) -> tuple[Chip, np.ndarray]:
    """The distinct cost-relevant points and, for each input row, the index of its distinct point."""
    first, codes = cost_signatures(points)
    values = points[list(COST_COLUMNS)].to_numpy(dtype=np.float64)[first]
    check_derating({name: values[:, COST_COLUMNS.index(name)] for name in DERATING_COLUMNS}, "points column ")
    return Chip.from_matrix(values), codes
