"""Compose the Hydra config outside an entry point (tests, benchmarks, notebooks), as `phaze.run` would, split
`model=[a,b,...]` (several models searched together) into one config per model, and turn a composed config into the
typed inputs the stages take (typed_config, model_job, study_spec): the one module that hands them down."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from phaze import schema
from phaze.config_values import ConfigError
from phaze.inputs import ModelJob
from phaze.search.spec import StudySpec

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
MODEL_GROUP = "model"
TRAIN_GROUP = "train"


def register_configs() -> None:
    """Register the base schema and each group's schema (phaze.schema) so YAML files are validated against them."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=schema.Config)
    cs.store(name="base_validate", node=schema.ValidateCfg)
    for group, name, node in (("model", "base_model", schema.ModelCfg), ("hw", "base_hw", schema.HwCfg), ("hw/area", "base_area", schema.AreaCfg),
                              ("hw/power", "base_power", schema.PowerCfg), ("cluster", "base_cluster", schema.ClusterCfg),
                              ("train", "base_train", schema.TrainCfg), ("search", "base_search", schema.SearchCfg),
                              ("tracking", "base_tracking", schema.TrackingCfg), ("compat", "base_compat", schema.CompatCfg)):
        cs.store(group=group, name=name, node=node)


register_configs()


def compose_config(*overrides: str):
    """The job config for these command-line style overrides, e.g. compose_config("model=gpt2", "hw=tpuv4");
    `model=[a,b,...]` fills cfg.models as `python -m phaze.run` does. Inside a running Hydra app (conf/ is
    already its search path) it composes there."""
    if GlobalHydra.instance().is_initialized():
        return attach_models(compose(config_name="config", overrides=list(overrides)), overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return attach_models(compose(config_name="config", overrides=list(overrides)), overrides)


def presets(group: str) -> list[str]:
    """The names of the options of a config group (conf/<group>/*.yaml)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def preset_hw(name: str):
    """The hw config of the conf/hw preset `name`, composed with its area and power groups."""
    return compose_config(f"hw={name}").hw


def listed_models(overrides) -> list[str]:
    """The names of a `model=[a,b,...]` override, [] when the model is a single choice.

    Hydra merges a list of group options into one node (the last wins), so the list is read
    from the overrides themselves; an empty list is a ConfigError naming the models there are (Hydra's
    composition refuses an unknown name before this is called).
    """
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.key_or_group == MODEL_GROUP and isinstance(override.value(), list):
            names = [str(v) for v in override.value()]
            if not names:
                raise ConfigError(f"{override.input_line}: give at least one model; allowed values for model: "
                                  f"{', '.join(presets(MODEL_GROUP))}")
            return names
    return []


def per_model_overrides(overrides) -> list[list[str]]:
    """One override list per model of a `model=[a,b,...]` override (just `overrides` when there is none)."""
    overrides = list(overrides)
    names = listed_models(overrides)
    if not names:
        return [overrides]
    rest = [o for o in overrides if OverridesParser.create().parse_override(o).key_or_group != MODEL_GROUP]
    return [rest + [f"{MODEL_GROUP}={name}"] for name in names]


def attach_models(cfg, overrides):
    """cfg with cfg.models holding each model of a `model=[a,b,...]` override, composed one by one
    (so `model.*` overrides apply to each) and cfg.model the first; cfg itself for a single model.

    Needs an initialised Hydra (inside an entry point, or compose_config's context).
    """
    names = listed_models(overrides)
    if not names:
        return cfg
    models = [compose(config_name="config", overrides=o).model for o in per_model_overrides(overrides)]
    cfg = cfg.copy()
    cfg.model = models[0]
    cfg.models = models
    return cfg


def models_of(cfg) -> list:
    """One job config per model searched: [cfg] for a single model, else cfg with model set to each of cfg.models."""
    if not cfg.get("models"):
        return [cfg]
    out = []
    for model in cfg.models:
        one = cfg.copy()
        one.model = model
        one.models = []
        out.append(one)
    return out


def typed_config(cfg) -> schema.Config:
    """The composed config as its structured-config dataclasses (phaze.schema.Config): what the stages are handed."""
    return OmegaConf.to_object(cfg)


def model_job(cfg) -> ModelJob:
    """The typed inputs of cfg's model (the first of a common study's): what phaze.pipeline takes."""
    return ModelJob.of(typed_config(models_of(cfg)[0]))


def train_preset() -> str | None:
    """The conf/train preset the running job was composed with (Hydra's choice, known inside an entry point such as
    `python -m phaze.run`); None where the config was composed outside one (compose_config)."""
    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get(TRAIN_GROUP)


def baseline_hw(name: str) -> schema.HwCfg:
    """The chip hw.baseline names, typed: a point preset of conf/hw (the chip a search's answer is compared with)."""
    hw = typed_config(preset_hw(name)) if name in presets("hw") else None
    if hw is None or hw.kind != "point":
        points = [p for p in presets("hw") if preset_hw(p).kind == "point"]
        raise ConfigError(f"hw.baseline={name!r}: allowed values are {', '.join(points)}")
    return hw


def study_spec(cfg) -> StudySpec:
    """The typed input of cfg's study, checked (StudySpec.of): the typed config, the hw.baseline preset's space composed
    (when set), the resolved config as the parent run logs it, and the train preset."""
    config = typed_config(cfg)
    baseline = baseline_hw(str(config.hw.baseline)) if config.hw.baseline else None
    return StudySpec.of(config, baseline, OmegaConf.to_yaml(cfg, resolve=True), train_preset())
