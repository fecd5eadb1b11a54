"""`python -m phaze.evaluate`: one model on one hardware point and cluster, best or fixed placement.

    python -m phaze.evaluate model=llama2 hw=a100 cluster=dgx_a100 train.global_batch=1024 cluster.devices=64
    python -m phaze.evaluate hw=tpuv4 placement.dp=128 placement.pp=8 placement.tp=1 train.mbs=1 train.recompute=false
    python -m phaze.evaluate model=llama2 hw=h100 cluster=dgx_h100 train=megatron figure=timeline.png

Prints a human summary and where the step's time and memory go per pipeline stage, then one JSON object as the last
line of stdout (`breakdown_s` and `memory_breakdown_gib`: the busiest stage's, summing to `time_per_batch_s` and
`memory_per_device_gib`). `figure=` also draws the plan's pipeline timeline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

import hydra
from hydra.core.hydra_config import HydraConfig

import phaze.config  # noqa: F401  (registers the structured configs with Hydra)
from phaze.kernels import start_warm_up
from phaze.config_check import check_choices, check_config, check_output_file, figure_formats, refusing_bad_config, run_cli
from phaze.config import model_job
from phaze.hardware.space import enumerate_space
from phaze.pipeline import evaluate_scheduled, explain
from phaze.report.timeline import timeline_figure
from phaze.config_values import ConfigError

GIB = 2**30


def result_record(result, explanation=None) -> dict:
    """The JSON fields `phaze.evaluate` promises, from a PlacementResult (and its Explanation: the breakdowns with the
    compute split over tensor and vector cores)."""
    s = result.strategy
    return {
        **s.fields(),
        "feasible": result.feasible,
        "reason": result.reason,
        "time_per_batch_s": result.time_per_batch_s,
        "throughput_seq_s": result.throughput_seq_s,
        "tokens_per_s_per_device": result.tokens_per_s_per_device,
        "model_tflops_per_device": result.model_tflops_per_device,
        "mfu": result.mfu,
        "memory_per_device_gib": result.memory_per_device_bytes / GIB,
        "devices_used": s.devices_used,
        "stage_bounds": [list(b) for b in s.stage_bounds],
        "breakdown_s": explanation.breakdown_s if explanation is not None else result.breakdown,
        "memory_breakdown_gib": explanation.memory_breakdown_gib if explanation is not None else {},
    }


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@refusing_bad_config
def main(cfg) -> None:
    check_choices(HydraConfig.get().overrides.task)
    check_config(cfg)
    if cfg.figure:
        check_output_file(cfg.figure, "figure", figure_formats())
    points = enumerate_space(cfg.hw)
    if len(points) != 1:
        raise ConfigError(f"hw={cfg.hw.name} has {len(points)} points; phaze.evaluate takes one (e.g. hw=tpuv4, hw=a100, hw=h100)")
    start_warm_up()
    job = model_job(cfg)
    result, layers = evaluate_scheduled(job, points)
    if result is None:
        print(f"no placement of {cfg.model.name} fits {cfg.cluster.devices} x {cfg.hw.name}", file=sys.stderr)
        print(json.dumps({"feasible": False, "reason": "no placement fits"}))
        sys.exit(1)
    explanation = explain(job, points, result, layers=layers)
    record = result_record(result, explanation)
    print(
        f"{cfg.model.name} on {cfg.cluster.devices} x {cfg.hw.name}: dp={record['dp']} pp={record['pp']} tp={record['tp']} "
        f"cp={record['cp']} ep={record['ep']} vp={record['vp']} mbs={record['mbs']} recompute={record['recompute']} zero={record['zero']} "
        f"sp={record['sp']} tp_comm_overlap={record['tp_comm_overlap']} -> {record['throughput_seq_s']:.2f} seq/s, "
        f"MFU {record['mfu']:.1%}, {record['memory_per_device_gib']:.1f} GiB/device"
    )
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print("\nwhere the step goes, per pipeline stage (s; each row sums to the time per batch):")
        print(explanation.time_s.round(4).to_string())
        print("\nmemory per device, per pipeline stage (GiB):")
        print(explanation.memory_gib.round(3).to_string())
    if cfg.figure:
        Path(cfg.figure).parent.mkdir(parents=True, exist_ok=True)
        timeline_figure(explanation.cost, f"{cfg.model.name} on {cfg.cluster.devices} x {cfg.hw.name}").savefig(cfg.figure, dpi=120, bbox_inches="tight")
        print(f"wrote {cfg.figure}")
    print(json.dumps(record))
    if not result.feasible:
        sys.exit(1)


if __name__ == "__main__":
    run_cli(main)
