"""HBM as stacks: what one stack of each generation brings (capacity, bandwidth, PHY area, energy per bit),
so that a design point's HBM capacity, bandwidth, PHY area and power all follow from its stack count.

Every stack has a 1024-bit interface (JEDEC JESD235 / JESD238), so its bandwidth is 1024 bits times the
per-pin data rate. The table holds the products that the presets and `hw=modern_grid` use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.hardware.area import UM2_PER_MM2

BITS_PER_BYTE = 8
INTERFACE_BITS_PER_STACK = 1024
"""Data bits of one stack's interface, every generation (JEDEC JESD235 HBM/HBM2, JESD238 HBM3)."""

PHY_MM2_PER_STACK = 10.45
"""Area of one stack's PHY on the logic die: the HBM2e PHY of LLMCompass's area model (Zhang et al., "LLMCompass",
ISCA 2024, area model constants). PHYs do not shrink with the logic node, and the HBM3 and HBM3E PHYs keep the
1024-bit interface at the same microbump field, so every generation is charged this area (an assumption for them)."""

HBM2_PJ_PER_BIT = 3.9
"""HBM2 access and I/O energy (O'Connor et al., "Fine-Grained DRAM", MICRO 2017)."""
HBM3_CORE_VOLTAGE_SCALE = (1.1 / 1.2) ** 2
"""HBM3 lowers the DRAM core supply from HBM2E's 1.2 V to 1.1 V (and the I/O swing from 1.2 V to 0.4 V;
Synopsys, "What is HBM3"): C*V^2 on the whole HBM2 energy, ignoring the I/O saving, gives an upper bound."""


@dataclass(frozen=True)
class HbmGeneration:
    """One stack of a generation: capacity (GiB), data rate per pin (Gb/s), PHY area (mm^2) and energy (pJ per bit moved)."""

    gib_per_stack: float
    gbit_s_per_pin: float
    phy_mm2_per_stack: float
    pj_per_bit: float
    source: str

    @property
    def gbps_per_stack(self) -> float:
        """GB/s of one stack: 1024 pins at the per-pin data rate."""
        return INTERFACE_BITS_PER_STACK * self.gbit_s_per_pin / BITS_PER_BYTE


HBM_GENERATIONS = {
    "hbm2": HbmGeneration(8.0, 2.4, PHY_MM2_PER_STACK, HBM2_PJ_PER_BIT,
                          "Samsung Aquabolt HBM2 (2018): 8 GB 8-high stack, 2.4 Gb/s per pin, 307 GB/s"),
    "hbm2e": HbmGeneration(16.0, 3.2, PHY_MM2_PER_STACK, HBM2_PJ_PER_BIT,
                           "Samsung Flashbolt HBM2E (2020): 16 GB 8-high stack, 3.2 Gb/s per pin, 410 GB/s (JESD235C rate)"),
    "hbm3": HbmGeneration(16.0, 6.4, PHY_MM2_PER_STACK, HBM2_PJ_PER_BIT * HBM3_CORE_VOLTAGE_SCALE,
                          "JEDEC JESD238 HBM3 (2022): 6.4 Gb/s per pin, 819 GB/s; SK hynix HBM3 16 GB 8-high stack"),
    "hbm3e": HbmGeneration(24.0, 9.2, PHY_MM2_PER_STACK, HBM2_PJ_PER_BIT * HBM3_CORE_VOLTAGE_SCALE,
                           "Micron HBM3E (2024): 24 GB 8-high stack, 9.2 Gb/s per pin, 1.2 TB/s; SK hynix HBM3E 1.18 TB/s"),
}
"""Per-generation stack constants. HBM2 and HBM2E share the HBM2 energy; HBM3E, an HBM3 extension at a higher
pin rate, shares HBM3's (no per-generation energy per bit was found published)."""


def generation(name: str) -> HbmGeneration:
    """The generation called `name`; ValueError naming hw.hbm_generation and the allowed names otherwise."""
    if name not in HBM_GENERATIONS:
        raise ValueError(f"hw.hbm_generation={name!r}: allowed values are {', '.join(HBM_GENERATIONS)}")
    return HBM_GENERATIONS[name]


def stack_columns(stacks, generations) -> dict:
    """Per point: HBM capacity (GiB), bandwidth (GB/s), PHY area per stack (um^2) and energy per byte (pJ)."""
    stacks = np.asarray(stacks, dtype=float)
    gens = [generation(str(g)) for g in np.atleast_1d(np.asarray(generations, dtype=object))]
    per = {name: np.array([getattr(g, name) for g in gens], dtype=float)
           for name in ("gib_per_stack", "gbps_per_stack", "phy_mm2_per_stack", "pj_per_bit")}
    return {
        "hbm_gib": stacks * per["gib_per_stack"],
        "hbm_gbps": stacks * per["gbps_per_stack"],
        "hbm_phy_um2_per_stack": per["phy_mm2_per_stack"] * UM2_PER_MM2,
        "hbm_pj_per_byte": per["pj_per_bit"] * BITS_PER_BYTE,
    }

