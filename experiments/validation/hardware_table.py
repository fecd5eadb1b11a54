"""The numbers behind docs/hardware.md: reference area, presets, space sizes, HBM stacks, the presets'
computed against published die area and TDP, roofline sanity.

    python -m experiments.validation.hardware_table

Everything is computed from the configs in conf/hw and phaze/hardware/hbm.py (nothing is typed in): the
TPUv4-like reference area and its breakdown under each area model, each preset's peak rates, area and TDP,
the number of valid points of each grid, the HBM generations, each modern preset's area and TDP by component
against its published die size and TDP, and the fraction of peak a large matmul and a large elementwise op reach.
"""

from __future__ import annotations

import pandas as pd

from phaze.config import compose_config
from phaze.cost import Network, op_latencies
from phaze.hardware import enumerate_space, reference_area_mm2
from phaze.hardware.area import UM2_PER_MM2
from phaze.hardware.hbm import HBM_GENERATIONS
from phaze.hardware.published import DIES, PUBLISHED, RETICLE_MM2
from phaze.hardware.rates import GB
from phaze.hardware.space import describe_points, grid_axes, point_components, reference_point
from phaze.workload.graph import OP_COLUMNS

MODELS = (("phaze", "horowitz_45nm"), ("modern_7nm", "modern_7nm"), ("modern_5nm", "modern_5nm"))
PRESETS = ("tpuv4", "tpuv4_modern", "tpuv5p", "tpuv5e", "a100", "h100", "h200", "b200", "gb200")
MATMUL_SIDE = 8192
ELEMENTWISE_NUMEL = 2**28


def breakdown(hw, row) -> tuple[dict, dict]:
    """One described point's area (mm^2) and TDP (W) by component."""
    area, power = point_components(hw, pd.DataFrame([row]))
    scalar = lambda v: float(v[0]) if getattr(v, "ndim", 0) else float(v)  # noqa: E731
    return {k: scalar(v) / UM2_PER_MM2 for k, v in area.items()}, {k: scalar(v) for k, v in power.items()}


def stacks_table() -> None:
    print("| generation | GiB per stack | Gb/s per pin | GB/s per stack | PHY mm^2 per stack | pJ per bit | source |")
    print("|---|---|---|---|---|---|---|")
    for name, g in HBM_GENERATIONS.items():
        print(f"| {name} | {g.gib_per_stack:g} | {g.gbit_s_per_pin:g} | {g.gbps_per_stack:.1f} | {g.phy_mm2_per_stack:g} | "
              f"{g.pj_per_bit:.3f} | {g.source} |")


def published_table() -> None:
    print("| preset | area / power model | area mm^2 (published) | error | TDP W (published) | error | area by component (mm^2) | TDP by component (W) |")
    print("|---|---|---|---|---|---|---|---|")
    for preset, (die_mm2, tdp_w, _) in PUBLISHED.items():
        hw = compose_config(f"hw={preset}").hw
        row = enumerate_space(hw).iloc[0]
        a, p = breakdown(hw, row)
        parts = ", ".join(f"{k} {v:.1f}" for k, v in a.items() if v)
        watts = ", ".join(f"{k} {v:.1f}" for k, v in p.items() if v)
        if die_mm2 is None:
            bound = DIES.get(preset, 1) * RETICLE_MM2
            area = f"{row['area_mm2']:.1f} (not published; at most {bound:g}) | {'within' if row['area_mm2'] <= bound else 'over'} the bound"
        else:
            area = f"{row['area_mm2']:.1f} ({die_mm2:g}) | {row['area_mm2'] / die_mm2 - 1:+.1%}"
        print(f"| {preset} | {hw.area.name} / {hw.power.name} | {area} | "
              f"{row['tdp_w']:.0f} ({tdp_w:g}) | {row['tdp_w'] / tdp_w - 1:+.1%} | {parts} | {watts} |")


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
        row = describe_points(hw, reference_point(hw)).iloc[0]
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
    hw = compose_config("hw=modern_grid").hw
    space = enumerate_space(hw)
    per_hbm = space.groupby(["hbm_generation", "hbm_stacks"]).size().to_dict()
    print(f"hw=modern_grid area={hw.area.name}: {len(space):,} valid points of {len(grid_axes(hw)):,} tuples "
          f"(budgets {hw.area_budget_mm2:g} mm^2, {hw.power_budget_w:g} W) {per_hbm}, "
          f"area {space['area_mm2'].min():.1f}..{space['area_mm2'].max():.1f} mm^2, TDP {space['tdp_w'].min():.1f}..{space['tdp_w'].max():.1f} W")

    print("\n## HBM stacks (phaze/hardware/hbm.py)")
    stacks_table()

    print("\n## Modern presets: computed against published die area and TDP")
    published_table()

    print("\n## Presets")
    ops = big_ops()
    net = Network.from_cfg(compose_config().cluster)
    print("| preset | area model | peak matmul TFLOP/s | peak vector Top/s | HBM GB/s | GLB MiB | area mm^2 | TDP W | "
          f"{MATMUL_SIDE}^3 matmul % peak | 2^28 add % HBM |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        default_area = compose_config(f"hw={preset}").hw.area.name
        for area, power in [m for m in MODELS if m[0] in ("phaze", default_area)]:
            hw = compose_config(f"hw={preset}", f"hw/area={area}", f"hw/power={power}").hw
            point = enumerate_space(hw)
            row = point.iloc[0]
            lat = op_latencies(ops, point, net, tp=1).parallel_s[:, 0]
            mm_pct = 100 * ops["flops"][0] / lat[0] / row["peak_matmul_flops"]
            add_pct = 100 * (ops["bytes_read"][1] + ops["bytes_written"][1]) / lat[1] / (row["hbm_gbps"] * GB)
            mark = " (default)" if area == default_area else ""
            print(f"| {preset} | {area}{mark} | {row['peak_matmul_flops'] / 1e12:.1f} | {row['peak_vector_flops'] / 1e12:.2f} | "
                  f"{row['hbm_gbps']:.0f} | {int(row['glb_mib'])} | {row['area_mm2']:.1f} | {row['tdp_w']:.0f} | {mm_pct:.1f} | {add_pct:.1f} |")


if __name__ == "__main__":
    main()
