"""The published die area and TDP of the chips the modern presets stand for: what their computed area and TDP are held
against (docs/hardware.md section 5; experiments.validation.hardware_table, experiments.paper.realistic_world). A die
area of None: not published."""

from __future__ import annotations

PUBLISHED = {
    # preset: (die mm^2, TDP W, where published)
    "tpuv4_modern": (600.0, 192.0, "Jouppi et al., ISCA 2023, Table 1: die < 600 mm^2, measured max power 192 W"),
    "a100": (826.0, 400.0, "A100 whitepaper (GA100 826 mm^2), A100 SXM4 datasheet (400 W)"),
    "h100": (814.0, 700.0, "H100 whitepaper (GH100 814 mm^2), H100 SXM5 datasheet (700 W)"),
    "h200": (814.0, 700.0, "the H100's GH100 die (H100 whitepaper, 814 mm^2), H200 datasheet (up to 700 W)"),
    "b200": (None, 1000.0, "no die area published: two reticle-limited dies (NVIDIA Blackwell technical brief), each at most "
                           "the 26 x 33 = 858 mm^2 reticle; HGX B200 datasheet (1000 W per GPU)"),
    "gb200": (None, 1200.0, "the B200's dies; 1200 W per GPU as GB200 NVL72 systems are configured (NVIDIA lists no per-GPU "
                            "TDP on the GB200 NVL72 datasheet)"),
}
RETICLE_MM2 = 26.0 * 33.0
"""The lithography reticle's field, 26 x 33 mm: the largest die one exposure prints (a reticle-limited die's bound)."""
DIES = {"b200": 2, "gb200": 2}
"""Dies per package of the multi-die presets (NVIDIA Blackwell technical brief: two dies); the others have one."""
