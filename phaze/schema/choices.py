"""The allowed values of the config's string choices, one enum each: the schema checks a field against its enum when
the typed config is built (the fields stay plain strings, so the stages compare and hash them as strings), and the
stages that branch on a choice read their values from here."""

from __future__ import annotations

from enum import StrEnum


class Choice(StrEnum):
    """A string choice of the config (names equal values)."""

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class Optimizer(Choice):
    """train.optimizer: the update and its state (none: inference, no gradients)."""
    sgd = "sgd"
    adam = "adam"
    none = "none"


class Precision(Choice):
    """train.precision: bf16 mixed precision, or FP8 GEMMs (Transformer Engine's delayed scaling)."""
    bf16 = "bf16"
    fp8 = "fp8"


class StepModel(Choice):
    """train.step_model: PHAZE's step (a sum of stage times) or the timeline of a pipeline schedule."""
    phaze = "phaze"
    timeline = "timeline"


class RecomputeGranularity(Choice):
    """train.recompute_granularity: Megatron's per-layer checkpoints, or PHAZE's whole stage."""
    layer = "layer"
    stage = "stage"


class StageLayers(Choice):
    """train.stage_layers: how layers split over pipeline stages (any split, even middle stages, all even)."""
    any = "any"
    even_middle = "even_middle"
    even = "even"


class Attention(Choice):
    """model.attention / train.attention: the attention kernel traced."""
    eager = "eager"
    flash = "flash"


class Backend(Choice):
    """schedule.backend: the layer MILP's solver (auto: Gurobi within its licence, else HiGHS)."""
    auto = "auto"
    gurobi = "gurobi"
    highs = "highs"


class Sampler(Choice):
    """search.sampler: the search strategy (phaze.search.strategies has one class per value)."""
    bound = "bound"
    grid = "grid"
    tpe = "tpe"
    nsga2 = "nsga2"
    pareto = "pareto"


class Objective(Choice):
    """search.objective: what the study maximises."""
    throughput = "throughput"
    throughput_per_tdp = "throughput_per_tdp"


class PlacementSearch(Choice):
    """search.placement: the placement DP per point (co-design), or each model's expert placement held fixed."""
    searched = "searched"
    expert = "expert"


class CollectiveAlgorithm(Choice):
    """cluster.collective_algorithm: how collectives are costed (ring, tree, the faster of the two)."""
    ring = "ring"
    tree = "tree"
    best = "best"


class HwKind(Choice):
    """hw.kind: a grid of candidate chips, or one chip (a preset)."""
    grid = "grid"
    point = "point"
