"""placement.*: a fixed placement and the placement dimensions to consider, against the model, the cluster and train.*
(the placement's own rules: phaze.schema.training.PlacementCfg). phaze.plan_space.PlanSpace.of runs them: the widths
before it parses the dimensions, the rest on their parsed values."""

from __future__ import annotations

from phaze.config_values import ConfigError, positive_ints
from phaze.workload.extract import valid_tp_widths
from phaze.workload.model_rules import valid_ep


def check_widths(config) -> None:
    """One TP width for a fixed placement, and dp, pp and tp all given or none (`config`: phaze.schema.Config)."""
    p = config.placement
    if isinstance(p.tp, (list, tuple)):
        widths = list(p.tp)
        if not config.train.per_stage_tp:
            raise ConfigError(f"placement.tp={widths}: the framework runs one TP width in every pipeline stage (train.per_stage_tp=false); "
                              f"allowed: one width, e.g. placement.tp={widths[0]}")
        raise ConfigError(f"placement.tp={widths}: a fixed placement takes one TP width; per-stage widths are searched "
                          "(train.per_stage_tp=true) with placement.dp, pp and tp unset")
    if (p.dp or p.pp or p.tp) and not (p.dp and p.pp and p.tp):
        raise ConfigError("placement.dp, placement.pp and placement.tp: give all three for a fixed placement, or none")


def check_dimensions(config, values: dict) -> None:
    """The placement dimensions to consider (`values`: each dimension's parsed values, phaze.plan_space.options): what
    each needs of the model, the step model and the others."""
    p, model, train = config.placement, config.model, config.train
    zeros, cps, sps, overlaps, eps = values["zero"], values["cp"], values["sp"], values["tp_comm_overlap"], values["ep"]
    if max(eps) > 1 and train.step_model == "phaze":
        raise ConfigError("placement.ep: expert parallelism needs train.step_model=timeline (e.g. train=megatron); allowed with "
                          "train.step_model=phaze: ep 1")
    if p.ep > 1 and p.zero is not None and p.zero > 1:
        raise ConfigError(f"placement.zero={p.zero}: with expert parallelism (placement.ep={p.ep}) allowed values are 0 and 1 "
                          "(Megatron-Core shards experts with its distributed optimizer)")
    if p.ep > 1 and p.dp and p.dp % p.ep:
        raise ConfigError(f"placement.ep={p.ep}: must divide placement.dp={p.dp} (EP groups are formed from data-parallel ranks); "
                          f"allowed: {[e for e in valid_ep(model, range(1, p.dp + 1)) if p.dp % e == 0]}")
    if train.step_model == "phaze" and (max(zeros) > 0 or max(cps) > 1):
        field = "placement.zero" if max(zeros) > 0 else "placement.cp"
        raise ConfigError(f"{field}: ZeRO and context parallelism need train.step_model=timeline (e.g. train=megatron); "
                          "PHAZE's step all-reduces every stage's weights over the replicas; allowed with train.step_model=phaze: zero 0, cp 1")
    if True in overlaps and True not in sps:
        raise ConfigError("placement.tp_comm_overlap=true: needs sequence parallelism (Transformer Engine overlaps its all-gathers "
                          "and reduce-scatters); allowed: placement.sp=true or train.sp containing true")
    attention = train.attention or model.attention
    for cp in cps:
        if cp > 1 and attention != "flash":
            raise ConfigError(f"placement.cp={cp}: context parallelism needs FlashAttention (model.attention=flash or train.attention=flash)")
        if model.seq_len % (2 * cp):
            raise ConfigError(f"placement.cp={cp}: must cut model.seq_len={model.seq_len} into 2 x cp equal chunks (Megatron-Core's causal "
                              f"load balancing); allowed: {[c for c in range(1, model.seq_len // 2 + 1) if model.seq_len % (2 * c) == 0][:12]}")
        if True in sps:
            for width in valid_tp_widths(model, list(train.tp_widths)):
                if model.seq_len % (cp * width):
                    raise ConfigError(f"placement.sp=true: model.seq_len={model.seq_len} does not split over cp x tp = {cp} x {width} ranks")
    for vp in values["vp"]:
        if vp > 1 and p.pp and (p.pp < 2 or not interleaves_evenly_or_as_listed(p, model.num_layers, vp)):
            allowed = [v for v in range(1, model.num_layers + 1) if model.num_layers % (max(p.pp, 1) * v) == 0]
            raise ConfigError(f"placement.vp={vp}: Megatron's interleaved schedule needs pp >= 2 and model.num_layers={model.num_layers} "
                              f"divisible by pp x vp = {p.pp} x {vp} (or placement.layers_per_stage listing pp x vp counts); allowed with "
                              f"placement.pp={p.pp}: {allowed if p.pp >= 2 else [1]}")


def interleaves_evenly_or_as_listed(placement, num_layers: int, vp: int) -> bool:
    """Megatron's interleaved schedule on pp x vp chunks: the layers divide evenly over them, or placement.layers_per_stage
    lists pp x vp counts (Megatron-Core's account_for_embedding/loss_in_pipeline_split and pipeline layouts give
    the first and last chunks fewer layers; check_layers_per_stage checks the counts)."""
    chunks = placement.pp * vp
    return num_layers % chunks == 0 or (placement.layers_per_stage is not None and len(placement.layers_per_stage) == chunks)


def check_layers_per_stage(config, vps) -> None:
    """placement.layers_per_stage: one count per pipeline stage (pp x vp chunks), the layers summing to the model's,
    every stage but the first and last (which hold the embedding and the loss) with a layer."""
    p, num_layers = config.placement, config.model.num_layers
    if p.layers_per_stage is None:
        return
    if not p.pp:
        raise ConfigError("placement.layers_per_stage: needs a fixed placement (placement.dp, placement.pp and placement.tp)")
    chunks = [int(p.pp) * vp for vp in vps]
    counts = [int(n) for n in p.layers_per_stage]
    if len(counts) not in chunks or sum(counts) != num_layers:
        raise ConfigError(f"placement.layers_per_stage={counts}: must list pp x vp = {' or '.join(map(str, chunks))} counts summing to "
                          f"model.num_layers={num_layers}")
    if min(counts) < 0 or (len(counts) > 2 and min(counts[1:-1]) < 1):
        raise ConfigError(f"placement.layers_per_stage={counts}: counts must be >= 0, and >= 1 for every stage but the first and last")


def check_placement(config, values: dict, microbatches: list[int]) -> None:
    """The dimensions' and the stage layers' rules, then a fixed placement's: within the cluster, a valid TP width, and
    a microbatch for every replica (`microbatches`: train.mbs's sizes that give each one, phaze.plan_space.fixed_microbatches)."""
    p, model, train, devices = config.placement, config.model, config.train, config.cluster.devices
    check_dimensions(config, values)
    check_layers_per_stage(config, values["vp"])
    if not p.dp:
        return
    if p.dp * p.pp * p.tp > devices:
        raise ConfigError(f"placement.dp x pp x tp = {p.dp * p.pp * p.tp}: allowed is at most cluster.devices={devices}")
    cp = max(values["cp"])
    if p.dp * p.pp * p.tp * cp > devices:
        raise ConfigError(f"placement.dp x pp x tp x cp = {p.dp * p.pp * p.tp * cp}: allowed is at most cluster.devices={devices}")
    widths = valid_tp_widths(model, list(train.tp_widths))
    if p.tp not in widths:
        raise ConfigError(f"placement.tp={p.tp}: allowed values are {widths} (train.tp_widths that divide the model's heads, up to model.max_tp)")
    if p.pp > model.num_layers and p.layers_per_stage is None:
        raise ConfigError(f"placement.pp={p.pp}: allowed values are 1..model.num_layers={model.num_layers} (more only with "
                          "placement.layers_per_stage giving the first or last stage the embedding or the head alone)")
    if not microbatches:
        raise ConfigError(f"placement.dp={p.dp}: with train.mbs={train.mbs} some replica gets no sequence of train.global_batch="
                          f"{train.global_batch}; allowed: placement.dp <= {train.global_batch // min(positive_ints(train.mbs, 'train.mbs'))}")
