"""What a config asks the placement to consider: the layer variants to cost and the placement space.

Each placement dimension takes its values from train.* (the preset's search space: one value or a
list) unless placement.* fixes one (placement.zero / sp / tp_comm_overlap null, placement.vp / cp 0:
search). A layer variant is what changes a part's operator graph or its latency: microbatch,
sequence parallelism, context-parallel width, TP communication overlap and expert-parallel width.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

from phaze.config_values import ConfigError, bools, positive_ints, recompute_options, zero_stages
from phaze.placement.solve import Space
from phaze.workload.model_rules import valid_ep

DIMENSIONS = ("zero", "sp", "vp", "cp", "tp_comm_overlap", "ep")
"""The placement dimensions beyond dp / pp / tp and the microbatch (placement.* or train.*)."""
SEARCHED_BY_ZERO = ("vp", "cp", "ep")
"""Placement fields where 0 means "search"; the others use null."""


@dataclass(frozen=True)
class LayerVariant:
    mbs: int
    sp: bool = False
    cp: int = 1
    tp_comm_overlap: bool = False
    ep: int = 1


def options(cfg, name: str) -> list:
    """The values of placement dimension `name` to consider: placement.<name> when set, else train.<name>
    (expert parallelism: those dividing the model's experts, only 1 for a dense model)."""
    fixed = cfg.placement.get(name)
    unset = fixed == 0 if name in SEARCHED_BY_ZERO else fixed is None
    value = cfg.train[name] if unset else fixed
    field = f"placement.{name}" if not unset else f"train.{name}"
    if name == "zero":
        return zero_stages(value, field)
    if name in ("sp", "tp_comm_overlap"):
        return bools(value, field)
    values = positive_ints(value, field)
    if name == "ep":
        allowed = valid_ep(cfg.model, values)
        if not unset and allowed != values:
            raise ConfigError(f"placement.ep={value} does not divide model.num_experts={cfg.model.get('num_experts', 0)} "
                             f"(allowed: divisors of the experts; 1 for a dense model)")
        return allowed
    return values


def placement_space(cfg, per_stage_tp: bool = True) -> Space:
    """The Space the placement DP searches for this config."""
    return Space(
        recompute=tuple(recompute_options(cfg.train.recompute)), mbs=tuple(positive_ints(cfg.train.mbs, "train.mbs")),
        zero=tuple(options(cfg, "zero")), sp=tuple(options(cfg, "sp")), vp=tuple(options(cfg, "vp")),
        cp=tuple(options(cfg, "cp")), tp_comm_overlap=tuple(options(cfg, "tp_comm_overlap")), ep=tuple(options(cfg, "ep")),
        per_stage_tp=per_stage_tp,
    )


def layer_variants(cfg, inter_op_parallel: bool) -> list[LayerVariant]:
    """Every layer variant the space needs. TP overlap needs sequence parallelism (Transformer Engine's
    userbuffers overlap the sequence-parallel all-gather and reduce-scatter); on a chip with inter-operator
    parallelism the layer schedule already overlaps collectives, so overlap is only costed when fixed."""
    overlaps = options(cfg, "tp_comm_overlap")
    if inter_op_parallel and cfg.placement.tp_comm_overlap is None:
        overlaps = [False]
    out = []
    for mbs in positive_ints(cfg.train.mbs, "train.mbs"):
        for ep in options(cfg, "ep"):
            for cp in options(cfg, "cp"):
                for sp in options(cfg, "sp"):
                    out.extend(LayerVariant(mbs, sp, cp, o, ep) for o in overlaps if sp or not o)
    return out


TRAIN_MODEL_FIELDS = ("attention", "fused_kernels", "capacity_factor", "moe_imbalance")
"""Framework choices that change the traced graphs: train.<field>, when set, overrides model.<field>."""


def training_model(cfg):
    """cfg.model with the kernels the training framework picks (train.attention, train.fused_kernels, when set)."""
    chosen = {f: cfg.train.get(f) for f in TRAIN_MODEL_FIELDS if cfg.train.get(f) is not None}
    return OmegaConf.merge(cfg.model, chosen) if chosen else cfg.model

