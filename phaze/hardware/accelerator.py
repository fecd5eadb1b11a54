"""One accelerator design point as an immutable value (a row of the design-space frame)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from phaze.hardware.derating import OPTIONAL_DERATING_COLUMNS
from phaze.hardware.rates import GB, peak_matmul_flops, peak_vector_ops


@dataclass(frozen=True)
class Accelerator:
    """PHAZE's template: `n_tc` tensor cores of `tc_rows x tc_cols` MACs, `n_vc` vector cores of
    `vc_width` lanes, a global buffer, HBM and a clock; area and TDP from the configured models; the
    derating of its peak rates (phaze.hardware.derating). Inter-chip links are the cluster's
    (`phaze.cost.network.Network`), shared by every point."""

    n_tc: int
    tc_rows: int
    tc_cols: int
    n_vc: int
    vc_width: int
    glb_mib: float
    hbm_gib: float
    hbm_gbps: float
    glb_gbps: float
    freq_ghz: float
    core_buffer_bytes_per_cycle: float
    tc_buffer_kib: float
    vc_buffer_kib: float
    area_mm2: float
    tdp_w: float
    matmul_efficiency: float
    memory_efficiency: float
    op_overhead_s: float
    matmul_fixed_s: float = 0.0
    matmul_tile_rows: int = 0
    matmul_tile_cols: int = 0
    matmul_tile_fill_k: int = 0
    fp8_matmul_ratio: float = 0.0
    matmul_sustained_slowdown: float = 1.0
    fp8_matmul_efficiency: float = 1.0
    sfu_lanes: int = 0
    mma_sync_fraction: float = 1.0

    @classmethod
    def from_row(cls, row) -> "Accelerator":
        """From a row of `enumerate_space` (a pandas Series, a dict or a namedtuple)."""
        get = row.get if hasattr(row, "get") else lambda name: getattr(row, name)
        values = {}
        for f in fields(cls):
            value = get(f.name)
            if value is None and f.name in OPTIONAL_DERATING_COLUMNS:
                continue
            if value is None:
                raise KeyError(f"the row has no column {f.name!r}")
            values[f.name] = int(value) if f.type == "int" else float(value)
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def peak_matmul_flops(self) -> float:
        return float(peak_matmul_flops(self.n_tc, self.tc_rows, self.tc_cols, self.freq_ghz))

    @property
    def peak_vector_flops(self) -> float:
        return float(peak_vector_ops(self.n_vc, self.vc_width, self.freq_ghz))

    @property
    def achievable_matmul_flops(self) -> float:
        """The tensor-core peak times `matmul_efficiency`, over `matmul_sustained_slowdown`: the rate of the arrays'
        steady state in a training step, which large matmuls approach (CTA tiles only add time to it: waves, pipeline fill)."""
        return self.peak_matmul_flops * self.matmul_efficiency / self.matmul_sustained_slowdown

    @property
    def hbm_bytes_s(self) -> float:
        return self.hbm_gbps * GB

    @property
    def achievable_hbm_bytes_s(self) -> float:
        """The HBM peak times `memory_efficiency`: what streaming kernels reach."""
        return self.hbm_bytes_s * self.memory_efficiency

    @property
    def glb_bytes_s(self) -> float:
        return self.glb_gbps * GB
