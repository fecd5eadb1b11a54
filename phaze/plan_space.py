"""What a config asks the placement to consider: the layer variants to cost and the placement space.

Each placement dimension takes its values from train.* (the preset's search space: one value or a
list) unless placement.* fixes one (placement.zero / sp / tp_comm_overlap null, placement.vp / cp 0:
search). A layer variant is what changes a part's operator graph or its latency: microbatch,
sequence parallelism, context-parallel width, TP communication overlap and expert-parallel width.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from phaze.checks.placement import check_placement, check_widths, interleaves_evenly_or_as_listed
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
    (expert parallelism: those dividing the model's experts, only 1 for a dense model); an unset one of a fixed
    placement only those consistent with what is fixed (fitting_values). `cfg`: the typed config (phaze.schema.Config)."""
    fixed = getattr(cfg.placement, name)
    unset = fixed == 0 if name in SEARCHED_BY_ZERO else fixed is None
    value = getattr(cfg.train, name) if unset else fixed
    field = f"placement.{name}" if not unset else f"train.{name}"
    if name == "zero":
        values = zero_stages(value, field)
    elif name in ("sp", "tp_comm_overlap"):
        values = bools(value, field)
    else:
        values = positive_ints(value, field)
    if name == "ep":
        allowed = valid_ep(cfg.model, values)
        if not unset and allowed != values:
            raise ConfigError(f"placement.ep={value} does not divide model.num_experts={cfg.model.num_experts} "
                             f"(allowed: divisors of the experts; 1 for a dense model)")
        values = allowed
    return fitting_values(cfg, name, values) if unset and is_fixed(cfg.placement) else values


def is_fixed(placement) -> bool:
    """A fixed placement: placement.dp, pp and tp all set (the other dimensions may be left to search)."""
    return bool(placement.dp and placement.pp and placement.tp)


def fitting_values(cfg, name: str, values: list) -> list:
    """The values of unset dimension `name` that fit a fixed placement's set fields; ConfigError naming the field, the
    values tried and the rule when none does. (Where dp x pp x tp alone exceeds the cluster, phaze.checks.placement says so.)"""
    p, model = cfg.placement, cfg.model
    rules = {
        "cp": (lambda cp: p.dp * p.pp * p.tp * cp <= cfg.cluster.devices or p.dp * p.pp * p.tp > cfg.cluster.devices,
               f"dp x pp x tp x cp = {p.dp * p.pp * p.tp} x cp at most cluster.devices={cfg.cluster.devices}"),
        "vp": (lambda vp: vp == 1 or (p.pp >= 2 and interleaves_evenly_or_as_listed(p, model.num_layers, vp)),
               f"vp 1, or pp >= 2 and model.num_layers={model.num_layers} divisible by pp x vp = {p.pp} x vp (Megatron's interleaved schedule)"),
        "ep": (lambda ep: p.dp % ep == 0 and (ep == 1 or p.zero is None or p.zero <= 1),
               f"ep dividing placement.dp={p.dp}" + (f", and 1 with placement.zero={p.zero} (experts shard with ZeRO 0 or 1)"
                                                     if p.zero is not None and p.zero > 1 else "")),
        "zero": (lambda zero: not p.ep or p.ep == 1 or zero <= 1, f"zero 0 or 1 with placement.ep={p.ep} (Megatron-Core's distributed optimizer)"),
        "tp_comm_overlap": (lambda overlap: not overlap or p.sp is not False, "false with placement.sp=false (the overlap needs sequence parallelism)"),
    }
    if name not in rules:
        return values
    fits, rule = rules[name]
    kept = [v for v in values if fits(v)]
    if not kept:
        raise ConfigError(f"placement.{name} (unset): no value of train.{name}={values} fits the fixed placement "
                          f"(placement.dp={p.dp}, pp={p.pp}, tp={p.tp}); allowed: {rule}")
    return kept


def fixed_microbatches(cfg) -> list[int]:
    """train.mbs's sizes that give every replica of a fixed placement a microbatch of train.global_batch."""
    return [mbs for mbs in positive_ints(cfg.train.mbs, "train.mbs") if cfg.placement.dp * mbs <= cfg.train.global_batch]


def consistent(dims: dict) -> bool:
    """A combination of the dimensions that can run together: TP overlap needs sequence parallelism, and experts
    shard with ZeRO 0 or 1 (Megatron-Core's distributed optimizer)."""
    return (dims["sp"] or not dims["tp_comm_overlap"]) and (dims["ep"] == 1 or dims["zero"] <= 1)


def fixed_plans(cfg) -> list[dict] | None:
    """A fixed placement's plans (evaluate_fixed's arguments), None unless dp, pp and tp are set: those three as set and
    every consistent combination of the microbatch sizes, recompute choices and values of the dimensions left unset
    (with placement.layers_per_stage, the vp it lists pp x vp chunks for); ConfigError naming the dimensions and the
    values tried when no combination is consistent."""
    p = cfg.placement
    if not is_fixed(p):
        return None
    values = {name: options(cfg, name) for name in DIMENSIONS}
    values["tp_comm_overlap"] = costed_overlaps(cfg, bool(cfg.hw.inter_op_parallel))
    layers = p.layers_per_stage
    dims = [d for d in (dict(zip(DIMENSIONS, combo)) for combo in itertools.product(*values.values()))
            if consistent(d) and (layers is None or len(layers) == p.pp * d["vp"])]
    if not dims:
        tried = ", ".join(f"{name}={values[name]}" for name in ("zero", "sp", "tp_comm_overlap", "ep"))
        raise ConfigError(f"placement.zero, sp, tp_comm_overlap and ep: no combination of the values tried ({tried}) runs together; "
                          "allowed: tp_comm_overlap=true with sp=true, ep > 1 with zero 0 or 1")
    return [dict(dp=int(p.dp), pp=int(p.pp), tp=int(p.tp), mbs=mbs, recompute=recompute, layers_per_stage=p.layers_per_stage, **d)
            for mbs in fixed_microbatches(cfg) for recompute in recompute_options(cfg.train.recompute) for d in dims]


def placement_space(cfg) -> Space:
    """The Space the placement DP searches for this config: its dimensions' options and the plans the framework can
    run (train.per_stage_tp, train.stage_layers)."""
    return Space(
        recompute=tuple(recompute_options(cfg.train.recompute)), mbs=tuple(positive_ints(cfg.train.mbs, "train.mbs")),
        zero=tuple(options(cfg, "zero")), sp=tuple(options(cfg, "sp")), vp=tuple(options(cfg, "vp")),
        cp=tuple(options(cfg, "cp")), tp_comm_overlap=tuple(options(cfg, "tp_comm_overlap")), ep=tuple(options(cfg, "ep")),
        per_stage_tp=bool(cfg.train.per_stage_tp), stage_layers=str(cfg.train.stage_layers),
    )


def costed_overlaps(cfg, inter_op_parallel: bool) -> list[bool]:
    """The TP-overlap choices to cost: on a chip with inter-operator parallelism the layer schedule already overlaps
    collectives, so overlap is only costed when fixed."""
    return [False] if inter_op_parallel and cfg.placement.tp_comm_overlap is None else options(cfg, "tp_comm_overlap")


def layer_variants(cfg, inter_op_parallel: bool) -> list[LayerVariant]:
    """Every layer variant the space needs. TP overlap needs sequence parallelism (Transformer Engine's
    userbuffers overlap the sequence-parallel all-gather and reduce-scatter); costed_overlaps says which are costed."""
    overlaps = costed_overlaps(cfg, inter_op_parallel)
    out = []
    for mbs in positive_ints(cfg.train.mbs, "train.mbs"):
        for ep in options(cfg, "ep"):
            for cp in options(cfg, "cp"):
                for sp in options(cfg, "sp"):
                    out.extend(LayerVariant(mbs, sp, cp, o, ep) for o in overlaps if sp or not o)
    return out


TRAIN_MODEL_FIELDS = ("attention", "fused_kernels", "selective_policy", "capacity_factor", "moe_imbalance")
"""Framework choices that change the traced graphs: train.<field>, when set, overrides model.<field>."""


def training_model(cfg):
    """cfg.model with the kernels the training framework picks (train.attention, train.fused_kernels, when set)."""
    chosen = {f: getattr(cfg.train, f) for f in TRAIN_MODEL_FIELDS if getattr(cfg.train, f) is not None}
    return replace(cfg.model, **chosen) if chosen else cfg.model


@dataclass(frozen=True)
class PlanSpace:
    """What a config asks the placement to consider, parsed and checked once (ConfigError naming the field otherwise):
    each dimension's values, the layer variants to cost, the DP's Space and a fixed placement's plans."""

    values: dict[str, tuple]
    """options() of each of DIMENSIONS."""
    recompute: tuple
    variants: tuple[LayerVariant, ...]
    space: Space
    fixed: tuple[dict, ...] | None
    """A fixed placement's plans (fixed_plans), None for a search."""

    @classmethod
    def of(cls, cfg) -> "PlanSpace":
        """The plan space of the typed config `cfg` (phaze.schema.Config), its rules across groups checked
        (phaze.checks.placement)."""
        check_widths(cfg)
        values = {name: tuple(options(cfg, name)) for name in DIMENSIONS}
        check_placement(cfg, values, fixed_microbatches(cfg))
        fixed = fixed_plans(cfg)
        return cls(values, tuple(recompute_options(cfg.train.recompute)),
                   tuple(layer_variants(cfg, bool(cfg.hw.inter_op_parallel))), placement_space(cfg), None if fixed is None else tuple(fixed))

