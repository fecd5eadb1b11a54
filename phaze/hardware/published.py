"""The published die area and TDP of the chips the modern presets stand for: what their computed area and TDP are held
against (docs/hardware.md section 5; experiments.validation.hardware_table, experiments.paper.realistic_world)."""

from __future__ import annotations

PUBLISHED = {
    # preset: (die mm^2, TDP W, where published)
    "tpuv4_modern": (600.0, 192.0, "Jouppi et al., ISCA 2023, Table 1: die < 600 mm^2, measured max power 192 W"),
    "a100": (826.0, 400.0, "A100 whitepaper (GA100 826 mm^2), A100 SXM4 datasheet (400 W)"),
    "h100": (814.0, 700.0, "H100 whitepaper (GH100 814 mm^2), H100 SXM5 datasheet (700 W)"),
}
