"""A study's typed input: the typed config of its space and models, and what only an entry point knows about it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from phaze.checks.hardware import check_hw, check_precision
from phaze.checks.storage import check_storage
from phaze.checks.tracking import check_tracking
from phaze.inputs import ModelJob, per_model
from phaze.search.identity import storage_url
from phaze.schema import Config, HwCfg


@dataclass(frozen=True)
class StudySpec:
    """A study over one architecture space: its typed config (phaze.schema.Config, checked at the entry point), the
    hw.baseline preset's space that the entry point composed, the resolved config as the parent run logs it, and the
    train preset Hydra chose (None outside an entry point)."""

    config: Config
    baseline_hw: HwCfg | None = None
    config_yaml: str = ""
    train_preset: str | None = None

    @classmethod
    def of(cls, config: Config, baseline_hw: HwCfg | None = None, config_yaml: str = "", train_preset: str | None = None) -> "StudySpec":
        """The study of `config`, its space's rules checked (phaze.checks: the hardware model's, FP8 on the chip, a
        storage the workers share, the tracking URI); each model's rules are checked as its job is built (jobs)."""
        check_hw(config.hw)
        check_precision(config.hw, config.train)
        check_storage(storage_url(config.search))
        check_tracking(config.tracking)
        return cls(config, baseline_hw, config_yaml, train_preset)

    @cached_property
    def name(self) -> str:
        from phaze.search.identity import study_name

        return study_name(self.config)

    def jobs(self) -> list[ModelJob]:
        """Each model's job on this space (one per model of a common study)."""
        return [ModelJob.of(c) for c in per_model(self.config)]

    def baseline_job(self, job: ModelJob) -> ModelJob:
        """`job` on the hw.baseline preset's chip."""
        return ModelJob.of(replace(next(c for c in per_model(self.config) if c.model.name == job.name), hw=self.baseline_hw))

    def single(self, k: int) -> "StudySpec":
        """The study of model k alone (a common study's own study of one of its models)."""
        return replace(self, config=per_model(self.config)[k])
