"""The stages take typed inputs built once at the entry points: below them nothing imports Hydra or OmegaConf, and
the typed inputs say what the composed config says."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import omegaconf
import pytest

import phaze
from phaze.config import compose_config, model_job, study_spec, typed_config
from phaze.inputs import ModelJob
from phaze.plan_space import DIMENSIONS, options
from phaze.schema import Config
from phaze.schema.fields import MISSING
from phaze.tracking.dashboard import TINY_MODEL

PHAZE = Path(phaze.__file__).parent
CONFIG_SIDE = {
    "phaze.run", "phaze.evaluate", "phaze.export", "phaze.validate",  # the entry points
    "phaze.config", "phaze.config_check", "phaze.job_output",  # composing, checking and refusing a config
    "phaze.report.validation", "phaze.report.layer_prediction",  # phaze.validate's runners: a config per published run
}
"""The modules that may read a composed config: the entry points and what composes, checks or refuses one for them.
The rules across config groups (phaze.checks) read the typed config: the typed inputs' constructors run them."""
FRAMEWORKS = ("hydra", "omegaconf")


def module_names() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages([str(PHAZE)], prefix="phaze."))


def config_side(name: str) -> bool:
    return name in CONFIG_SIDE


def stage_modules() -> list[str]:
    return [m for m in module_names() if not config_side(m)]


def imported(path: Path) -> set[str]:
    """Every module a source file imports, at any depth of its code (function-level imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def source_of(name: str) -> Path:
    path = PHAZE.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_the_stage_list_is_the_package_but_the_config_side():
    """The stages checked below are every module of phaze but the config side, which exists as named."""
    names = set(module_names())
    assert CONFIG_SIDE <= names
    stages = set(stage_modules())
    for stage in ("phaze.checks.placement", "phaze.checks.hardware", "phaze.pipeline", "phaze.plan_space", "phaze.inputs", "phaze.compat", "phaze.schema", "phaze.search.study",
                  "phaze.search.evaluator", "phaze.workload.extract", "phaze.placement.solve", "phaze.tracking.params"):
        assert stage in stages


def test_no_stage_module_imports_hydra_or_omegaconf_or_the_config_side():
    """Below the entry points no module names Hydra, OmegaConf or the modules that read a composed config."""
    offenders = {}
    for name in stage_modules():
        bad = {m for m in imported(source_of(name)) if m.split(".")[0] in FRAMEWORKS or config_side(m)}
        if bad:
            offenders[name] = sorted(bad)
    assert offenders == {}


def test_importing_every_stage_leaves_hydra_and_omegaconf_unloaded():
    """Not even through another package: a fresh interpreter importing every stage module has neither loaded."""
    script = (f"import importlib, sys\nfor m in {stage_modules()!r}:\n    importlib.import_module(m)\n"
              f"print([f for f in {FRAMEWORKS!r} if f in sys.modules])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=PHAZE.parent)
    assert out.stdout.strip() == "[]"


def test_the_schema_marks_mandatory_fields_as_omegaconf_does():
    assert MISSING == omegaconf.MISSING


def test_the_typed_config_holds_the_composed_values():
    """typed_config is the composed config as its dataclasses, value for value."""
    cfg = compose_config("train=megatron", "hw=h100", "cluster=dgx_h100", "train.mbs=[1,2]", "placement.zero=1")
    config = typed_config(cfg)
    assert isinstance(config, Config) and config.train.mbs == [1, 2] and config.placement.zero == 1
    assert json.dumps(asdict(config), sort_keys=True, default=str) == json.dumps(omegaconf.OmegaConf.to_container(cfg, resolve=True),
                                                                                    sort_keys=True, default=str)


def test_a_model_job_parses_the_plan_space_once_as_options_does(tmp_path):
    """The job's placement space is each dimension's options(), its variants every (mbs, ep, cp, sp, overlap)
    combination that runs (overlap only with sp), and its execution the resolved schedule and the chip's switches."""
    cfg = compose_config(*TINY_MODEL, "train=megatron", "hw=h100", "cluster=dgx_h100", "train.mbs=[1,2]", "train.sp=[false,true]",
                         "train.tp_comm_overlap=[false,true]", "hw.inter_op_parallel=false", f"cache_dir={tmp_path}")
    job = model_job(cfg)
    assert isinstance(job, ModelJob) and job.devices == int(cfg.cluster.devices) and job.name == cfg.model.name
    config = typed_config(cfg)
    assert job.plan.values == {name: tuple(options(config, name)) for name in DIMENSIONS}
    assert job.plan.space.mbs == (1, 2) and job.plan.fixed is None
    variants = {(v.mbs, v.sp, v.tp_comm_overlap) for v in job.plan.variants}
    assert variants == {(1, False, False), (1, True, False), (1, True, True), (2, False, False), (2, True, False), (2, True, True)}
    assert job.execution.schedule.mode_search is True and job.execution.inter_op_parallel is False  # megatron: the timeline step
    assert job.workload.sp_values == (False, True) and job.workload.mbs_values == (1, 2)


def test_the_study_spec_keeps_the_study_names_of_the_composed_config():
    """A study's name hashes its typed config exactly as the composed config was hashed (existing studies resume):
    these names were computed from the composed config (with hw.sfu_lanes, hw.mma_sync_fraction and train.grad_bucket_*,
    train.attention_warp_mma, train.selective_policy, cluster.nvls_bus_gbps, cluster.collective_algorithm=nccl and hw.power_limit_w,
    hw.sustained_power_w, hw.clock_floor_power_w, train.per_param_sharding, cluster.rails, cluster.rail_group_nodes and
    cluster.spine_oversubscription, which change the answer, in the hash; the SuperPOD presets' scalable units in cluster=dgx_h100)."""
    assert study_spec(compose_config()).name == "llama2-phaze_grid-phaze_1024-bound-throughput-ede00017"
    assert study_spec(compose_config("train=megatron", "hw=h100", "cluster=dgx_h100")).name == "llama2-h100-dgx_h100-bound-throughput-4b0e1553"
    assert study_spec(compose_config("model=[llama2,gpt2]")).name == "llama2+gpt2-phaze_grid-phaze_1024-bound-throughput-3a0eb4c0"
    assert study_spec(compose_config("compat=phaze")).name == "llama2-phaze_grid-phaze_1024-bound-throughput-07264262"


def test_a_common_study_hands_each_model_its_own_job_and_the_baseline_its_preset():
    spec = study_spec(compose_config("model=[gpt2,opt]", "hw.baseline=h100"))
    assert [job.name for job in spec.jobs()] == ["gpt2", "opt"]
    assert spec.single(1).name == study_spec(compose_config("model=opt", "hw.baseline=h100")).name
    assert spec.baseline_hw.name == "h100" and spec.baseline_job(spec.jobs()[1]).execution.overlap_slowdown == \
        float(compose_config("hw=h100").hw.overlap_slowdown)
