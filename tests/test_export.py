"""Plan export (`python -m phaze.export`, phaze.report.launch): plans against hand-written Megatron-LM arguments, NeMo
keys and torchtitan fields; non-launchable plans refused; and the round trip: a study's exported launch files parsed
back (Megatron-LM's arguments with argparse, torchtitan's TOML with tomllib) and evaluated by `phaze.evaluate` as a
fixed placement give the study's throughput on the study's devices."""

import argparse
import json
import re
import runpy
import shlex
import subprocess
import sys
import tomllib

import optuna
import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra

from phaze.config import compose_config
from phaze.config_values import ConfigError
from phaze.placement.result import Strategy
from phaze.report.launch import LaunchPlan, architecture_args, launch_breach, megatron_args, nemo_config, torchtitan_config


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
    assert megatron_args(plan) == ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "4", "--context-parallel-size", "1",
                                   "--num-layers-per-virtual-pipeline-stage", "8", "--sequence-parallel", "--micro-batch-size", "1",
                                   "--global-batch-size", "1536", "--bf16", "--recompute-granularity", "selective", "--optimizer", "adam",
                                   "--use-distributed-optimizer"]
    doc = yaml.safe_load(nemo_config(plan))
    nemo = doc["model"]
    assert nemo["virtual_pipeline_model_parallel_size"] == 3 and nemo["sequence_parallel"] is True
    assert nemo["activations_checkpoint_granularity"] == "selective" and nemo["optim"]["name"] == "distributed_fused_adam"
    assert plan.world_size == 128 and (doc["trainer"]["num_nodes"], doc["trainer"]["devices"]) == (16, 8)
    assert plan.torchrun() == ["torchrun", "--nnodes", "16", "--nproc-per-node", "8"]


def test_uneven_first_and_last_stages_with_context_parallelism_and_full_sharding():
    """Llama 3 405B's 126 layers as 7 + 14 x 8 + 7 over 16 stages (Llama 3 paper §3.3.2), CP 2, full recompute, ZeRO-3."""
    s = strategy(16, [7] + [8] * 14 + [7], 8, dp=64, cp=2, recompute="full", zero=3, mbs=1)
    plan = LaunchPlan.from_strategy(s, num_layers=126, global_batch=2048)
    assert megatron_args(plan) == ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16", "--context-parallel-size", "2",
                                   "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7",
                                   "--micro-batch-size", "1", "--global-batch-size", "2048", "--bf16", "--recompute-granularity", "full",
                                   "--recompute-method", "uniform", "--recompute-num-layers", "1", "--optimizer", "adam",
                                   "--use-custom-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
    nemo = yaml.safe_load(nemo_config(plan))["model"]
    assert (nemo["num_layers_in_first_pipeline_stage"], nemo["num_layers_in_last_pipeline_stage"]) == (7, 7)
    assert nemo["activations_checkpoint_method"] == "uniform" and nemo["context_parallel_size"] == 2
    assert plan.world_size == 8 * 16 * 2 * 64


def test_phaze_mixed_widths_and_uneven_middle_stages_are_refused():
    """PHAZE's Llama-2 optimum: 6 stages of TP 2, 2, 1, 1, 1, 1 (1536 GPUs if launched at TP 2 on its 1024) with uneven
    middle stages: Megatron cannot run it, and every writer refuses naming why."""
    s = strategy(6, [4, 4, 6, 6, 6, 6], [2, 2, 1, 1, 1, 1], dp=128)
    plan = LaunchPlan.from_strategy(s, num_layers=32, global_batch=4096)
    assert launch_breach(plan).startswith("its pipeline stages have TP widths [2, 2, 1, 1, 1, 1]")
    for write in (megatron_args, nemo_config):
        with pytest.raises(ConfigError, match=r"TP widths \[2, 2, 1, 1, 1, 1\]"):
            write(plan)
    even_widths = LaunchPlan.from_strategy(strategy(6, [4, 4, 6, 6, 6, 6], 1, dp=128), num_layers=32, global_batch=4096)
    assert "the stages between the first and last must hold the same number" in launch_breach(even_widths)
    assert launch_breach(LaunchPlan.from_strategy(strategy(4, [0, 11, 11, 10], 1), num_layers=32, global_batch=64)).endswith(
        "each >= 1), the stages between them even")  # the embedding alone on the first stage


def test_architecture_of_llama2_and_gpt3():
    """Llama-2 7B: RMSNorm, SwiGLU, rotary, no biases, untied; GPT-3 175B: Megatron's defaults (LayerNorm, GeLU,
    learned positions, tied)."""
    llama = architecture_args(compose_config("model=llama2").model, "flash")
    assert llama[:8] == ["--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "11008", "--num-attention-heads", "32"]
    assert {"--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights"} <= set(llama)
    assert llama[llama.index("--normalization") + 1] == "RMSNorm" and llama[llama.index("--attention-backend") + 1] == "flash"
    assert "--group-query-attention" not in llama
    gpt3 = architecture_args(compose_config("model=megatron_gpt3_175b").model, "eager")
    assert gpt3 == ["--num-layers", "96", "--hidden-size", "12288", "--ffn-hidden-size", "49152", "--num-attention-heads", "96",
                    "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size", "50257", "--attention-backend", "unfused"]
    mixtral = architecture_args(compose_config("model=mixtral_8x7b").model, "flash")
    assert mixtral[mixtral.index("--num-query-groups") + 1] == "8" and mixtral[mixtral.index("--num-experts") + 1] == "8"


def test_torchtitan_config_of_an_fsdp_plan():
    """Llama-2 under FSDP: ZeRO-3 over 32 replicas, TP 2, 4 stages of 9 + 7 + 7 + 9 layers, microbatch 2."""
    model = compose_config("model=llama2").model
    s = strategy(4, [9, 7, 7, 9], 2, dp=32, zero=3, mbs=2)
    plan = LaunchPlan.from_strategy(s, num_layers=32, global_batch=512)
    doc = tomllib.loads(torchtitan_config(plan, model, 4096))
    assert doc["training"] == {"local_batch_size": 16, "global_batch_size": 512, "seq_len": 4096, "mixed_precision_param": "bfloat16"}
    par = doc["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"], par["tensor_parallel_degree"]) == (32, 1, 2)
    assert par["pipeline_parallel_split_points"] == ["layers.9", "layers.16", "layers.23"]
    assert par["pipeline_parallel_microbatch_size"] == 2 and doc["activation_checkpoint"]["mode"] == "none"
    assert doc["optimizer"]["name"] == "AdamW"
    with pytest.raises(ConfigError, match="train.optimizer=sgd"):
        torchtitan_config(LaunchPlan(**{**plan.__dict__, "optimizer": "sgd"}), model, 4096)
    with pytest.raises(ConfigError, match="placement.zero=1"):
        torchtitan_config(LaunchPlan(**{**plan.__dict__, "zero": 1}), model, 4096)


# The round trip -------------------------------------------------------------------------------------------------


def megatron_parser() -> argparse.ArgumentParser:
    """Megatron-LM's arguments (megatron/training/arguments.py) that an exported launch sets, torchrun's before them."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for name in ("nnodes", "nproc-per-node", "num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "seq-length",
                 "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size", "expert-model-parallel-size",
                 "num-layers-per-virtual-pipeline-stage", "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
                 "micro-batch-size", "global-batch-size", "recompute-num-layers"):
        parser.add_argument(f"--{name}", type=int)
    for name in ("recompute-granularity", "recompute-method", "optimizer", "data-parallel-sharding-strategy"):
        parser.add_argument(f"--{name}")
    for name in ("sequence-parallel", "use-distributed-optimizer", "use-custom-fsdp", "tp-comm-overlap", "bf16", "fp16"):
        parser.add_argument(f"--{name}", action="store_true")
    return parser


def megatron_overrides(launch: str, num_layers: int) -> tuple[int, list[str]]:
    """(world size, placement.* / train.* overrides) of an exported megatron_launch.sh."""
    words = shlex.split(launch.splitlines()[-1])
    assert words[0] == "torchrun" and "pretrain_gpt.py" in words
    args, _ = megatron_parser().parse_known_args([w for w in words if w != "pretrain_gpt.py"][1:])
    assert args.num_layers == num_layers
    world = args.nnodes * args.nproc_per_node
    tp, pp, cp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size
    vp = num_layers // (pp * args.num_layers_per_virtual_pipeline_stage) if args.num_layers_per_virtual_pipeline_stage else 1
    zero = 1 if args.use_distributed_optimizer else {"optim_grads": 2, "optim_grads_params": 3}[args.data_parallel_sharding_strategy] \
        if args.use_custom_fsdp else 0
    out = [f"placement.dp={world // (tp * pp * cp)}", f"placement.pp={pp}", f"placement.tp={tp}", f"placement.cp={cp}", f"placement.vp={vp}",
           f"placement.ep={args.expert_model_parallel_size or 1}", f"placement.zero={zero}", f"placement.sp={args.sequence_parallel}",
           f"placement.tp_comm_overlap={args.tp_comm_overlap}", f"train.mbs={args.micro_batch_size}",
           f"train.global_batch={args.global_batch_size}", f"train.recompute={args.recompute_granularity or 'none'}",
           f"train.optimizer={args.optimizer}"]
    first, last = args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
    if first or last:
        middle_stages = pp - (first is not None) - (last is not None)
        middle = (num_layers - (first or 0) - (last or 0)) // middle_stages if middle_stages else 0
        layers = [first or middle] + [middle] * (pp - 2) + [last or middle]
        out.append(f"placement.layers_per_stage=[{','.join(map(str, layers))}]")
    return world, out


def torchtitan_overrides(text: str, num_layers: int) -> tuple[int, list[str]]:
    """(world size, placement.* / train.* overrides) of an exported torchtitan.toml."""
    doc = tomllib.loads(text)
    par, training = doc["parallelism"], doc["training"]
    dp = par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
    pp, tp, cp = par["pipeline_parallel_degree"], par["tensor_parallel_degree"], par["context_parallel_degree"]
    zero = 0 if par["data_parallel_replicate_degree"] > 1 else 2 if par["fsdp_reshard_after_forward"] == "never" else 3
    mbs = par["pipeline_parallel_microbatch_size"] if pp > 1 else training["local_batch_size"]
    out = [f"placement.dp={dp}", f"placement.pp={pp}", f"placement.tp={tp}", f"placement.cp={cp}", f"placement.ep={par['expert_parallel_degree']}",
           f"placement.zero={zero}", f"placement.tp_comm_overlap={par['enable_async_tensor_parallel']}", f"train.mbs={mbs}",
           f"train.global_batch={training['global_batch_size']}", f"train.recompute={doc['activation_checkpoint']['mode']}"]
    if pp > 1:
        starts = [num_layers if p == "norm" else int(p.split(".")[1]) for p in par["pipeline_parallel_split_points"]]
        bounds = [0, *starts, num_layers]
        chunks = len(bounds) - 1
        out += [f"placement.vp={chunks // pp}", f"placement.layers_per_stage=[{','.join(str(b - a) for a, b in zip(bounds, bounds[1:]))}]"]
    else:
        out.append("placement.vp=1")
    return dp * pp * tp * cp, out


def evaluate_in_process(overrides: list[str], monkeypatch, capsys) -> dict:
    """`python -m phaze.evaluate overrides...` in this process: its JSON record (the last line of stdout)."""
    monkeypatch.setattr(sys, "argv", ["phaze.evaluate", *overrides])
    GlobalHydra.instance().clear()
    capsys.readouterr()
    try:
        runpy.run_module("phaze.evaluate", run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (0, None), capsys.readouterr()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


ROUND_TRIPS = [
    ("megatron", ["model=llama2"]),
    ("megatron", ["model=megatron_gpt3_175b", "train.mbs=1"]),
    ("fsdp", ["model=llama2"]),
    ("fsdp", ["model=megatron_gpt3_175b"]),
]
"""(train preset, model overrides) of the studies whose exports are launched back; hw=h100 on dgx_h100, a study of one
point (GPT-3 under train=megatron at microbatch 1 only, to keep the test's time down)."""


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One workload and schedule cache for the round trips (the models' graphs are traced once)."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.slow
@pytest.mark.parametrize("preset,model", ROUND_TRIPS, ids=[f"{p}-{m[0].split('=')[1]}" for p, m in ROUND_TRIPS])
def test_a_studys_export_launches_back_to_its_throughput(tmp_path, shared_cache, monkeypatch, capsys, preset, model):
    """`phaze.run` then `phaze.export` with the same overrides; the exported arguments parsed back and evaluated as a
    fixed placement by `phaze.evaluate` give the study's best throughput (1e-6) on the study's devices, and the launch
    takes exactly those devices."""
    monkeypatch.chdir(tmp_path)
    base = [*model, "hw=h100", "cluster=dgx_h100", f"train={preset}", f"cache_dir={shared_cache}",
            f"schedule.cache_dir={shared_cache / 'schedule'}"]
    study = [f"search.storage=sqlite:///{tmp_path / 'studies.db'}", "tracking.enabled=false", "hydra.run.dir=."]
    run = subprocess.run([sys.executable, "-m", "phaze.run", *base, *study], capture_output=True, text=True, cwd=tmp_path, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    export = subprocess.run([sys.executable, "-m", "phaze.export", *base, *study, f"export.dir={tmp_path / 'plan'}"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=1500)
    assert export.returncode == 0, export.stderr[-3000:]
    devices = int(re.search(r"the plan's (\d+) of cluster.devices", export.stdout).group(1))
    (name,) = optuna.get_all_study_names(f"sqlite:///{tmp_path / 'studies.db'}")
    best = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'studies.db'}").best_value
    num_layers = int(compose_config(model[0]).model.num_layers)
    megatron = tmp_path / "plan" / "megatron_launch.sh"
    launches = [megatron_overrides(megatron.read_text(), num_layers)] if megatron.exists() else []
    if preset == "fsdp":
        launches.append(torchtitan_overrides((tmp_path / "plan" / "torchtitan.toml").read_text(), num_layers))
        assert megatron.exists() or "no Megatron-LM / NeMo launch: " in export.stdout
    else:
        assert megatron.exists() and not (tmp_path / "plan" / "torchtitan.toml").exists()
    for world, overrides in launches:
        assert world == devices
        record = evaluate_in_process([*base, *overrides], monkeypatch, capsys)
        assert record["devices_used"] == devices
        assert record["throughput_seq_s"] == pytest.approx(best, rel=1e-6)


@pytest.mark.slow
def test_a_fixed_plan_with_uneven_first_and_last_stages_launches_back(tmp_path, monkeypatch, capsys):
    """Llama-2's 32 layers as 7 + 9 + 9 + 7 on TP 2 x PP 4 x DP 4 (ZeRO-1, SP, full recompute): exported with
    --decoder-first/last-pipeline-num-layers 7 and parsed back, it costs what the fixed plan costs."""
    monkeypatch.chdir(tmp_path)
    base = ["model=llama2", "hw=h100", "cluster=dgx_h100", "cluster.devices=32", "train=megatron", "train.global_batch=64",
            f"cache_dir={tmp_path / 'cache'}"]
    plan = ["placement.dp=4", "placement.pp=4", "placement.tp=2", "placement.vp=1", "placement.cp=1", "placement.ep=1", "placement.zero=1",
            "placement.sp=true", "placement.tp_comm_overlap=false", "placement.layers_per_stage=[7,9,9,7]", "train.mbs=1", "train.recompute=full"]
    direct = evaluate_in_process([*base, *plan], monkeypatch, capsys)
    export = subprocess.run([sys.executable, "-m", "phaze.export", *base, *plan, f"export.dir={tmp_path / 'plan'}", "hydra.run.dir=."],
                            capture_output=True, text=True, cwd=tmp_path, timeout=1500)
    assert export.returncode == 0, export.stderr[-3000:]
    launch = (tmp_path / "plan" / "megatron_launch.sh").read_text()
    assert "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7" in launch
    world, overrides = megatron_overrides(launch, 32)
    assert "placement.layers_per_stage=[7,9,9,7]" in overrides and world == direct["devices_used"] == 32
    again = evaluate_in_process([*base, *overrides], monkeypatch, capsys)
    assert again["throughput_seq_s"] == pytest.approx(direct["throughput_seq_s"], rel=1e-6)


def test_a_phaze_plan_is_refused_naming_why():
    """PHAZE's heterogeneous-TP Llama-2 optimum under train=phaze: the export's one line names the preset, the field and
    the widths (the command turns it into exit 2, as for the fixed plan below); the same split on one width names the
    stage-layer rule, and a fixed plan's split names placement.layers_per_stage."""
    from phaze.export import refusal

    cfg = compose_config("model=llama2", "train=phaze")
    plan = LaunchPlan.from_strategy(strategy(6, [4, 4, 6, 6, 6, 6], [2, 2, 1, 1, 1, 1], dp=128), num_layers=32, global_batch=4096, train=cfg.train)
    assert refusal(cfg, plan, "phaze").startswith("train=phaze (train.per_stage_tp=true): Megatron-LM cannot run this plan: its "
                                                  "pipeline stages have TP widths [2, 2, 1, 1, 1, 1]")
    one_width = LaunchPlan(**{**plan.__dict__, "tp_per_stage": (1,) * 6})
    assert refusal(cfg, one_width, "phaze").startswith("train=phaze (train.stage_layers=any): Megatron-LM cannot run this plan: "
                                                       "layers per stage [4, 4, 6, 6, 6, 6]")
    fixed = compose_config("model=llama2", "hw=h100", "cluster=dgx_h100", "train=megatron", "placement.dp=128", "placement.pp=6",
                           "placement.tp=1")
    assert refusal(fixed, one_width, "megatron").startswith("placement.layers_per_stage=[4, 4, 6, 6, 6, 6]: Megatron-LM cannot run")
    assert refusal(fixed, LaunchPlan(**{**one_width.__dict__, "pp": 5, "tp_per_stage": (1,) * 5, "layers_per_stage": (4, 7, 7, 7, 7)}), "megatron") is None


@pytest.mark.slow
def test_export_of_a_fixed_plan_megatron_cannot_split_is_refused(tmp_path):
    """Megatron's even split of 32 layers over 6 stages is 6, 6, 5, 5, 5, 5: uneven middle stages, refused naming
    placement.layers_per_stage."""
    proc = subprocess.run(
        [sys.executable, "-m", "phaze.export", "model=llama2", "hw=h100", "cluster=dgx_h100", "cluster.devices=48", "train=megatron",
         "train.global_batch=64", "placement.dp=4", "placement.pp=6", "placement.tp=2", "placement.vp=1", "placement.cp=1", "placement.ep=1",
         "placement.zero=1", "placement.sp=false", "placement.tp_comm_overlap=false", "train.mbs=1", "train.recompute=full",
         f"cache_dir={tmp_path / 'cache'}", f"export.dir={tmp_path / 'out'}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=1500)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error: placement.layers_per_stage=[6, 6, 5, 5, 5, 5]"), lines
    assert not (tmp_path / "out").exists()


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
