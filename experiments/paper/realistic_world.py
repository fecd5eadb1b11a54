"""The realistic headline: the chip searched in `hw=modern_grid` (5 nm-class constants, HBM stacks, 830 mm^2 and
700 W) with the plan searched in `train=megatron`, against the chips of today on their own networks: TPU v4 on a
pod slice (`hw.baseline=tpuv4_modern`, `cluster=tpuv4_pod`), TPU v5p on its own (`tpuv5p`, `tpuv5p_pod`) and the
H100 on DGX nodes (`hw.baseline=h100`, `cluster=dgx_h100`), each with the model's expert placement and with the searched
one; and the same on DGX with FP8 training (`train.precision=fp8`), the searched chips then carrying FP8 tensor cores
(`hw.fp8_matmul_ratio=2`, their multipliers' area and power paid) against the H100's and the B200's (`dgx_b200`).

    python -m experiments.paper.realistic_world                          # llama2 on both clusters
    python -m experiments.paper.realistic_world --models llama2 gpt2

Each search is an exact branch-and-bound study (`search=bound`), resumable from its SQLite storage and logged to
MLflow (experiment `phaze-realistic`). Writes experiments/results/realistic_world.{md,json,csv}.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from experiments.harness import RESULTS, command_line, write_result
from experiments.paper.exact_studies import plan_of
from phaze.config import compose_config, preset_hw, study_spec
from phaze.hardware import enumerate_space
from phaze.hardware.published import PUBLISHED
from phaze.search.evaluator import throughput_of
from phaze.search.study import run_study, tracker_for

WORLDS = (("tpuv4_pod", "tpuv4_modern", "bf16"), ("tpuv5p_pod", "tpuv5p", "bf16"), ("dgx_h100", "h100", "bf16"), ("dgx_h100", "h100", "fp8"),
          ("dgx_b200", "b200", "fp8"))
"""(cluster, the chip of today that runs on it, the GEMM precision trained in)."""
PRECISION_OVERRIDES = {"bf16": [], "fp8": ["train.precision=fp8", "hw.fp8_matmul_ratio=2"]}
"""What each precision sets: FP8 training on searched chips whose tensor cores do FP8 at twice the bf16 rate, as the
H100's (conf/hw/h100.yaml)."""
EXPERIMENT = "phaze-realistic"


def study(overrides: list[str], storage: str):
    """Run (or resume) one exact study of the modern space and log it to MLflow."""
    cfg = compose_config(*overrides, "hw=modern_grid", "train=megatron", "search=bound", f"search.storage={storage}",
                         f"tracking.experiment={EXPERIMENT}")
    tracker = tracker_for(study_spec(cfg))
    outcome = run_study(study_spec(cfg), tracker, progress=False)
    if tracker is not None:
        tracker.finish(metrics={"best.throughput_seq_s": outcome.best.throughput_seq_s, "speedup_vs_baseline": outcome.speedup,
                                "speedup_vs_baseline_searched": outcome.speedup_searched, "wall_s": outcome.wall_s})
    return outcome


def modern_plan(result) -> str:
    """plan_of with the modern dimensions that differ from PHAZE's plan (ZeRO, SP, CP, VP, recompute granularity)."""
    if result is None or not result.feasible:
        return plan_of(result)
    s = result.strategy
    extra = [f"zero{s.zero}" if s.zero else "", "sp" if s.sp else "", f"cp{s.cp}" if s.cp > 1 else "", f"vp{s.vp}" if s.vp > 1 else ""]
    return " ".join([plan_of(result).replace(" rc", ""), *[e for e in extra if e], *([f"rc={s.recompute}"] if s.recompute != "none" else [])])


def chip_row(model: str, cluster: str, precision: str, chip: str, arch: pd.Series, result, over) -> dict:
    """One chip and plan: what it is, its area and TDP under the same die model, and how fast it trains."""
    return {
        "model": model, "cluster": cluster, "precision": precision, "chip": chip,
        "architecture": (f"{int(arch.n_tc)}x{int(arch.tc_rows)}x{int(arch.tc_cols)} TC, {int(arch.n_vc)}x{int(arch.vc_width)} VC, "
                         f"{int(arch.glb_mib)} MiB, {int(arch.hbm_stacks)}x {arch.hbm_generation} ({int(arch.hbm_gib)} GiB, "
                         f"{arch.hbm_gbps / 1000:.1f} TB/s)"),
        "peak_tflop_s": arch.peak_matmul_flops / 1e12, "area_mm2": arch.area_mm2, "tdp_w": arch.tdp_w,
        "plan": modern_plan(result), "seq_s": throughput_of(result),
        "tokens_s_per_chip": result.tokens_per_s_per_device if result is not None else 0.0,
        "mfu": result.mfu if result is not None else 0.0, "speedup": throughput_of(result) / throughput_of(over) if throughput_of(over) else float("nan"),
    }


def world_rows(model: str, cluster: str, baseline: str, precision: str, storage: str) -> list[dict]:
    """The searched chip and plan against `baseline` with its expert and with its searched placement, on `cluster`."""
    start = time.perf_counter()
    out = study([f"model={model}", f"cluster={cluster}", f"hw.baseline={baseline}", *PRECISION_OVERRIDES[precision]], storage)
    base_point = enumerate_space(preset_hw(baseline)).iloc[0]
    expert = out.baseline.result
    rows = [
        chip_row(model, cluster, precision, "searched (modern_grid)", out.evaluator.points.iloc[out.best_index], out.best.result, expert),
        chip_row(model, cluster, precision, f"{baseline} + expert placement", base_point, expert, expert),
        chip_row(model, cluster, precision, f"{baseline} + searched placement", base_point, out.baseline_searched.result, expert),
    ]
    for row in rows:
        row["wall_s"] = time.perf_counter() - start
    return rows


def published_of(chip: str) -> str:
    """A chip's published die area and TDP, each as 'not published' where it is not."""
    die_mm2, tdp_w, _ = PUBLISHED.get(chip, (None, None, ""))
    return (f"{f'{die_mm2:.0f} mm²' if die_mm2 else 'a die area not published'} and "
            f"{f'{tdp_w:.0f} W' if tdp_w else 'a TDP not published'}")


def die_note(df: pd.DataFrame) -> str:
    """Each baseline chip's computed area and TDP against its published die size and TDP."""
    chips = df[df.chip.str.endswith("expert placement")].drop_duplicates("chip")
    return ", ".join(f"{row.chip.split(' ')[0]} {row.area_mm2:.0f} mm² and {row.tdp_w:.0f} W against {published_of(row.chip.split(' ')[0])}"
                     for row in chips.itertuples())


def markdown(df: pd.DataFrame, command: str) -> str:
    shown = df.drop(columns=["wall_s"]).rename(columns={"speedup": "speedup vs expert plan"}).round(
        {"peak_tflop_s": 1, "area_mm2": 1, "tdp_w": 1, "seq_s": 1, "tokens_s_per_chip": 0, "mfu": 3, "speedup vs expert plan": 2})
    return "\n".join([
        "# In a realistic world: the searched chip against TPU v4 and v5p, the H100 and the B200",
        "",
        f"Generated by `{command}`. Each cluster is one exact study (`hw=modern_grid train=megatron search=bound`, 1024 chips,",
        "global batch 4096): the chip and plan searched under 830 mm² and 700 W (5 nm-class area and power, HBM as stacks,",
        "the H100's achievable fractions of peak, one operator at a time), against today's chip on that cluster under the same",
        "die model (`hw.baseline`), with the model's expert placement and with the placement searched for it.",
        f"Area and TDP of every chip come from the same models (docs/hardware.md §5; computed against published: {die_note(df)}).",
        "FP8 rows: FP8 training, the searched chips with FP8 tensor cores at twice their bf16 peak (area and power paid), the",
        "H100 and the B200 at their FP8 peaks (the FP8 peak's MAC power in their TDP); `peak_tflop_s` is the bf16 peak, `mfu` is",
        "against the FP8 peak. The B200 is two dies over the 830 mm² and 700 W the searched chips are held to (its area and TDP",
        "columns say by how much): it is today's chip, not a point of the space.",
        "Study times (search and baselines, 2 cores): "
        + ", ".join(f"{c} {p} {t:.0f} s" for (c, p), t in df.groupby(["cluster", "precision"], sort=False).wall_s.max().items()) + ".",
        "",
        shown.to_markdown(index=False, floatfmt=",g"),
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["llama2"])
    parser.add_argument("--storage", default=f"sqlite:///{RESULTS / 'realistic_world_studies.db'}")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    rows = [row for model in args.models for cluster, baseline, precision in WORLDS
            for row in world_rows(model, cluster, baseline, precision, args.storage)]
    df = pd.DataFrame(rows)
    df.to_csv(RESULTS / "realistic_world.csv", index=False)
    write_result("realistic_world", markdown(df, command_line()), models=args.models, table=df)


if __name__ == "__main__":
    main()
