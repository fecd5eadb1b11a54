"""Bad config values stop `phaze.run` and `phaze.evaluate` before any work: exit code 2, one line on
stderr naming the field (and the allowed values), nothing written: mlruns/, the study storage and every other file
of the working directory (Hydra's output folder included) stay as they were."""

import hashlib
import runpy
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra.core.global_hydra import GlobalHydra

from phaze.config_check import EXIT_CONFIG
from tests.test_search_study import TINY_MODEL

BASE = [*TINY_MODEL, "hw=tiny_grid"]
"""A valid job (checked below) that each case breaks in one place."""

MOE = ["model.family=mixtral", "model.num_experts=4", "model.experts_per_token=2", "model.expert_ffn_hidden_size=512"]
"""The base job's model as a mixture of experts."""
DEEPSEEK = ["model.family=deepseek_v2", "model.num_experts=4", "model.experts_per_token=2", "model.expert_ffn_hidden_size=512",
            "model.num_shared_experts=1", "model.kv_lora_rank=32", "model.rope_head_dim=8", "model.v_head_dim=64"]
"""The base job's model as a DeepSeek-V2 (multi-head latent attention, shared experts)."""

CASES = [
    # (overrides, field the message must name, a word the message must list as allowed)
    (["model=nope"], "model", "llama2"),
    (["model=[gpt2,nope]"], "model/nope", "llama2"),
    (["hw=nope"], "hw", "tiny_grid"),
    (["cluster=nope"], "cluster", "dgx_a100"),
    (["search=nope"], "search", "bound"),
    (["hw/area=nope"], "hw/area", "modern_7nm"),
    (["model=base_model"], "model=base_model", "llama2"),
    (["model=[gpt2,base_model]"], "model=[gpt2,base_model]", "llama2"),
    (["train=base_train"], "train=base_train", "megatron"),
    (["hw=base_hw"], "hw=base_hw", "tiny_grid"),
    (["hw/area=base_area"], "hw/area=base_area", "modern_7nm"),
    (["search=base_search"], "search=base_search", "bound"),
    (["model.num_layerz=3"], "model.num_layerz", "allowed keys: name, family, num_layers"),
    (["model.num_layers=abc"], "model.num_layers", "Integer"),
    (["model.num_layers=0"], "model.num_layers", "positive"),
    (["model.hidden_size=-256"], "model.hidden_size", "positive"),
    (["model.num_heads=3"], "model.num_heads", "divide"),
    (["model.seq_len=256"], "model.seq_len", "max_position_embeddings=128"),
    (["model.family=bloom"], "model.family", "llama"),
    (["model.attention=sparse"], "model.attention", "flash"),
    (["train.global_batch=0"], "train.global_batch", "positive"),
    (["train.global_batch=63"], "train.global_batch", "multiple"),
    (["train.mbs=[1,-2]"], "train.mbs", "positive"),
    (["train.tp_widths=[1,3]"], "train.tp_widths", "powers of two"),
    (["train.tp_widths=[1,8]"], "train.tp_widths", "<= 4"),
    (["train.optimizer=lion"], "train.optimizer", "adam"),
    (["train.selective_policy=layer"], "train.selective_policy", "attention_core, torchtitan_op"),
    (["train.bytes_per_elem=3"], "train.bytes_per_elem", "2, 4"),
    (["hw.tc_rows=[8,12]"], "hw.tc_rows", "powers of two"),
    (["hw.n_tc=[0,1]"], "hw.n_tc", "positive"),
    (["hw.area_budget_mm2=0.5"], "hw.area_budget_mm2", ">= 3.405"),
    (["hw.freq_ghz=0"], "hw.freq_ghz", "> 0"),
    (["hw.matmul_efficiency=1.5"], "hw.matmul_efficiency", "(0, 1]"),
    (["hw.kind=cube"], "hw.kind", "grid"),
    (["cluster.devices=-16"], "cluster.devices", "positive"),
    (["cluster=dgx_a100", "cluster.devices=12"], "cluster.devices", "multiples of cluster.node_size=8"),
    (["cluster.collective_algorithm=mesh"], "cluster.collective_algorithm", "ring"),
    (["cluster=tpuv4_pod", "cluster.torus_dims=[4,4]", "cluster.collective_algorithm=nccl"], "cluster.collective_algorithm=nccl", "ring"),
    (["cluster=dgx_h100", "cluster.nvls_bus_gbps=-476"], "cluster.nvls_bus_gbps", "> 0"),
    (["cluster=dgx_h100", "cluster.rails=3"], "cluster.rails", "divisors of cluster.node_size=8 (1, 2, 4, 8)"),
    (["cluster=dgx_h100", "cluster.rail_group_nodes=0"], "cluster.rail_group_nodes", "positive integers"),
    (["cluster=dgx_h100", "cluster.spine_oversubscription=0.5"], "cluster.spine_oversubscription", ">= 1"),
    (["train.precision=fp4"], "train.precision", "fp8"),
    (["hw=a100", "train.precision=fp8"], "hw.fp8_matmul_ratio", ">= 1"),
    (["hw=h100", "hw.fp8_matmul_ratio=0.5"], "hw.fp8_matmul_ratio", ">= 1"),
    (["hw=h100", "hw.fp8_matmul_efficiency=0"], "hw.fp8_matmul_efficiency", "(0, 1]"),
    (["hw=h100", "hw.fp8_matmul_efficiency=1.2"], "hw.fp8_matmul_efficiency", "(0, 1]"),
    (["train.fp8_params=true"], "train.precision", "fp8"),
    (["hw=h100", "train.precision=fp8", "train.fp8_params=true", "train.master_bytes_per_param=2"], "train.master_bytes_per_param", "4"),
    (["hw=h100", "hw.matmul_sustained_slowdown=0.9"], "hw.matmul_sustained_slowdown", ">= 1"),
    # a board power limit (issue 47): above the power that does not follow the clock, on a chip measured at a limit
    (["hw=h100", "hw.power_limit_w=0"], "hw.power_limit_w", "numbers > the chip's power that does not follow its clock, hw.clock_floor_power_w=74.6 W"),
    (["hw=h100", "hw.power_limit_w=60"], "hw.power_limit_w", "hw.clock_floor_power_w=74.6 W"),
    (["hw=a100", "hw.power_limit_w=300"], "hw.power_limit_w", "no hw.sustained_power_w"),
    (["hw=h100", "hw.clock_floor_power_w=-1"], "hw.clock_floor_power_w", ">= 0"),
    (["hw=h100", "hw.sustained_power_w=50"], "hw.sustained_power_w", "> hw.clock_floor_power_w=74.6 W"),
    (["hw=h100", "hw.matmul_tile_rows=-1"], "hw.matmul_tile_rows", "whole number of elements >= 0"),
    (["hw=h100", "hw.matmul_fixed_s=-1e-6"], "hw.matmul_fixed_s", "seconds >= 0"),
    (["hw=modern_grid", "hw.area.tc_fp8_multiplier_um2=-5"], "hw.area.tc_fp8_multiplier_um2", ">= 0"),
    (["hw=modern_grid", "hw.power.pj_per_fp8_mac=-0.1"], "hw.power.pj_per_fp8_mac", ">= 0"),
    (["cluster=tpuv4_pod", "cluster.torus_dims=[8,8,8]"], "cluster.torus_dims", "product cluster.devices="),
    (["cluster=tpuv4_pod", "cluster.torus_dims=[2,2,4]", "cluster.inter_node_gbps=25"], "cluster.inter_node_gbps", "cluster.intra_node_gbps=50.0"),
    (["search.sampler=random"], "search.sampler", "nsga2"),
    (["compat=nope"], "compat", "phaze"),
    (["compat.drop_wgrad=true"], "compat.drop_wgrad", "allowed keys: name, compute_ms, no_weight_grad"),
    (["compat.compute_ms=maybe"], "compat.compute_ms", "not a valid bool"),
    (["search.objective=latency"], "search.objective", "throughput_per_tdp"),
    (["search.n_trials=0"], "search.n_trials", "positive"),
    (["search.top_n=0"], "search.top_n", "positive integers"),
    (["search=nsga2", "search.top_n=3"], "search.top_n", "allowed with search=nsga2: 1"),
    (["search.n_workers=0"], "search.n_workers", "positive"),
    (["workload_processes=0"], "workload_processes", "positive"),
    (["search.rel_gap=-0.01"], "search.rel_gap", "[0, 1)"),
    (["search.n_workers=2", "search.storage=memory"], "search.n_workers", "postgresql://"),
    (["search.storage=nosuchdb://host/x"], "search.storage", "sqlite:///"),
    (["tracking.uri=./mlruns"], "tracking.uri", "sqlite:///"),
    (["tracking.uri=postgresql+pg8000://u@localhost/mlflow"], "tracking.uri", "driver is not installed (No module named 'pg8000'"),
    (["search.storage=postgresql+pg8000://u@localhost/optuna"], "search.storage", "driver is not installed (No module named 'pg8000'"),
    (["placement.sp=maybe"], "placement.sp", "allowed values: true, false"),
    (["tracking.uri=file:///tmp/mlruns"], "tracking.uri", "MLFLOW_ALLOW_FILE_STORE"),
    (["search.grace_period_s=2", "search.heartbeat_interval_s=5"], "search.grace_period_s", "> search.heartbeat_interval_s=5"),
    (["schedule.mip_gap=1.5"], "schedule.mip_gap", "[0, 1)"),
    (["schedule.backend=cplex"], "schedule.backend", "highs"),
    (["schedule.mode_search=sometimes"], "schedule.mode_search", "bool"),
    (["placement.dp=4"], "placement.dp", "all three"),
    (["train.global_batch=16", "train.mbs=[2,4]", "placement.dp=16", "placement.pp=1", "placement.tp=1"], "placement.dp", "placement.dp <= 8"),
    (["placement.dp=4", "placement.pp=2", "placement.tp=4"], "placement.dp x pp x tp", "cluster.devices=16"),
    # the modern placement dimensions (issue 12)
    (["placement.zero=4"], "placement.zero", "0, 1, 2, 3"),
    (["train=megatron", "train.zero=[0,5]"], "train.zero", "0, 1, 2, 3"),
    (["placement.zero=1"], "placement.zero", "train.step_model=timeline"),
    (["train.recompute=sometimes"], "train.recompute", "selective"),
    (["train.step_model=overlap"], "train.step_model", "timeline"),
    (["train.master_bytes_per_param=3"], "train.master_bytes_per_param", "0, 2, 4"),
    (["train.moment_bytes_per_param=2"], "train.moment_bytes_per_param", "4, 8"),
    (["train.grad_bytes_per_elem=3"], "train.grad_bytes_per_elem", "2, 4"),
    (["train.update_bytes_per_param=-1"], "train.update_bytes_per_param", ">= 0"),
    (["train.grad_bucket_min_params=-1"], "train.grad_bucket_min_params", ">= 0"),
    (["train.grad_bucket_params_per_rank=-5"], "train.grad_bucket_params_per_rank", ">= 0"),
    (["placement.sp=maybe"], "placement.sp", "bool"),
    (["train.serial_zero3_collectives=sometimes"], "train.serial_zero3_collectives", "bool"),
    (["train.per_param_sharding=sometimes"], "train.per_param_sharding", "bool"),
    (["placement.vp=-1"], "placement.vp", ">= 0"),
    (["train=megatron", "train.tp_widths=[1,2]", "placement.cp=3"], "placement.cp", "allowed: [1, 2, 4"),
    (["train=megatron", "train.tp_widths=[1,2]", "placement.cp=2", "train.attention=eager"], "placement.cp", "flash"),
    (["train=megatron", "train.tp_widths=[1,2]", "placement.tp_comm_overlap=true", "placement.sp=false"],
     "placement.tp_comm_overlap", "placement.sp=true"),
    (["train=megatron", "train.tp_widths=[1,2]", "placement.dp=4", "placement.pp=2", "placement.tp=2", "placement.vp=2"],
     "placement.vp", "allowed with placement.pp=2: [1]"),
    (["placement.dp=8", "placement.pp=2", "placement.tp=1", "placement.layers_per_stage=[1,2]"],
     "placement.layers_per_stage", "summing to model.num_layers=2"),
    # a partly fixed placement: refused only where no value of an unset field fits (issue 45)
    (["train=megatron", "train.cp=[2]", "placement.dp=8", "placement.pp=1", "placement.tp=2"],
     "placement.cp (unset): no value of train.cp=[2] fits", "dp x pp x tp x cp = 16 x cp at most cluster.devices=16"),
    (["train=megatron", "train.vp=[2,4]", "placement.dp=8", "placement.pp=1", "placement.tp=2"],
     "placement.vp (unset): no value of train.vp=[2, 4] fits", "vp 1, or pp >= 2"),
    ([*MOE, "train=megatron", "train.zero=[2,3]", "train.ep=[2]", "placement.dp=8", "placement.pp=1", "placement.tp=2"],
     "placement.zero, sp, tp_comm_overlap and ep", "zero=[2, 3], sp=[False, True], tp_comm_overlap=[False], ep=[2]"),
    # launchable plans (issue 45): one TP width under a framework preset, the stage-layer rules by name
    (["train=megatron", "train.tp_widths=[1,2]", "placement.dp=4", "placement.pp=2", "placement.tp=[2,1]"],
     "placement.tp=[2, 1]", "allowed: one width, e.g. placement.tp=2"),
    (["train=fsdp", "train.tp_widths=[1,2]", "placement.dp=4", "placement.pp=2", "placement.tp=[1,2]"], "placement.tp=[1, 2]", "one width"),
    (["placement.dp=4", "placement.pp=2", "placement.tp=[2,1]"], "placement.tp=[2, 1]", "per-stage widths are searched"),
    (["train=megatron", "train.tp_widths=[1,2]", "train.stage_layers=uneven"], "train.stage_layers", "even_middle"),
    # mixtures of experts (issue 13)
    ([*MOE, "model.experts_per_token=6"], "model.experts_per_token", "model.num_experts=4"),
    ([*MOE, "train=megatron", "train.tp_widths=[1,2]", "placement.ep=3"], "placement.ep", "divisors of the experts"),
    ([*MOE, "placement.ep=2"], "placement.ep", "train.step_model=timeline"),
    ([*MOE, "train=megatron", "train.tp_widths=[1,2]", "placement.ep=2", "placement.zero=3"], "placement.zero", "0 and 1"),
    (["train.capacity_factor=-1"], "train.capacity_factor", ">= 0"),
    (["train.moe_imbalance=0.5"], "train.moe_imbalance", ">= 1"),
    (["model.num_experts=8"], "model.num_experts", "mixtral"),
    # layer patterns and multi-head latent attention (issue 13: DeepSeek-V2-Lite)
    (["model.first_dense_layers=1"], "model.first_dense_layers", "deepseek_v2"),
    ([*MOE, "model.moe_layer_freq=2"], "model.moe_layer_freq", "qwen2_moe"),
    (["model.moe_layer_freq=0"], "model.moe_layer_freq", "> 0"),
    ([*DEEPSEEK, "model.first_dense_layers=2"], "model.first_dense_layers", "0..1"),
    ([*DEEPSEEK, "model.first_dense_layers=-1"], "model.first_dense_layers", ">= 0"),
    (["model.kv_lora_rank=64"], "model.kv_lora_rank", "deepseek_v2"),
    ([*DEEPSEEK, "model.rope_head_dim=7"], "model.rope_head_dim", "even"),
    ([*DEEPSEEK, "model.v_head_dim=0"], "model.v_head_dim", ">= 1"),
    # HBM as stacks (issue 14)
    (["hw=modern_grid", "hw.hbm_generation=[hbm4]"], "hw.hbm_generation", "hbm2e, hbm3, hbm3e"),
    (["hw=modern_grid", "hw.hbm_stacks=[0,4]"], "hw.hbm_stacks", "positive"),
    (["hw=modern_grid", "hw.hbm_stacks=[-1]"], "hw.hbm_stacks", "positive"),
    # The realistic world's baseline chip, head widths and NCCL latencies (issue 14)
    (["hw=modern_grid", "hw.baseline=tpu9"], "hw.baseline", "tpuv4_modern"),
    (["hw=modern_grid", "hw.baseline=modern_grid"], "hw.baseline", "h100"),
    (["model.head_dim=96"], "model.head_dim", "starcoder2"),
    (["model.head_dim=-8"], "model.head_dim", ">= 0"),
    (["cluster=dgx_h100", "cluster.collective_launch_s=-1e-6"], "cluster.collective_launch_s", ">= 0"),
    (["cluster=dgx_h100", "cluster.inter_node_latency_s=-1e-6"], "cluster.inter_node_latency_s", ">= 0"),
]


def snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under root (mlruns/, the study storage, Hydra's outputs/...), files by content."""
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "folder"
            for f in root.rglob("*")}


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A working directory holding a used mlruns/ and study storage, as after earlier runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    (tmp_path / "mlruns").mkdir()
    with sqlite3.connect(tmp_path / "mlruns" / "mlflow.db") as conn:
        conn.execute("CREATE TABLE runs (run_uuid TEXT)")
    optuna.create_study(study_name="earlier", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    return tmp_path


def run_in_process(module: str, overrides: list[str], monkeypatch) -> int:
    """`python -m module overrides...` in this process (Hydra and phaze already imported): its exit code."""
    monkeypatch.setattr(sys, "argv", [module, *overrides])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__")
    return stop.value.code


def assert_one_line(err: str, field: str, allowed: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and field in lines[0] and allowed in lines[0], lines[0]


def test_the_base_job_is_valid():
    from phaze.config import compose_config
    from phaze.config_check import check_config

    check_config(compose_config(*BASE))


@pytest.mark.parametrize("overrides,field,allowed", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_value_exits_2_naming_the_field(project, monkeypatch, capsys, overrides, field, allowed):
    before = snapshot(project)
    code = run_in_process("phaze.run", [*BASE, *overrides], monkeypatch)
    assert code == EXIT_CONFIG
    assert_one_line(capsys.readouterr().err, field, allowed)
    assert snapshot(project) == before


def test_an_empty_model_list_names_the_models(project, monkeypatch, capsys):
    """`model=[]` (no model.* overrides after it, which Hydra would refuse first) names the models there are."""
    before = snapshot(project)
    code = run_in_process("phaze.run", ["model=[]", "hw=tiny_grid"], monkeypatch)
    assert code == EXIT_CONFIG
    assert_one_line(capsys.readouterr().err, "model=[]", "megatron_gpt3_175b")
    assert snapshot(project) == before


@pytest.mark.parametrize("overrides,field,allowed", [(["train.global_batch=0"], "train.global_batch", "positive"),
                                                      (["model=nope"], "model", "llama2"),
                                                      (["cluster=base_cluster"], "cluster=base_cluster", "dgx_a100")])
def test_evaluate_checks_the_same_way(project, monkeypatch, capsys, overrides, field, allowed):
    before = snapshot(project)
    code = run_in_process("phaze.evaluate", [*BASE, "hw=tpuv4", *overrides], monkeypatch)
    assert code == EXIT_CONFIG
    assert_one_line(capsys.readouterr().err, field, allowed)
    assert snapshot(project) == before


@pytest.mark.slow
def test_command_line_exit_code(project):
    """The real command, in a new process: Hydra's unknown-option error exits 2 with the options listed."""
    before = snapshot(project)
    proc = subprocess.run([sys.executable, "-m", "phaze.run", "model=gpt3"], cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_CONFIG
    assert_one_line(proc.stderr, "model", "megatron_gpt3_175b")
    assert snapshot(project) == before


def test_a_refused_job_in_a_used_folder_takes_back_only_what_it_wrote(project, monkeypatch, capsys):
    """With hydra.run.dir=. the job's folder is the working directory: Hydra's saved config goes, the folder, its
    files and an earlier run's log (appended to, not created, by this job) stay."""
    (project / "run.log").write_text("an earlier run's log\n")
    before = snapshot(project)
    code = run_in_process("phaze.run", [*BASE, "hydra.run.dir=.", "search.n_workers=0"], monkeypatch)
    assert code == EXIT_CONFIG
    assert_one_line(capsys.readouterr().err, "search.n_workers", "positive")
    assert snapshot(project) == before


def test_a_file_store_from_the_environment_is_refused_unless_mlflow_allows_it(monkeypatch):
    """$MLFLOW_TRACKING_URI=./mlruns is refused naming the variable; MLflow's own opt-out lets it through, and a disabled
    tracker checks nothing."""
    from omegaconf import OmegaConf

    from phaze.config_check import check_tracking
    from phaze.config_values import ConfigError

    tracking = OmegaConf.create({"uri": None, "experiment": "phaze", "enabled": True})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "./mlruns")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=r"\$MLFLOW_TRACKING_URI='./mlruns': MLflow refuses a filesystem tracking store"):
        check_tracking(tracking)
    check_tracking(OmegaConf.merge(tracking, {"enabled": False}))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_tracking(tracking)


@pytest.mark.parametrize("figure,allowed", [("t.xyz", "ending in .avif, .eps"), ("notadir/t.png", "writable folder")])
def test_evaluate_refuses_a_figure_it_could_not_write(project, monkeypatch, capsys, figure, allowed):
    """A format matplotlib does not write, or a folder under a file: refused before the evaluation, nothing written."""
    (project / "notadir").write_text("a file, not a folder\n")
    before = snapshot(project)
    code = run_in_process("phaze.evaluate", [*BASE, "hw=tpuv4", f"figure={figure}"], monkeypatch)
    assert code == EXIT_CONFIG
    assert_one_line(capsys.readouterr().err, "figure", allowed)
    assert snapshot(project) == before
