"""The typed inputs of one model's evaluation, built once from the typed config (phaze.schema.Config).

An entry point turns the composed Hydra config into a `Config` of structured-config dataclasses
(phaze.config.typed_config), then into these: a `ModelJob` holds what the stages below read (the workload
to trace, the placement space, how a chip executes a layer, the training recipe, the cluster's network),
each parsed and checked here (the rules across config groups, phaze.checks), so no stage reads the configuration
again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from phaze.checks.model import check_model
from phaze.checks.train import check_train
from phaze.compat import network_for
from phaze.cost.network import Network
from phaze.plan_space import PlanSpace, training_model
from phaze.schema import CompatCfg, Config, ModelCfg, ScheduleCfg, TrainCfg
from phaze.workload.extract import workload_job


@dataclass(frozen=True)
class ExecutionModel:
    """How a chip runs a layer: the layer scheduler's settings and the chip's execution switches."""

    schedule: ScheduleCfg
    """schedule.* with mode_search resolved (execution_model)."""
    inter_op_parallel: bool
    tp_comm_async: bool
    overlap_slowdown: float


def execution_model(config: Config) -> ExecutionModel:
    """config's ExecutionModel; schedule.mode_search null is on with train.step_model=timeline and off with PHAZE's
    step, so PHAZE's world keeps the layer schedules its numbers were measured with."""
    schedule = config.schedule
    if schedule.mode_search is None:
        schedule = replace(schedule, mode_search=config.train.step_model != "phaze")
    return ExecutionModel(schedule, bool(config.hw.inter_op_parallel), bool(config.train.tp_comm_async), float(config.hw.overlap_slowdown))


@dataclass(frozen=True)
class WorkloadSpec:
    """What to trace: the model with the framework's kernels, at each microbatch size, in every shard the placement
    space needs, and what applies after the trace cache (precision, the compat switches, forward only)."""

    model: ModelCfg
    mbs_values: tuple[int, ...]
    bytes_per_elem: int
    tp_widths: tuple[int, ...]
    sp_values: tuple[bool, ...]
    cp_values: tuple[int, ...]
    ep_values: tuple[int, ...]
    precision: str
    attention_warp_mma: bool
    """The fused attention kernel's matmuls run with warp-level MMA (train.attention_warp_mma)."""
    forward_only: bool
    compat: CompatCfg
    cache_dir: str | None
    processes: int | None
    """Processes tracing at once (None: this machine's cores)."""

    def jobs(self) -> list[partial]:
        """The workload_job of each microbatch size."""
        shards = {"sp_values": self.sp_values, "cp_values": self.cp_values, "ep_values": self.ep_values}
        return [workload_job(self.model, mbs, self.bytes_per_elem, self.tp_widths, self.cache_dir, **shards) for mbs in self.mbs_values]


def workload_spec(config: Config, plan: PlanSpace) -> WorkloadSpec:
    return WorkloadSpec(training_model(config), plan.space.mbs, int(config.train.bytes_per_elem), tuple(config.train.tp_widths),
                        plan.values["sp"], plan.values["cp"], plan.values["ep"], str(config.train.precision),
                        bool(config.train.attention_warp_mma), bool(config.train.forward_only), config.compat, config.cache_dir,
                        config.workload_processes)


@dataclass(frozen=True)
class ModelJob:
    """One model evaluated on the points of a space and cluster: every stage's input, typed and checked once."""

    model: ModelCfg
    """The model as configured (its name, its expert placement)."""
    train: TrainCfg
    workload: WorkloadSpec
    plan: PlanSpace
    execution: ExecutionModel
    network: Network
    devices: int
    compat: CompatCfg

    @property
    def name(self) -> str:
        return str(self.model.name)

    @classmethod
    def of(cls, config: Config) -> "ModelJob":
        """The job of config's model (config.models empty: see per_model), its rules across groups checked: the model's
        against its family, the step's against the model, the plan space's (PlanSpace.of)."""
        check_model(config.model)
        check_train(config)
        plan = PlanSpace.of(config)
        return cls(config.model, config.train, workload_spec(config, plan), plan, execution_model(config), network_for(config.cluster, config.compat),
                   int(config.cluster.devices), config.compat)


def per_model(config: Config) -> list[Config]:
    """One config per model searched: [config] for a single model, else config with model set to each of config.models."""
    if not config.models:
        return [config]
    return [replace(config, model=model, models=[]) for model in config.models]
