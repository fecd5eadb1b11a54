"""The numbers behind docs/hardware.md: reference area, presets, space sizes, roofline sanity.

    python experiments/hardware_table.py

Everything is computed from the configs in conf/hw (nothing is typed in): the TPUv4-like reference
area and its breakdown under each area model, each preset's peak rates, area and TDP, the number of
valid points of each grid, and the fraction of peak a large matmul and a large elementwise op reach.
"""

from __future__ import annotations

import pandas as pd

from phaze.config import compose_config
from phaze.cost import Network, op_latencies
from phaze.hardware import enumerate_space, reference_area_mm2
from phaze.hardware.area import UM2_PER_MM2, area_components_um2
from phaze.hardware.power import tdp_components_w
from phaze.hardware.rates import FLOPS_PER_MAC, GB
from phaze.hardware.space import TPUV4_LIKE, describe_points
from phaze.workload.graph import OP_COLUMNS

MODELS = (("phaze", "horowitz_45nm"), ("modern_7nm", "modern_7nm"))
PRESETS = ("tpuv4", "a100", "h100")
MATMUL_SIDE = 8192
ELEMENTWISE_NUMEL = 2**28


def breakdown(hw, row) -> tuple[dict, dict]:
    keys = ("n_tc", "tc_rows", "tc_cols", "n_vc", "vc_width", "tc_buffer_kib", "vc_buffer_kib", "glb_mib", "hbm_gib")
    area = area_components_um2(hw.area, **{k: row[k] for k in keys})
    power = tdp_components_w(
        hw.power, mac_per_s=row["peak_matmul_flops"] / FLOPS_PER_MAC, vector_ops_per_s=row["peak_vector_flops"],
        glb_bytes_per_s=row["glb_gbps"] * GB, hbm_bytes_per_s=row["hbm_gbps"] * GB, area_mm2=row["area_mm2"],
    )
    return {k: float(v) / UM2_PER_MM2 for k, v in area.items()}, {k: float(v) for k, v in power.items()}


def big_ops() -> pd.DataFrame:
    n, e = MATMUL_SIDE, 2
    mm = dict(target="mm", kind="matmul", in_shapes=((n, n), (n, n)), numel_out=n * n, flops=2.0 * n**3,
              bytes_read=2.0 * e * n * n, bytes_written=float(e * n * n), mm_b=1, mm_m=n, mm_k=n, mm_n=n)
    numel = ELEMENTWISE_NUMEL
    add = dict(target="add", kind="elementwise", in_shapes=((numel,),) * 2, numel_out=numel,
               flops=float(numel), bytes_read=2.0 * e * numel, bytes_written=float(e * numel))
    rows = [{**{c: 0 for c in OP_COLUMNS}, **r} for r in (mm, add)]
    return pd.DataFrame(rows, columns=list(OP_COLUMNS))


def main() -> None:
    print("## TPUv4-like reference point (8 TC 128x128, 2 VC x128, 128 MiB, 32 GiB HBM)")
    for area, power in MODELS:
        hw = compose_config(f"hw/area={area}", f"hw/power={power}").hw
        row = describe_points(hw, pd.DataFrame([TPUV4_LIKE])).iloc[0]
        a, p = breakdown(hw, row)
        parts = ", ".join(f"{k} {v:.3f}" for k, v in a.items())
        print(f"area={area}: {reference_area_mm2(hw):.4f} mm^2 ({parts}); TDP ({power}) {row['tdp_w']:.1f} W "
              f"({', '.join(f'{k} {v:.1f}' for k, v in p.items())})")

    print("\n## Space sizes")
    for grid in ("phaze_grid", "tiny_grid"):
        for area, power in MODELS:
            hw = compose_config(f"hw={grid}", f"hw/area={area}", f"hw/power={power}").hw
            space = enumerate_space(hw)
            if space.empty:
                print(f"hw={grid} area={area}: no valid point (budget {hw.area_budget_mm2} mm^2)")
                continue
            per_hbm = space.groupby("hbm_gib").size().to_dict()
            tdp = space["tdp_w"]
            print(f"hw={grid} area={area}: {len(space):,} valid points {per_hbm}, TDP {tdp.min():.1f}..{tdp.max():.1f} W")

    print("\n## Presets")
    ops = big_ops()
    net = Network.from_cfg(compose_config().cluster)
    print("| preset | area model | peak matmul TFLOP/s | peak vector Top/s | HBM GB/s | GLB MiB | area mm^2 | TDP W | "
          f"{MATMUL_SIDE}^3 matmul % peak | 2^28 add % HBM |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        default_area = compose_config(f"hw={preset}").hw.area.name
        for area, power in MODELS:
            hw = compose_config(f"hw={preset}", f"hw/area={area}", f"hw/power={power}").hw
            point = enumerate_space(hw)
            row = point.iloc[0]
            lat = op_latencies(ops, point, net, tp=1).parallel_s[:, 0]
            mm_pct = 100 * ops["flops"][0] / lat[0] / row["peak_matmul_flops"]
            add_pct = 100 * (ops["bytes_read"][1] + ops["bytes_written"][1]) / lat[1] / (row["hbm_gbps"] * GB)
            mark = " (default)" if area == default_area else ""
            print(f"| {preset} | {area}{mark} | {row['peak_matmul_flops'] / 1e12:.1f} | {row['peak_vector_flops'] / 1e12:.2f} | "
                  f"{row['hbm_gbps']:.0f} | {row['glb_mib']} | {row['area_mm2']:.1f} | {row['tdp_w']:.0f} | {mm_pct:.1f} | {add_pct:.1f} |")


if __name__ == "__main__":
    main()
