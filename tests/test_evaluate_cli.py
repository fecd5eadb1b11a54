"""`python -m phaze.evaluate`: one JSON object last on stdout; a fixed placement never beats the optimum."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

KEYS = {"time_per_batch_s", "throughput_seq_s", "tokens_per_s_per_device", "model_tflops_per_device", "mfu",
        "memory_per_device_gib", "dp", "pp", "tp", "mbs", "recompute"}
SMALL = ["model=gpt2", "model.num_layers=8", "hw=a100", "cluster=dgx_a100", "cluster.devices=16", "train.global_batch=64"]


def evaluate(tmp_path, *overrides):
    proc = subprocess.run(
        [sys.executable, "-m", "phaze.evaluate", *SMALL, f"cache_dir={tmp_path / 'cache'}", *overrides],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    return proc, (json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None)


def test_optimal_and_fixed_placements(tmp_path):
    proc, best = evaluate(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert KEYS <= best.keys()
    assert best["dp"] * best["pp"] * (best["tp"] if isinstance(best["tp"], int) else max(best["tp"])) <= 16
    # tokens/s/device = sequences/s * seq_len / devices used
    assert best["tokens_per_s_per_device"] == pytest.approx(best["throughput_seq_s"] * 1024 / best["devices_used"])
    proc, fixed = evaluate(tmp_path, "placement.dp=4", "placement.pp=2", "placement.tp=1", "train.mbs=2", "train.recompute=false")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (fixed["dp"], fixed["pp"], fixed["tp"], fixed["mbs"], fixed["recompute"]) == (4, 2, 1, 2, "none")  # false = none
    assert fixed["throughput_seq_s"] <= best["throughput_seq_s"] * (1 + 1e-9)


def test_partial_fixed_placement_is_rejected(tmp_path):
    proc, _ = evaluate(tmp_path, "placement.dp=4")
    assert proc.returncode == 2
    assert "placement.dp, placement.pp and placement.tp" in proc.stderr


@pytest.mark.parametrize("overrides", [
    ["placement.dp=2", "placement.pp=4", "placement.tp=1", "train.mbs=1", "train.recompute=true"],  # PHAZE's step, full recompute
    ["train=megatron", "train.global_batch=64", "placement.dp=2", "placement.pp=2", "placement.tp=4", "placement.vp=2",
     "placement.zero=1", "placement.sp=true", "placement.cp=1", "placement.ep=1", "placement.tp_comm_overlap=false",
     "train.mbs=1", "train.recompute=selective", "model=llama2", "model.num_layers=8", "model.max_tp=8"],  # interleaved, timeline step
])
def test_breakdowns_sum_to_the_step_and_the_memory_and_the_timeline_ends_with_the_step(tmp_path, overrides):
    proc, record = evaluate(tmp_path, *overrides, f"figure={tmp_path / 'timeline.png'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sum(record["breakdown_s"].values()) == pytest.approx(record["time_per_batch_s"], rel=1e-9)
    assert sum(record["memory_breakdown_gib"].values()) == pytest.approx(record["memory_per_device_gib"], rel=1e-9)
    assert {"compute_tc_s", "compute_vc_s", "recompute_s", "tp_comm_s", "bubble_s"} <= record["breakdown_s"].keys()
    assert record["breakdown_s"]["recompute_s"] > 0 and record["breakdown_s"]["bubble_s"] > 0
    assert (tmp_path / "timeline.png").stat().st_size > 0
    assert "where the step goes, per pipeline stage" in proc.stdout
