"""`python -m phaze.export`: a plan as Megatron-LM arguments and a NeMo config fragment.

    python -m phaze.export model=llama2 hw=h100 cluster=dgx_h100 train=megatron        # the study's best plan
    python -m phaze.export model=llama2 hw=h100 cluster=dgx_h100 train=megatron \\
        placement.dp=16 placement.pp=4 placement.tp=8 train.mbs=1 train.recompute=selective ...   # a fixed plan

With the overrides of a `python -m phaze.run` study (its storage: search.storage, or studies.db here), the plan is
the study's best point's placement; with a fixed placement on a chip preset, that placement. Writes
export.dir/megatron_args.txt and export.dir/nemo.yaml and prints both, with notes on what the framework cannot say
(per-stage TP widths, uneven middle stages).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import hydra
import optuna
from sqlalchemy.engine import make_url

from phaze import schema  # noqa: F401  (registers the structured configs)
from phaze.config_check import check_fixed, check_output_folder, checked, refusing_bad_config, run_cli
from phaze.config_values import ConfigError
from phaze.hardware.space import enumerate_space
from phaze.pipeline import evaluate_point
from phaze.report.launch import LaunchPlan, megatron_args, nemo_config
from phaze.search.evaluator import SpaceEvaluator
from phaze.search.study import POINT_PARAM, storage_url, study_name


def study_result(cfg):
    """The placement of the best trial of cfg's study (ConfigError when there is no such study or no finished trial)."""
    url = storage_url(cfg)
    name = study_name(cfg)
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
    return SpaceEvaluator(cfg).evaluate(int(best.params[POINT_PARAM])).result


def plan_result(cfg):
    """The placement to export: a fixed one on a chip preset, else the study's best."""
    if cfg.placement.dp and cfg.placement.pp and cfg.placement.tp:
        check_fixed(cfg)
        points = enumerate_space(cfg.hw)
        if len(points) != 1:
            raise ConfigError(f"hw={cfg.hw.name} has {len(points)} points; a fixed placement is exported on one chip (hw=a100, hw=h100, ...)")
        return evaluate_point(cfg, points)
    return study_result(cfg)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@refusing_bad_config
def main(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    cfg = checked(cfg, HydraConfig.get().overrides.task)
    if cfg.get("models"):
        raise ConfigError("models: export one model's plan at a time (model=<name>)")
    check_output_folder(cfg.export.dir, "export.dir")
    result = plan_result(cfg)
    if result is None or not result.feasible:
        print(f"no feasible placement to export{': ' + result.reason if result is not None else ''}", file=sys.stderr)
        sys.exit(1)
    plan = LaunchPlan.from_strategy(result.strategy, int(cfg.model.num_layers), int(cfg.train.global_batch), cfg.train)
    args, notes = megatron_args(plan)
    out = Path(cfg.export.dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "megatron_args.txt").write_text(shlex.join(args) + "\n" + "".join(f"# note: {n}\n" for n in notes))
    (out / "nemo.yaml").write_text(nemo_config(plan))
    print(f"{cfg.model.name}: {result.throughput_seq_s:.4g} seq/s on {result.strategy.devices_used} devices "
          f"(data parallel {plan.dp})\n\nMegatron-LM:\n{shlex.join(args)}")
    for note in notes:
        print(f"note: {note}")
    print(f"\nNeMo:\n{nemo_config(plan)}wrote {out / 'megatron_args.txt'} and {out / 'nemo.yaml'}")


if __name__ == "__main__":
    run_cli(main)
