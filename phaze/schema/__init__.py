"""Structured configs: one dataclass per Hydra config group (a module per group); phaze.config registers them in
Hydra's ConfigStore.

They live in an importable package (not the `-m` entry module) so that Hydra launchers that rebuild the config in a
worker process (joblib, submitit) see the same classes. Every field is typed, so a typo or a wrong type in an override
fails at once and Hydra names the full key. They import neither Hydra nor OmegaConf: the stages take them as their
typed inputs (phaze.config.typed_config).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from phaze.config_values import positive_ints
from phaze.schema.cluster import ClusterCfg
from phaze.schema.compat import CompatCfg
from phaze.schema.fields import MISSING
from phaze.schema.hardware import AreaCfg, HwCfg, PowerCfg
from phaze.schema.model import ExpertCfg, ModelCfg
from phaze.schema.schedule import ScheduleCfg
from phaze.schema.search import SearchCfg, TrackingCfg
from phaze.schema.training import PlacementCfg, TrainCfg


@dataclass
class ExportCfg:
    """`python -m phaze.export`: where to write the plan's launch arguments."""

    dir: str = "plan_export"


@dataclass
class Config:
    """The whole job: what `python -m phaze.run` and `python -m phaze.evaluate` compose."""

    model: ModelCfg = MISSING
    hw: HwCfg = MISSING
    cluster: ClusterCfg = MISSING
    train: TrainCfg = MISSING
    schedule: ScheduleCfg = field(default_factory=ScheduleCfg)
    placement: PlacementCfg = field(default_factory=PlacementCfg)
    search: SearchCfg = MISSING
    tracking: TrackingCfg = MISSING
    compat: CompatCfg = field(default_factory=CompatCfg)
    cache_dir: str = ".cache/phaze"
    # Processes tracing the microbatch sizes whose workload is not cached yet, at once (null: this machine's cores).
    workload_processes: Optional[int] = None
    # `python -m phaze.evaluate figure=timeline.png`: also draw the plan's pipeline timeline (a PNG) there.
    figure: Optional[str] = None
    export: ExportCfg = field(default_factory=ExportCfg)
    # Set from `model=[a,b,...]` (phaze.config.attach_models): models searched together for one
    # common architecture; empty for the usual single `model`.
    models: List[ModelCfg] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.workload_processes is not None:
            positive_ints(self.workload_processes, "workload_processes")


@dataclass
class ValidateOptions:
    """`python -m phaze.validate`: the published runs to predict and where to write the report page."""

    runs: str = "docs/validation_runs.csv"
    # Write the markdown report here too (docs/validation.md); null: print and log only.
    markdown: Optional[str] = None
    # Write each measured run's prediction and the commit into the runs file where it has none yet (first_seen_ratio,
    # first_seen_commit): run once on new rows, before changing anything they motivate (phaze.report.first_seen).
    record_first_seen: bool = False


@dataclass
class ValidateCfg:
    """The fidelity check: published runs predicted with their own placements, logged to MLflow."""

    validate: ValidateOptions = field(default_factory=ValidateOptions)
    tracking: TrackingCfg = MISSING
    cache_dir: str = ".cache/phaze"


__all__ = ["AreaCfg", "ClusterCfg", "CompatCfg", "Config", "ExpertCfg", "ExportCfg", "HwCfg", "ModelCfg", "PlacementCfg", "PowerCfg",
           "ScheduleCfg", "SearchCfg", "TrackingCfg", "TrainCfg", "ValidateCfg", "ValidateOptions"]
