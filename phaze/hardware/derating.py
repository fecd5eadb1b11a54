"""How far a real chip falls short of its ideal roofline: the achievable fraction of the tensor-core
peak and of the memory bandwidths, a fixed time per operator (kernel launch and tail) and per matmul kernel,
and the CTA tiles a GPU computes matmuls in; the rate of its tensor cores on FP8 GEMMs; how much slower its
tensor cores step when GEMMs follow each other for seconds (a power-limited clock); the special-function units its
fused attention kernels compute their exponentials on, and the rate of warp-level MMA against the chip's own.

PHAZE's abstract accelerators are ideal (1, 1, 0 s, 0 s, no tiles, no slowdown, no special-function units, warp-level
MMA at full rate); the GPU presets take measured values
(conf/hw/a100.yaml, h100.yaml, docs/hardware.md §5).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

MMA_SYNC_COLUMN = "mma_sync_fraction"
"""The tensor cores' rate with warp-level MMA instructions (Ampere's mma.sync) over the rate they reach with the chip's
own (1: the same). H100: "the older mma.sync instruction can only reach about 2/3 the peak throughput of the Hopper
Tensor Cores" (FlashAttention-3, Shah et al., arXiv 2407.08608, section 2.2), where wgmma reaches it. It prices the
fused attention kernels written with mma.sync (FlashAttention-2: train.attention_warp_mma)."""
EFFICIENCY_COLUMNS = ("matmul_efficiency", "memory_efficiency", "fp8_matmul_efficiency", MMA_SYNC_COLUMN)
"""Fractions in (0, 1]: of the tensor-core peak, of the HBM and on-chip buffer bandwidths, of the bf16
tile efficiency that FP8 GEMMs reach (FP8_EFFICIENCY_COLUMN), and of the rate warp-level MMA reaches (MMA_SYNC_COLUMN)."""
OVERHEAD_COLUMN = "op_overhead_s"
"""Seconds >= 0 added to every tensor- and vector-core operator."""
MATMUL_FIXED_COLUMN = "matmul_fixed_s"
"""Seconds >= 0 more of every matmul kernel (operand prologue, epilogue): a GEMM's latency floor."""
TILE_COLUMNS = ("matmul_tile_rows", "matmul_tile_cols", "matmul_tile_fill_k")
"""The output block one tensor core computes at a time (a GPU's CTA tile, in elements; 0: one pass of its
array, PHAZE's accelerator): a matmul's output is cut into such blocks, dealt to the cores in waves; each
block also spends the time of `matmul_tile_fill_k` more reduction steps filling and draining its pipeline
and writing its outputs."""
FP8_COLUMN = "fp8_matmul_ratio"
"""The tensor cores' FP8 GEMM peak over their bf16 peak (0: no FP8; H100: 1979 / 989.4 = 2, NVIDIA H100
datasheet, dense). FP8 GEMMs run at this multiple of the bf16 rate, times FP8_EFFICIENCY_COLUMN."""
FP8_EFFICIENCY_COLUMN = "fp8_matmul_efficiency"
"""The fraction of the bf16 tile efficiency (`matmul_efficiency`) that FP8 GEMMs reach (1: the same; an H100 measured
0.90: its FP8 GEMMs run 1.77 times as fast as bf16 ones at the median, not 2; experiments/data/h100_fp8.csv)."""
SUSTAINED_COLUMN = "matmul_sustained_slowdown"
"""How many times longer the tensor cores' steps take when GEMMs run back to back for seconds, as in a training
step, than in one kernel alone (>= 1; 1: the chip never reaches its power limit). A GPU held at its power limit
lowers its clock (an H100 SXM at 700 W: 1,980 MHz alone, 1,125-1,590 MHz back to back; experiments/data/)."""
SFU_COLUMN = "sfu_lanes"
"""Special-function results (exponential, reciprocal, ...) per clock per vector core, beside its `vc_width` lanes
(0: none, PHAZE's vector core, whose lanes evaluate exponentials in many cycles). A100 and H100: 16 per SM per clock
(CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table: base-2 exponential, compute capabilities 8.0
and 9.0). FlashAttention's fused softmax computes its exponentials on them (phaze.cost.vector)."""
CLOCK_POWER_EXPONENT = 3.0
"""How a chip's power that follows its clock grows with the clock: dynamic CMOS power is activity x C x V^2 x f
(Hennessy & Patterson, Computer Architecture, 6th ed., section 1.5), and a GPU lowering its clock under its power limit
lowers its voltage with it along its voltage-frequency curve (V about proportional to f over that range): f^3."""
KERNEL_ALONE = f"hw.{SUSTAINED_COLUMN}=1"
"""The override that predicts one kernel timed alone (a single-kernel measurement: MAMF, OpenXLA's table, one GEMM
after an L2 clear) rather than inside a training step's back-to-back GEMMs."""
DERATING_COLUMNS = (EFFICIENCY_COLUMNS + (OVERHEAD_COLUMN, MATMUL_FIXED_COLUMN) + TILE_COLUMNS
                    + (FP8_COLUMN, SUSTAINED_COLUMN, SFU_COLUMN))
OPTIONAL_DERATING_COLUMNS = ((MATMUL_FIXED_COLUMN,) + TILE_COLUMNS
                             + (FP8_COLUMN, FP8_EFFICIENCY_COLUMN, SUSTAINED_COLUMN, SFU_COLUMN, MMA_SYNC_COLUMN))
"""The columns a points frame may lack (an Accelerator then takes its ideal default)."""


def capped_slowdown(slowdown: float, sustained_power_w: float | None, power_limit_w: float | None,
                    clock_floor_power_w: float) -> float:
    """The tensor cores' sustained slowdown under the board power limit `power_limit_w` (W), from `slowdown`, measured
    at `sustained_power_w`: of the board's power, all but `clock_floor_power_w` follows the SM clock as its cube
    (CLOCK_POWER_EXPONENT), so the sustained clock scales by ((limit - floor) / (measured - floor))^(1/3) and the
    slowdown by its inverse, never below 1 (a kernel alone). No limit (None) or none measured: `slowdown` itself."""
    if power_limit_w is None or sustained_power_w is None:
        return float(slowdown)
    ratio = (float(sustained_power_w) - clock_floor_power_w) / (float(power_limit_w) - clock_floor_power_w)
    return max(1.0, float(slowdown) * ratio ** (1.0 / CLOCK_POWER_EXPONENT))


def check_derating(values: Mapping[str, object], where: str) -> None:
    """Raise ValueError naming the field and its allowed range when a value (scalar or array) is out of it.

    `where` prefixes the field name in the message: "hw." for a config, "points column " for a frame.
    """
    for name in EFFICIENCY_COLUMNS:
        v = np.atleast_1d(np.asarray(values[name], dtype=np.float64))
        bad = ~((v > 0) & (v <= 1))
        if bad.any():
            raise ValueError(f"{where}{name} must be in (0, 1], got {v[bad][0]}")
    for name in (OVERHEAD_COLUMN, MATMUL_FIXED_COLUMN):
        v = np.atleast_1d(np.asarray(values[name], dtype=np.float64))
        bad = ~(np.isfinite(v) & (v >= 0))
        if bad.any():
            raise ValueError(f"{where}{name} must be a finite number of seconds >= 0, got {v[bad][0]}")
    v = np.atleast_1d(np.asarray(values[FP8_COLUMN], dtype=np.float64))
    bad = ~((v == 0) | (v >= 1))
    if bad.any():
        raise ValueError(f"{where}{FP8_COLUMN} must be 0 (no FP8) or >= 1 (FP8 peak over bf16 peak), got {v[bad][0]}")
    v = np.atleast_1d(np.asarray(values[SUSTAINED_COLUMN], dtype=np.float64))
    bad = ~(np.isfinite(v) & (v >= 1))
    if bad.any():
        raise ValueError(f"{where}{SUSTAINED_COLUMN} must be a finite number >= 1 (1: no power-limited slowdown), got {v[bad][0]}")
    for name in TILE_COLUMNS:
        v = np.atleast_1d(np.asarray(values[name], dtype=np.float64))
        bad = ~((v >= 0) & (v == np.floor(v)))
        if bad.any():
            raise ValueError(f"{where}{name} must be a whole number of elements >= 0 (0: the core's array), got {v[bad][0]}")
    v = np.atleast_1d(np.asarray(values[SFU_COLUMN], dtype=np.float64))
    bad = ~((v >= 0) & (v == np.floor(v)))
    if bad.any():
        raise ValueError(f"{where}{SFU_COLUMN} must be a whole number of results per clock >= 0 (0: no special-function "
                         f"units), got {v[bad][0]}")
