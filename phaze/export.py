"""`python -m phaze.export`: a plan as the framework launches it: a torchrun command with Megatron-LM's arguments, a
NeMo config fragment and, under train=fsdp, a torchtitan job config (the Megatron-LM files then only where Megatron-LM
runs the plan too).

    python -m phaze.export model=llama2 hw=h100 cluster=dgx_h100 train=megatron        # the study's best plan
    python -m phaze.export model=llama2 hw=h100 cluster=dgx_h100 train=megatron \\
        placement.dp=16 placement.pp=4 placement.tp=8 train.mbs=1 train.recompute=selective ...   # a fixed plan

With the overrides of a `python -m phaze.run` study (its storage: search.storage, or studies.db here), the plan is
the study's best point's placement; with a fixed placement on a chip preset, that placement. Writes
export.dir/megatron_launch.sh (the model's architecture, the plan's parallel sizes, batch, precision, optimizer,
recompute and overlaps, on exactly the plan's devices), export.dir/nemo.yaml and, under train=fsdp,
export.dir/torchtitan.toml, and prints them. A plan the framework cannot run (PHAZE's per-stage TP widths or uneven
middle stages, under train=phaze) is refused: exit 2, one line saying why.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import hydra
import optuna
from sqlalchemy.engine import make_url

import phaze.config  # noqa: F401  (registers the structured configs with Hydra)
from phaze.config import model_job
from phaze.config_check import check_output_folder, checked, refusing_bad_config, run_cli
from phaze.config_values import ConfigError
from phaze.hardware.space import enumerate_space
from phaze.pipeline import evaluate_point
from phaze.plan_space import is_fixed
from phaze.report.launch import LaunchPlan, launch_breach, megatron_command, nemo_config, torchtitan_config
from phaze.search.evaluator import SpaceEvaluator
from phaze.search.study import POINT_PARAM, storage_url


def study_result(spec):
    """The placement of the best trial of the study `spec` (ConfigError when there is no such study or no finished trial)."""
    url = storage_url(spec.config.search)
    name = spec.name
    missing = ConfigError(f"search.storage={url!r}: no study {name!r} there; run `python -m phaze.run` with the same overrides "
                          "first, or fix a placement (placement.dp, placement.pp, placement.tp) on a chip preset")
    database = make_url(url)
    if database.get_backend_name() == "sqlite" and not Path(database.database or "").exists():
        raise missing  # opening it would create an empty database file
    try:
        study = optuna.load_study(study_name=name, storage=url)
    except (KeyError, ValueError):
        raise missing from None
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not done:
        raise ConfigError(f"study {name!r} has no finished trial yet: resume it with `python -m phaze.run` and the same overrides")
    best = max(done, key=lambda t: t.values[0])
    return SpaceEvaluator(spec).evaluate(int(best.params[POINT_PARAM])).result


TORCHTITAN_PRESETS = ("fsdp",)
"""train presets whose plans are also written as a torchtitan job config."""


def refusal(cfg, plan: LaunchPlan, preset: str) -> str | None:
    """Why the plan cannot be launched, naming the field that made it (None: it can)."""
    breach = launch_breach(plan)
    if breach is None:
        return None
    if len(set(plan.tp_per_stage)) > 1:
        field = f"train={preset} (train.per_stage_tp=true)"
    elif plan.recompute == "full" and plan.recompute_granularity == "stage":
        field = f"train={preset} (train.recompute_granularity=stage)"
    elif is_fixed(cfg.placement):
        field = f"placement.layers_per_stage={list(plan.layers_per_stage)}"
    else:
        field = f"train={preset} (train.stage_layers={cfg.train.stage_layers})"
    hint = ("give layers per stage Megatron-LM runs" if field.startswith("placement.") else
            "search under a framework preset (train=megatron, megatron_lm, fsdp, deepspeed, maxtext) for a plan it runs")
    return f"{field}: Megatron-LM cannot run this plan: {breach}; {hint}"


def plan_result(cfg, spec):
    """The placement to export: a fixed one on a chip preset, else the best of the study `spec` (cfg's)."""
    if is_fixed(cfg.placement):
        points = enumerate_space(cfg.hw)
        if len(points) != 1:
            raise ConfigError(f"hw={cfg.hw.name} has {len(points)} points; a fixed placement is exported on one chip (hw=a100, hw=h100, ...)")
        return evaluate_point(model_job(cfg), points)
    return study_result(spec)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@refusing_bad_config
def main(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    cfg, spec = checked(cfg, HydraConfig.get().overrides.task)
    preset = HydraConfig.get().runtime.choices.get("train", "")
    if cfg.get("models"):
        raise ConfigError("models: export one model's plan at a time (model=<name>)")
    check_output_folder(cfg.export.dir, "export.dir")
    result = plan_result(cfg, spec)
    if result is None or not result.feasible:
        print(f"no feasible placement to export{': ' + result.reason if result is not None else ''}", file=sys.stderr)
        sys.exit(1)
    plan = LaunchPlan.from_strategy(result.strategy, int(cfg.model.num_layers), int(cfg.train.global_batch), cfg.train,
                                    node_size=int(cfg.cluster.node_size))
    model = model_job(cfg).workload.model
    files, why = {}, refusal(cfg, plan, preset)
    if preset in TORCHTITAN_PRESETS:
        files["torchtitan.toml"] = torchtitan_config(plan, model, int(model.seq_len))
    elif why:
        raise ConfigError(why)
    if why is None:
        files["megatron_launch.sh"] = "#!/bin/sh\n" + shlex.join(megatron_command(plan, model, str(model.attention))) + "\n"
        files["nemo.yaml"] = nemo_config(plan, model)
    out = Path(cfg.export.dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
    print(f"{cfg.model.name}: {result.throughput_seq_s:.4g} seq/s on {plan.world_size} devices (tensor {plan.tp} x pipeline "
          f"{plan.pp} x context {plan.cp} x data {plan.dp}; the plan's {result.strategy.devices_used} of cluster.devices="
          f"{cfg.cluster.devices})")
    for name, text in files.items():
        print(f"\n{name}:\n{text}", end="")
    if why:
        print(f"\nno Megatron-LM / NeMo launch: {launch_breach(plan)}")
    print(f"\nwrote {', '.join(str(out / name) for name in files)}")


if __name__ == "__main__":
    run_cli(main)
