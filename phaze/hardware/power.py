"""Thermal design power: every unit at its peak rate times its energy per operation, plus leakage.

WHAM (Adnan et al. 2024) ranks designs by throughput per TDP under area and power budgets; this is
the TDP it needs, vectorised over design points. Constants come from conf/hw/power/*.yaml.
"""

from __future__ import annotations

import numpy as np

PJ = 1e-12


def operand_fetches_per_mac(tc_rows, tc_cols):
    """Operands an R x C array takes per MAC: R + C a cycle for R x C MACs."""
    return 1.0 / np.asarray(tc_rows, dtype=float) + 1.0 / np.asarray(tc_cols, dtype=float)


def tdp_components_w(power, mac_per_s, vector_ops_per_s, glb_bytes_per_s, hbm_bytes_per_s, area_mm2,
                     hbm_pj_per_byte=None, serdes_bits_per_s=0.0, operand_fetches_per_s=0.0, fp8_matmul_ratio=0.0) -> dict:
    """Per-component power (W) at peak rates under the power config `power` (a PowerCfg). HBM energy is
    `hbm_pj_per_byte` per point when given (the stack model's generation), else `power.pj_per_hbm_byte`;
    `serdes_bits_per_s` is the off-chip links' traffic, both directions; `operand_fetches_per_s` the operands
    the tensor-core arrays take at their peak (operand_fetches_per_mac x MACs per second). FP8 tensor cores
    (`fp8_matmul_ratio` > 0) run that many FP8 MACs per bf16 MAC slot: the MACs draw the larger of the two peaks'
    power (an FP8 operand is half a bf16 one: twice as many deliveries of half the bits cost the same)."""
    hbm_pj = power.pj_per_hbm_byte if hbm_pj_per_byte is None else np.asarray(hbm_pj_per_byte, dtype=float)
    return {
        "macs": np.maximum(power.pj_per_mac, fp8_matmul_ratio * getattr(power, "pj_per_fp8_mac", 0.0)) * PJ * np.asarray(mac_per_s, dtype=float),
        "operands": getattr(power, "pj_per_operand_fetch", 0.0) * PJ * np.asarray(operand_fetches_per_s, dtype=float),
        "vector": power.pj_per_vector_op * PJ * np.asarray(vector_ops_per_s, dtype=float),
        "glb": power.pj_per_glb_byte * PJ * np.asarray(glb_bytes_per_s, dtype=float),
        "hbm": hbm_pj * PJ * np.asarray(hbm_bytes_per_s, dtype=float),
        "serdes": power.pj_per_serdes_bit * PJ * np.asarray(serdes_bits_per_s, dtype=float),
        "leakage": power.leakage_w_per_mm2 * np.asarray(area_mm2, dtype=float),
    }


def tdp_w(power, **rates) -> np.ndarray:
    """Total TDP in watts (the sum of `tdp_components_w`)."""
    return sum(tdp_components_w(power, **rates).values())


def perf_per_tdp(throughput, tdp_w_):
    """Throughput per watt of TDP (WHAM's objective); same units as `throughput`, per W."""
    tdp = np.asarray(tdp_w_, dtype=float)
    if np.any(tdp <= 0):
        raise ValueError("TDP must be positive to compute throughput per TDP")
    out = np.asarray(throughput, dtype=float) / tdp
    return out if out.ndim else float(out)
