"""Plan export (`python -m phaze.export`, phaze.report.launch): three plans against hand-written Megatron-LM
arguments and NeMo keys, and the command end to end on a fixed plan."""

import subprocess
import sys

import pytest
import yaml

from phaze.placement.result import Strategy
from phaze.report.launch import LaunchPlan, megatron_args, nemo_config


def strategy(pp, layers, tp, **kw) -> Strategy:
    """A strategy whose chunks hold `layers` transformer layers each, the embedding on the first and the head on the last."""
    bounds, part = [], 0
    for i, n in enumerate(layers):
        first = part
        part += n + (1 if i == 0 else 0) + (1 if i == len(layers) - 1 else 0)
        bounds.append((first, part - 1))
    widths = tuple(tp) if isinstance(tp, (list, tuple)) else (tp,) * len(layers)
    fields = dict(dp=1, mbs=1, recompute="none", zero=0, sp=False, vp=1, cp=1, tp_comm_overlap=False, ep=1) | kw
    return Strategy(pp=pp, tp=widths[0], stage_bounds=tuple(bounds), devices_used=0, tp_per_stage=widths, **fields)


def test_interleaved_megatron_gpt3_plan():
    """GPT-3 175B as NeMo runs it: TP 8, PP 4 with 3 chunks of 8 layers per rank, SP, selective recompute, distributed optimizer."""
    s = strategy(4, [8] * 12, 8, dp=4, vp=3, sp=True, recompute="selective", zero=1)
    plan = LaunchPlan.from_strategy(s, num_layers=96, global_batch=1536)
    args, notes = megatron_args(plan)
    assert args == ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "4", "--context-parallel-size", "1",
                    "--num-layers-per-virtual-pipeline-stage", "8", "--sequence-parallel", "--micro-batch-size", "1",
                    "--global-batch-size", "1536", "--recompute-granularity", "selective", "--use-distributed-optimizer"]
    assert notes == []
    nemo = yaml.safe_load(nemo_config(plan))["model"]
    assert nemo["virtual_pipeline_model_parallel_size"] == 3 and nemo["sequence_parallel"] is True
    assert nemo["activations_checkpoint_granularity"] == "selective" and nemo["optim"]["name"] == "distributed_fused_adam"
    assert plan.world_size == 128


def test_uneven_first_and_last_stages_with_context_parallelism_and_full_sharding():
    """Llama 3 405B's 126 layers as 7 + 14 x 8 + 7 over 16 stages (Llama 3 paper §3.3.2), CP 2, full recompute, ZeRO-3."""
    s = strategy(16, [7] + [8] * 14 + [7], 8, dp=64, cp=2, recompute="full", zero=3, mbs=1)
    plan = LaunchPlan.from_strategy(s, num_layers=126, global_batch=2048)
    args, notes = megatron_args(plan)
    assert args == ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16", "--context-parallel-size", "2",
                    "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7",
                    "--micro-batch-size", "1", "--global-batch-size", "2048", "--recompute-granularity", "full",
                    "--recompute-method", "uniform", "--recompute-num-layers", "1",
                    "--use-custom-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
    assert notes == []
    nemo = yaml.safe_load(nemo_config(plan))["model"]
    assert (nemo["num_layers_in_first_pipeline_stage"], nemo["num_layers_in_last_pipeline_stage"]) == (7, 7)
    assert nemo["activations_checkpoint_method"] == "uniform" and nemo["context_parallel_size"] == 2
    assert plan.world_size == 8 * 16 * 2 * 64


def test_phaze_mixed_widths_and_uneven_middle_stages_are_noted():
    """PHAZE's Llama-2 optimum: 6 stages of TP 2, 2, 1, 1, 1, 1 with uneven layer counts, SGD: Megatron cannot say it."""
    s = strategy(6, [4, 4, 6, 6, 6, 6], [2, 2, 1, 1, 1, 1], dp=128)
    plan = LaunchPlan.from_strategy(s, num_layers=32, global_batch=4096)
    plan = LaunchPlan(**{**plan.__dict__, "optimizer": "sgd"})
    args, notes = megatron_args(plan)
    assert args[:4] == ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "6"]
    assert ["--optimizer", "sgd"] == args[args.index("--optimizer"):args.index("--optimizer") + 2]
    assert notes[0].startswith("TP width per stage [2, 2, 1, 1, 1, 1]")
    assert notes[1].startswith("layers per pipeline stage [4, 4, 6, 6, 6, 6]")
    assert "# note: TP width per stage" in nemo_config(plan)


@pytest.mark.slow
def test_export_command_writes_both_files(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "phaze.export", "model=llama2", "model.num_layers=4", "model.max_tp=8", "hw=h100", "cluster=dgx_h100",
         "cluster.devices=32", "train=megatron", "train.global_batch=64", "placement.dp=4", "placement.pp=2", "placement.tp=4",
         "placement.vp=1", "placement.cp=1", "placement.ep=1", "placement.zero=1", "placement.sp=true", "placement.tp_comm_overlap=false",
         "train.mbs=1", "train.recompute=selective", f"cache_dir={tmp_path / 'cache'}", f"export.dir={tmp_path / 'out'}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    args = (tmp_path / "out" / "megatron_args.txt").read_text().split()
    assert args[:4] == ["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2"]
    assert "--sequence-parallel" in args and "--use-distributed-optimizer" in args and "--overlap-grad-reduce" in args
    assert yaml.safe_load((tmp_path / "out" / "nemo.yaml").read_text())["model"]["tensor_model_parallel_size"] == 4


@pytest.mark.parametrize("extra", [[], ["model=[llama2,gpt2]"], ["export.dir=notadir/plan"]])
def test_export_without_a_study_or_of_several_models_is_refused_writing_nothing(tmp_path, extra):
    """No study in the (not yet created) storage, a several-model job, or an export.dir under a file: exit 2 with one
    line naming the field, and nothing written (no SQLite file created by opening the storage, no Hydra output folder)."""
    (tmp_path / "notadir").write_text("a file, not a folder\n")
    proc = subprocess.run([sys.executable, "-m", "phaze.export", "hw=h100", "cluster=dgx_h100", "train=megatron", *extra],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert any(field in lines[0] for field in ("search.storage=", "models:", "export.dir='notadir/plan': cannot be written")), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notadir"]
