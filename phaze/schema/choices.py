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


def make_choice(name: str, doc: str, *values: str) -> type[Choice]:
    """The Choice named `name` whose members are `values` (each its own name), documented by `doc`."""
    enum = Choice(name, [(value, value) for value in values], module=__name__, qualname=name)
    enum.__doc__ = doc
    return enum


Optimizer = make_choice("Optimizer", "train.optimizer: the update and its state (none: inference, no gradients).",
                        "sgd", "adam", "none")

Precision = make_choice("Precision", "train.precision: bf16 mixed precision, or FP8 GEMMs (Transformer Engine's delayed scaling).",
                        "bf16", "fp8")

StepModel = make_choice("StepModel", "train.step_model: PHAZE's step (a sum of stage times) or the timeline of a pipeline schedule.",
                        "phaze", "timeline")

RecomputeGranularity = make_choice("RecomputeGranularity", "train.recompute_granularity: Megatron's per-layer checkpoints, or PHAZE's whole stage.",
                                   "layer", "stage")

StageLayers = make_choice("StageLayers", "train.stage_layers: how layers split over pipeline stages (any split, even middle stages, all even).",
                          "any", "even_middle", "even")

Attention = make_choice("Attention", "model.attention / train.attention: the attention kernel traced.", "eager", "flash")

SelectivePolicy = make_choice("SelectivePolicy", "model.selective_policy / train.selective_policy: what selective recompute "
                              "runs again (Megatron's attention core, or torchtitan's op policy).", "attention_core", "torchtitan_op")

Backend = make_choice("Backend", "schedule.backend: the layer MILP's solver (auto: Gurobi within its licence, else HiGHS).",
                      "auto", "gurobi", "highs")

Sampler = make_choice("Sampler", "search.sampler: the search strategy (phaze.search.strategies has one class per value).",
                      "bound", "grid", "tpe", "nsga2", "pareto")

Objective = make_choice("Objective", "search.objective: what the study maximises.", "throughput", "throughput_per_tdp")

PlacementSearch = make_choice("PlacementSearch", "search.placement: the placement DP per point (co-design), or each model's expert placement held fixed.",
                              "searched", "expert")

CollectiveAlgorithm = make_choice("CollectiveAlgorithm", "cluster.collective_algorithm: how collectives are costed (ring, tree, the faster of the "
                                  "two, or NCCL's flat ring and tree by its own model across nodes).", "ring", "tree", "best", "nccl")

HwKind = make_choice("HwKind", "hw.kind: a grid of candidate chips, or one chip (a preset).", "grid", "point")
