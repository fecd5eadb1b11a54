"""hw=: the accelerator space (a point or a grid) with its area and power constants (hw/area=, hw/power=)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from phaze.config_values import ConfigError, choice, fraction, positive
from phaze.schema.choices import HwKind
from phaze.schema.fields import MISSING, complete


@dataclass
class AreaCfg:
    """Per-component area constants (um^2 unless the name says otherwise); conf/hw/area/*.yaml."""

    name: str = MISSING
    technology: str = ""
    source: str = ""
    tc_pe_um2: float = MISSING
    # One FP8 multiplier: FP8 tensor cores (hw.fp8_matmul_ratio r > 0) add r of them to each PE.
    tc_fp8_multiplier_um2: float = 0.0
    vc_lane_um2: float = MISSING
    # Per-core SRAM (KiB -> um^2) and global buffer (MiB -> um^2) tables, as sizes and areas.
    l2_kib: List[float] = field(default_factory=list)
    l2_um2: List[float] = field(default_factory=list)
    glb_mib: List[float] = field(default_factory=list)
    glb_um2: List[float] = field(default_factory=list)
    # SRAM density (um^2 per KiB), used for the per-core buffers and the global buffer when their tables are empty.
    sram_um2_per_kib: float = 0.0
    # Off-chip interface and interconnect, charged per HBM stack and per core (tensor and vector). Under the
    # stack model (hw.hbm_stacks) the PHY is the HBM generation's (phaze.hardware.hbm) and the capacity per stack too.
    hbm_phy_um2_per_stack: float = 0.0
    hbm_gib_per_stack: float = 16.0
    noc_um2_per_core: float = 0.0
    # Placed logic over its cell area: standard cells fill this fraction of a logic block, routing the rest (1: none).
    logic_utilization: float = 1.0
    # Control of one programmable (vector) core: instruction fetch, decode, scheduling, load/store (cell area).
    vc_control_um2: float = 0.0
    # One HBM stack's memory controller on the logic die (cell area; the PHY is the generation's).
    hbm_controller_um2_per_stack: float = 0.0
    # One chip-to-chip SerDes lane (NVLink, ICI) and one PCIe lane: PHY and link controller.
    serdes_um2_per_lane: float = 0.0
    pcie_um2_per_lane: float = 0.0

    def __post_init__(self) -> None:
        """Positive core areas, a logic utilisation in (0, 1], no negative area."""
        if not complete(self):
            return
        for name in ("tc_pe_um2", "vc_lane_um2"):
            positive(getattr(self, name), f"hw.area.{name}")
        positive(self.tc_fp8_multiplier_um2, "hw.area.tc_fp8_multiplier_um2", allow_zero=True)
        fraction(self.logic_utilization, "hw.area.logic_utilization")
        for name in ("vc_control_um2", "hbm_controller_um2_per_stack", "serdes_um2_per_lane", "pcie_um2_per_lane"):
            positive(getattr(self, name), f"hw.area.{name}", allow_zero=True)


@dataclass
class PowerCfg:
    """TDP model constants (energy per operation at peak rate plus leakage); conf/hw/power/*.yaml."""

    name: str = MISSING
    technology: str = ""
    source: str = ""
    pj_per_mac: float = MISSING
    # One FP8 multiply-accumulate (fp32 accumulation): at the FP8 peak, FP8 tensor cores draw this per MAC.
    pj_per_fp8_mac: float = 0.0
    pj_per_vector_op: float = MISSING
    pj_per_glb_byte: float = MISSING
    pj_per_hbm_byte: float = MISSING
    leakage_w_per_mm2: float = MISSING
    # Energy of one bit over a chip-to-chip SerDes lane (transmitter and receiver).
    pj_per_serdes_bit: float = 0.0
    # Energy of delivering one operand to a tensor-core array's edge (buffer or register read, the wires to the array,
    # its clocking): an R x C array takes R + C operands a cycle for R x C MACs, (1/R + 1/C) deliveries per MAC.
    pj_per_operand_fetch: float = 0.0

    def __post_init__(self) -> None:
        """No negative energy or leakage."""
        if not complete(self):
            return
        for name in ("pj_per_mac", "pj_per_fp8_mac", "pj_per_vector_op", "pj_per_glb_byte", "pj_per_hbm_byte", "leakage_w_per_mm2",
                     "pj_per_serdes_bit", "pj_per_operand_fetch"):
            positive(getattr(self, name), f"hw.power.{name}", allow_zero=True)


@dataclass
class HwCfg:
    """An accelerator point or a grid of them (lists are the axes of the grid)."""

    name: str = MISSING
    kind: str = "grid"  # grid | point
    n_tc: List[int] = field(default_factory=list)
    tc_rows: List[int] = field(default_factory=list)
    tc_cols: List[int] = field(default_factory=list)
    n_vc: List[int] = field(default_factory=list)
    # Empty: vector width tied to the tensor-core width (PHAZE); otherwise its own axis.
    vc_width: List[int] = field(default_factory=list)
    glb_mib: List[int] = field(default_factory=list)
    # HBM capacity (GiB) axis at a fixed bandwidth (GB/s): PHAZE's model. Under the stack model (below) a
    # point's capacity and bandwidth follow from its stacks; a point preset may still give both as its
    # product's own (stacks run below their rated pin speed); null hbm_gbps: the stacks' rated bandwidth.
    hbm_gib: List[int] = field(default_factory=list)
    hbm_gbps: Optional[float] = None
    # The stack model (both lists or neither): axes of stack counts and HBM generations (phaze.hardware.hbm:
    # hbm2, hbm2e, hbm3, hbm3e); capacity, bandwidth, PHY area and HBM power follow from them.
    hbm_stacks: List[int] = field(default_factory=list)
    hbm_generation: List[str] = field(default_factory=list)
    glb_gbps: float = MISSING
    freq_ghz: float = MISSING
    # Bandwidth of one core's port to the global buffer (bytes per cycle; PHAZE: 64 words of 2 bytes).
    core_buffer_bytes_per_cycle: float = 128.0
    # Per-core SRAM: bytes per MAC (tensor core) or per lane (vector core), at least min KiB (PHAZE: w*d/64 KiB, >= 1 KiB).
    core_buffer_bytes_per_pe: float = 16.0
    core_buffer_min_kib: float = 1.0
    # Area budget in mm^2; null: the TPUv4-like reference point's area under the area model.
    area_budget_mm2: Optional[float] = None
    area_min_fraction: float = 0.3
    # PHAZE exempts single-tensor-core and single-vector-core points from the lower area bound.
    area_min_exempt_single_core: bool = True
    power_budget_w: Optional[float] = None
    # The chip a search's answer is compared with: a point preset of conf/hw (e.g. tpuv4_modern, h100), evaluated
    # under its own constants; null: the TPUv4-like reference point under this space's constants (PHAZE's baseline).
    baseline: Optional[str] = None
    # What the die holds beyond the enabled chip, for yield (area and leakage only): tensor and vector cores each,
    # HBM PHY sites without a stack, global-buffer MiB.
    spare_cores: int = 0
    spare_hbm_stacks: int = 0
    spare_glb_mib: float = 0.0
    # Off-chip lanes on the die: chip-to-chip SerDes lanes per direction at their rate (Gb/s), and PCIe lanes.
    interconnect_lanes: int = 0
    interconnect_gbit_s_per_lane: float = 0.0
    pcie_lanes: int = 0
    # True: independent operators may run at once on subsets of the cores (PHAZE's accelerator, the
    # layer ILP decides). False: one operator at a time over all cores (a GPU launching kernels on
    # one CUDA stream, with blocking tensor-parallel collectives, as Megatron-LM does).
    inter_op_parallel: bool = True
    # Achievable fraction of the tensor-core peak for large matmuls, in (0, 1] (1: ideal roofline; tiling losses apply on top).
    matmul_efficiency: float = 1.0
    # Achievable fraction of the HBM and on-chip buffer bandwidths, in (0, 1] (1: ideal roofline).
    memory_efficiency: float = 1.0
    # Fixed seconds added to every compute (tensor- or vector-core) operator: kernel launch and tail; >= 0.
    op_overhead_s: float = 0.0
    # Fixed seconds more of every matmul kernel (its first operand tiles' load and its last tiles' epilogue); >= 0.
    matmul_fixed_s: float = 0.0
    # The output block a tensor core computes at a time (a GPU's CTA tile, elements; 0: one pass of its array):
    # a matmul's blocks are dealt to the cores in waves, the last one partly idle (wave quantization).
    matmul_tile_rows: int = 0
    matmul_tile_cols: int = 0
    # Reduction steps' worth of time each tile spends filling / draining its pipeline and writing its outputs.
    matmul_tile_fill_k: int = 0
    # The tensor cores' FP8 GEMM peak over their bf16 peak: 0 = no FP8 (train.precision=fp8 needs >= 1).
    fp8_matmul_ratio: float = 0.0
    # The fraction of the bf16 tile efficiency (matmul_efficiency) FP8 GEMMs reach, in (0, 1]; 1: the same.
    fp8_matmul_efficiency: float = 1.0
    # How many times longer the tensor cores' steps take when GEMMs run back to back for seconds (a training step)
    # than in one kernel alone: the power limit lowers the clock. >= 1; 1: no power-limited slowdown (PHAZE).
    matmul_sustained_slowdown: float = 1.0
    # The board power limit (W) matmul_sustained_slowdown was measured at (H100 SXM: 700); null: none measured, and no
    # other limit can be asked for.
    sustained_power_w: Optional[float] = None
    # The board power that does not follow the SM clock (W, >= 0): leakage at the lowest voltage, HBM idle, the board.
    clock_floor_power_w: float = 0.0
    # The board power limit the chip runs under (W); null: sustained_power_w. The power that follows the clock goes as
    # its cube, so the clock, and with it the tensor cores' steps, scale from the measured slowdown by
    # ((sustained_power_w - clock_floor_power_w) / (power_limit_w - clock_floor_power_w))^(1/3), never below one kernel
    # alone (phaze.hardware.derating.capped_slowdown).
    power_limit_w: Optional[float] = None
    # Special-function results (exponential, reciprocal) per clock per vector core, beside its lanes; a whole number
    # >= 0; 0: none (PHAZE's vector core). FlashAttention's fused softmax computes its exponentials on them.
    sfu_lanes: int = 0
    # The tensor cores' rate with warp-level MMA (mma.sync) over their own instructions' rate, in (0, 1]; 1: the same.
    # Fused attention kernels written with it (FlashAttention-2: train.attention_warp_mma) run at this fraction.
    mma_sync_fraction: float = 1.0
    # How much longer compute takes while a collective runs beside it on the chip (the collective's kernels hold
    # cores and memory bandwidth): 0.189 = 18.9% longer. 0: collectives cost the compute nothing (PHAZE; a chip
    # whose links have their own DMA engines).
    overlap_slowdown: float = 0.0
    area: AreaCfg = MISSING
    power: PowerCfg = MISSING
    source: str = ""

    def __post_init__(self) -> None:
        """The chip's own scalar rules: a known kind, positive rates and buffers, fractions and budgets in range, no
        negative spares. The axes, HBM, derating, budget and baseline rules read the hardware model: phaze.checks.hardware."""
        if not complete(self):
            return
        choice(self.kind, "hw.kind", HwKind.values())
        for name in ("glb_gbps", "freq_ghz", "core_buffer_bytes_per_cycle", "core_buffer_bytes_per_pe"):
            positive(getattr(self, name), f"hw.{name}")
        positive(self.core_buffer_min_kib, "hw.core_buffer_min_kib", allow_zero=True)
        positive(self.overlap_slowdown, "hw.overlap_slowdown", allow_zero=True)
        if not 0 <= self.area_min_fraction <= 1:
            raise ConfigError(f"hw.area_min_fraction={self.area_min_fraction}: allowed values are in [0, 1]")
        for name in ("area_budget_mm2", "power_budget_w"):
            if getattr(self, name) is not None:
                positive(getattr(self, name), f"hw.{name}")
        for name in ("spare_cores", "spare_hbm_stacks", "spare_glb_mib", "interconnect_lanes", "interconnect_gbit_s_per_lane", "pcie_lanes"):
            positive(getattr(self, name), f"hw.{name}", allow_zero=True)
        self.check_power_limit()

    def check_power_limit(self) -> None:
        """A power limit needs the limit the slowdown was measured at, and both lie above the power that does not follow
        the clock (a limit at or below it leaves the clock nothing: no sustained clock follows)."""
        positive(self.clock_floor_power_w, "hw.clock_floor_power_w", allow_zero=True)
        floor = float(self.clock_floor_power_w)
        if self.sustained_power_w is not None and not self.sustained_power_w > floor:
            raise ConfigError(f"hw.sustained_power_w={self.sustained_power_w!r}: allowed values are numbers > "
                              f"hw.clock_floor_power_w={floor:g} W, or null")
        if self.power_limit_w is None:
            return
        if self.sustained_power_w is None:
            raise ConfigError(f"hw.power_limit_w={self.power_limit_w!r}: hw={self.name} has no hw.sustained_power_w (the "
                              f"limit its hw.matmul_sustained_slowdown was measured at); allowed value is null")
        if isinstance(self.power_limit_w, bool) or not self.power_limit_w > floor:
            raise ConfigError(f"hw.power_limit_w={self.power_limit_w!r}: allowed values are numbers > the chip's power that "
                              f"does not follow its clock, hw.clock_floor_power_w={floor:g} W, or null "
                              f"(hw.sustained_power_w={self.sustained_power_w:g} W)")
