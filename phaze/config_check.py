"""Every config value checked before any work: one ConfigError naming the field and the allowed values.

`check_config(cfg)` is the first call of `phaze.run` and `phaze.evaluate` (`phaze.validate` checks every run of its
file the same way), so a bad value stops the job before anything is written to mlruns/ or the study storage;
`refusing_bad_config` turns it into one line on stderr and exit code 2 inside the Hydra job (taking back the output
folder Hydra made for it), and `run_cli` does the same for Hydra's own composition errors (an unknown config option,
a typo, a wrong type).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from phaze import schema
from phaze.config import CONF_DIR, attach_models, preset_hw, presets
from phaze.cost.network import ALGORITHMS
from phaze.hardware.derating import DERATING_COLUMNS, check_derating
from phaze.hardware.hbm import HBM_GENERATIONS
from phaze.hardware.space import AXES, KINDS, describe_points, grid_axes
from phaze.job_output import discard_job_output
from phaze.placement.inputs import OPTIMIZERS, RECOMPUTE_GRANULARITIES, STEP_MODELS
from phaze.placement.layouts import STAGE_LAYER_RULES
from phaze.placement.memory import FP32_MASTER_BYTES_PER_PARAM, MASTER_BYTES_CHOICES, MOMENT_BYTES_CHOICES
from phaze.plan_space import fixed_microbatches, fixed_plans, options
from phaze.schedule.backends import BACKEND_CHOICES
from phaze.search.evaluator import PLACEMENTS
from phaze.search.samplers import SAMPLERS
from phaze.search.study import OBJECTIVES, storage_url
from phaze.config_values import ConfigError, bools, positive_ints, recompute_options, zero_stages
from phaze.workload.extract import DTYPES, valid_tp_widths
from phaze.workload.precision import PRECISIONS
from phaze.workload.model_rules import ACTIVATIONS, ATTENTION_IMPLEMENTATIONS, FAMILY_NAMES, HEAD_DIM_FAMILIES, check_moe, valid_ep

EXIT_CONFIG = 2
"""Exit status of a job stopped by a bad config (the command-line usage error of argparse and getopt)."""
POWER_OF_TWO_AXES = ("n_tc", "tc_rows", "tc_cols", "n_vc", "vc_width")
"""Grid axes that PHAZE's space takes in powers of two (docs/phaze-reference.md §3.2); point presets
describe real chips (an A100 has 108 SMs) and are exempt."""
MEMORY = "memory"
FRONT_SAMPLERS = ("nsga2", "pareto")
"""Samplers whose answer is a Pareto front (throughput against area, TDP), so search.top_n ranks nothing there."""
SCHEMA_PREFIX = "base_"
"""Group entries that are schemas registered by phaze.schema, not choices (base_model, base_hw, ...)."""


def _positive(value, field: str, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{field}={value!r}: allowed values are numbers {'>= 0' if allow_zero else '> 0'}")


def _fraction(value, field: str) -> None:
    if not 0 < value <= 1:
        raise ConfigError(f"{field}={value!r}: allowed values are in (0, 1]")


def _choice(value, field: str, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{field}={value!r}: allowed values are {', '.join(map(str, allowed))}")


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def check_model(m) -> None:
    """Architecture fields: positive sizes, heads that divide the hidden size, a known family and attention."""
    _choice(m.family, "model.family", sorted(FAMILY_NAMES))
    _choice(m.attention, "model.attention", ATTENTION_IMPLEMENTATIONS)
    if m.activation:
        _choice(m.activation, "model.activation", ACTIVATIONS)
    if m.dropout is not None and not 0 <= m.dropout < 1:
        raise ConfigError(f"model.dropout={m.dropout}: allowed values are in [0, 1), or null (the family's own)")
    for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len",
                 "max_position_embeddings", "max_tp"):
        positive_ints(m[name], f"model.{name}")
    _positive(m.word_embed_proj_dim, "model.word_embed_proj_dim", allow_zero=True)
    _positive(m.head_dim, "model.head_dim", allow_zero=True)
    if m.head_dim and m.head_dim * m.num_heads != m.hidden_size and m.family not in HEAD_DIM_FAMILIES:
        raise ConfigError(f"model.head_dim={m.head_dim}: model.family={m.family!r} takes only hidden_size / num_heads "
                          f"({m.hidden_size // m.num_heads}) or 0; another width needs one of {list(HEAD_DIM_FAMILIES)}")
    if not m.head_dim and m.hidden_size % m.num_heads:
        raise ConfigError(f"model.num_heads={m.num_heads}: must divide model.hidden_size={m.hidden_size} (or set model.head_dim)")
    if m.num_heads % m.num_kv_heads:
        raise ConfigError(f"model.num_kv_heads={m.num_kv_heads}: must divide model.num_heads={m.num_heads}")
    if m.seq_len > m.max_position_embeddings:
        raise ConfigError(f"model.seq_len={m.seq_len}: allowed values are 1..model.max_position_embeddings={m.max_position_embeddings}")
    for name in ("pp", "dp", "tp"):
        positive_ints(m.expert[name], f"model.expert.{name}")
    for name in ("num_experts", "experts_per_token", "expert_ffn_hidden_size", "num_shared_experts", "capacity_factor",
                 "first_dense_layers", "kv_lora_rank", "q_lora_rank", "rope_head_dim", "v_head_dim"):
        _positive(m[name], f"model.{name}", allow_zero=True)
    _positive(m.moe_layer_freq, "model.moe_layer_freq")
    try:
        check_moe(m)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_hw(hw) -> None:
    """The accelerator space: positive axes (powers of two on a grid), rates, efficiencies, budgets."""
    _choice(hw.kind, "hw.kind", KINDS)
    stacked = check_hbm(hw)
    for axis in AXES:
        values = list(hw[axis])
        if (axis == "vc_width" or (axis == "hbm_gib" and stacked)) and not values:
            continue
        positive_ints(values, f"hw.{axis}", powers_of_two=hw.kind == "grid" and axis in POWER_OF_TWO_AXES)
        if hw.kind == "point" and len(values) != 1:
            raise ConfigError(f"hw.{axis}={values}: hw={hw.name} is a point (hw.kind=point), allowed is exactly one value")
    for name in ("glb_gbps", "freq_ghz", "core_buffer_bytes_per_cycle", "core_buffer_bytes_per_pe"):
        _positive(hw[name], f"hw.{name}")
    _positive(hw.core_buffer_min_kib, "hw.core_buffer_min_kib", allow_zero=True)
    _positive(hw.overlap_slowdown, "hw.overlap_slowdown", allow_zero=True)
    try:
        check_derating({name: hw[name] for name in DERATING_COLUMNS}, "hw.")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if not 0 <= hw.area_min_fraction <= 1:
        raise ConfigError(f"hw.area_min_fraction={hw.area_min_fraction}: allowed values are in [0, 1]")
    for name in ("area_budget_mm2", "power_budget_w"):
        if hw[name] is not None:
            _positive(hw[name], f"hw.{name}")
    for name in ("tc_pe_um2", "vc_lane_um2"):
        _positive(hw.area[name], f"hw.area.{name}")
    _positive(hw.area.tc_fp8_multiplier_um2, "hw.area.tc_fp8_multiplier_um2", allow_zero=True)
    _positive(hw.power.pj_per_fp8_mac, "hw.power.pj_per_fp8_mac", allow_zero=True)
    _fraction(hw.area.logic_utilization, "hw.area.logic_utilization")
    for name in ("vc_control_um2", "hbm_controller_um2_per_stack", "serdes_um2_per_lane", "pcie_um2_per_lane"):
        _positive(hw.area[name], f"hw.area.{name}", allow_zero=True)
    for name in ("pj_per_mac", "pj_per_vector_op", "pj_per_glb_byte", "pj_per_hbm_byte", "leakage_w_per_mm2", "pj_per_serdes_bit",
                 "pj_per_operand_fetch"):
        _positive(hw.power[name], f"hw.power.{name}", allow_zero=True)
    for name in ("spare_cores", "spare_hbm_stacks", "spare_glb_mib", "interconnect_lanes", "interconnect_gbit_s_per_lane", "pcie_lanes"):
        _positive(hw[name], f"hw.{name}", allow_zero=True)
    if hw.kind == "grid":
        check_budget(hw)
    if hw.get("baseline") is not None:
        check_baseline(hw.baseline)


def check_baseline(name: str) -> None:
    """hw.baseline names a point preset of conf/hw (the chip a search's answer is compared with)."""
    points = [p for p in presets("hw") if preset_hw(p).kind == "point"]
    _choice(name, "hw.baseline", points)


def check_hbm(hw) -> bool:
    """HBM: PHAZE's capacity axis at a fixed bandwidth, or the stack model (stack counts x generations); True for the latter."""
    stacks, gens = list(hw.hbm_stacks), list(hw.hbm_generation)
    if not stacks and not gens:
        if hw.hbm_gbps is None:
            raise ConfigError("hw.hbm_gbps=None: without HBM stacks (hw.hbm_stacks, hw.hbm_generation) allowed values are numbers > 0")
        _positive(hw.hbm_gbps, "hw.hbm_gbps")
        return False
    positive_ints(stacks, "hw.hbm_stacks")
    if not gens:
        raise ConfigError(f"hw.hbm_generation=[]: with hw.hbm_stacks={stacks} allowed values are one or more of {', '.join(HBM_GENERATIONS)}")
    for g in gens:
        _choice(g, "hw.hbm_generation", list(HBM_GENERATIONS))
    if hw.hbm_gbps is not None:
        _positive(hw.hbm_gbps, "hw.hbm_gbps")
    if hw.kind == "point" and (len(stacks) != 1 or len(gens) != 1):
        raise ConfigError(f"hw.hbm_stacks={stacks}, hw.hbm_generation={gens}: hw={hw.name} is a point (hw.kind=point), allowed is exactly one value each")
    if hw.kind == "grid" and (list(hw.hbm_gib) or hw.hbm_gbps is not None):
        raise ConfigError(f"hw.hbm_gib={list(hw.hbm_gib)}, hw.hbm_gbps={hw.hbm_gbps}: on a grid under the stack model allowed values are "
                          "[] and null (capacity and bandwidth follow from the stacks)")
    return True


def check_budget(hw) -> None:
    """A grid needs at least one point inside its area (and power) budget."""
    from phaze.hardware.space import enumerate_space, area_budget_mm2

    if len(enumerate_space(hw)):
        return
    points = describe_points(hw, grid_axes(hw))
    smallest = float(points.area_mm2.min())
    if hw.power_budget_w is not None and smallest <= area_budget_mm2(hw):
        raise ConfigError(f"hw.power_budget_w={hw.power_budget_w}: no point of hw={hw.name} fits; allowed values are >= {float(points.tdp_w.min()):.4g}")
    raise ConfigError(f"hw.area_budget_mm2={hw.area_budget_mm2}: no point of hw={hw.name} fits; allowed values are >= {smallest:.4g} (the smallest point's area)")


def check_cluster(c) -> None:
    """Device count, node size, link bandwidths and the collective algorithm."""
    positive_ints(c.devices, "cluster.devices")
    positive_ints(c.node_size, "cluster.node_size")
    if c.node_size < c.devices and c.devices % c.node_size:
        raise ConfigError(f"cluster.devices={c.devices}: allowed values are multiples of cluster.node_size={c.node_size}")
    _positive(c.intra_node_gbps, "cluster.intra_node_gbps")
    _positive(c.inter_node_gbps, "cluster.inter_node_gbps")
    _positive(c.link_latency_s, "cluster.link_latency_s", allow_zero=True)
    _positive(c.collective_launch_s, "cluster.collective_launch_s", allow_zero=True)
    if c.inter_node_latency_s is not None:
        _positive(c.inter_node_latency_s, "cluster.inter_node_latency_s", allow_zero=True)
    _fraction(c.intra_node_efficiency, "cluster.intra_node_efficiency")
    _fraction(c.inter_node_efficiency, "cluster.inter_node_efficiency")
    _choice(c.collective_algorithm, "cluster.collective_algorithm", ALGORITHMS)
    if c.torus_dims:
        positive_ints(list(c.torus_dims), "cluster.torus_dims")
        if math.prod(c.torus_dims) != c.devices:
            raise ConfigError(f"cluster.torus_dims={list(c.torus_dims)}: allowed values have product cluster.devices={c.devices}")
        if c.intra_node_gbps != c.inter_node_gbps:
            raise ConfigError(f"cluster.inter_node_gbps={c.inter_node_gbps}: on a torus every link runs at one rate; allowed value "
                              f"cluster.intra_node_gbps={c.intra_node_gbps}")


def check_train(cfg, m) -> None:
    """Batch, precision, optimizer, microbatches (dividing the global batch), TP widths against the heads,
    and the placement dimensions the preset searches."""
    t = cfg.train
    positive_ints(t.global_batch, "train.global_batch")
    _choice(t.bytes_per_elem, "train.bytes_per_elem", sorted(DTYPES))
    if t.grad_bytes_per_elem is not None:
        _choice(t.grad_bytes_per_elem, "train.grad_bytes_per_elem", sorted(DTYPES))
    if t.master_bytes_per_param is not None:
        _choice(t.master_bytes_per_param, "train.master_bytes_per_param", MASTER_BYTES_CHOICES)
    if t.moment_bytes_per_param is not None:
        _choice(t.moment_bytes_per_param, "train.moment_bytes_per_param", MOMENT_BYTES_CHOICES)
    _choice(t.optimizer, "train.optimizer", OPTIMIZERS)
    _choice(t.precision, "train.precision", PRECISIONS)
    if t.precision == "fp8":
        _choice(t.bytes_per_elem, "train.bytes_per_elem (FP8 training keeps bf16 weights and activations)", [2])
        if float(cfg.hw.fp8_matmul_ratio) < 1:
            raise ConfigError(f"hw.fp8_matmul_ratio={cfg.hw.fp8_matmul_ratio}: train.precision=fp8 needs tensor cores with FP8; "
                              f"allowed values are >= 1 (the FP8 peak over the bf16 peak; hw=h100: 2.0), or train.precision=bf16")
    if t.fp8_params:
        _choice(t.precision, "train.precision (train.fp8_params=true keeps the weights in FP8)", ["fp8"])
        if t.master_bytes_per_param is not None:
            _choice(t.master_bytes_per_param, "train.master_bytes_per_param (FP8 weights have no bf16 half for a remainder: "
                    "an fp32 master copy)", [int(FP32_MASTER_BYTES_PER_PARAM)])
    _choice(t.recompute_granularity, "train.recompute_granularity", RECOMPUTE_GRANULARITIES)
    _choice(t.step_model, "train.step_model", STEP_MODELS)
    _choice(t.stage_layers, "train.stage_layers", STAGE_LAYER_RULES)
    if t.attention is not None:
        _choice(t.attention, "train.attention", ATTENTION_IMPLEMENTATIONS)
    recompute_options(t.recompute)
    _positive(t.update_bytes_per_param, "train.update_bytes_per_param", allow_zero=True)
    zero_stages(t.zero, "train.zero")
    bools(t.sp, "train.sp")
    bools(t.tp_comm_overlap, "train.tp_comm_overlap")
    positive_ints(t.vp, "train.vp")
    positive_ints(t.cp, "train.cp")
    positive_ints(t.ep, "train.ep")
    if t.capacity_factor is not None:
        _positive(t.capacity_factor, "train.capacity_factor", allow_zero=True)
    if t.moe_imbalance is not None and (isinstance(t.moe_imbalance, bool) or t.moe_imbalance < 1):
        raise ConfigError(f"train.moe_imbalance={t.moe_imbalance!r}: allowed values are numbers >= 1 (1: balanced routing)")
    for mbs in positive_ints(t.mbs, "train.mbs"):
        if t.global_batch % mbs:
            raise ConfigError(f"train.global_batch={t.global_batch}: must be a multiple of every train.mbs (here {mbs}), "
                              "so that each data-parallel replica's batch splits into microbatches")
    widths = positive_ints(list(t.tp_widths), "train.tp_widths", powers_of_two=True)
    too_wide = [w for w in widths if w > m.num_heads]
    if too_wide:
        raise ConfigError(f"train.tp_widths={widths}: {too_wide} exceed model.num_heads={m.num_heads}; allowed widths are <= {m.num_heads}")
    if not valid_tp_widths(m, widths):
        raise ConfigError(f"train.tp_widths={widths}: none divides model.num_heads={m.num_heads} and model.num_kv_heads={m.num_kv_heads} "
                          f"within model.max_tp={m.max_tp}; allowed: powers of two up to {m.max_tp} that divide the heads")


def check_schedule(s) -> None:
    """Layer ILP settings: backend, MIP gap, time and work limits, threads."""
    _choice(s.backend, "schedule.backend", BACKEND_CHOICES)
    if not 0 <= s.mip_gap < 1:
        raise ConfigError(f"schedule.mip_gap={s.mip_gap}: allowed values are in [0, 1)")
    _positive(s.time_limit_s, "schedule.time_limit_s")
    if s.work_limit is not None:
        _positive(s.work_limit, "schedule.work_limit")
    positive_ints(s.threads, "schedule.threads")
    _choice(s.mode_search, "schedule.mode_search", (None, True, False))


def check_dimensions(cfg, model) -> None:
    """The placement dimensions to consider (placement.* or train.*): valid values, and what each needs of
    the model, the step model and the others."""
    p = cfg.placement
    if p.zero is not None:
        zero_stages(p.zero, "placement.zero")
    for name in ("vp", "cp", "ep"):
        _positive(p[name], f"placement.{name}", allow_zero=True)
    zeros, cps, sps, overlaps = options(cfg, "zero"), options(cfg, "cp"), options(cfg, "sp"), options(cfg, "tp_comm_overlap")
    eps = options(cfg, "ep")
    if max(eps) > 1 and cfg.train.step_model == "phaze":
        raise ConfigError("placement.ep: expert parallelism needs train.step_model=timeline (e.g. train=megatron); allowed with "
                          "train.step_model=phaze: ep 1")
    if p.ep > 1 and p.zero is not None and p.zero > 1:
        raise ConfigError(f"placement.zero={p.zero}: with expert parallelism (placement.ep={p.ep}) allowed values are 0 and 1 "
                          "(Megatron-Core shards experts with its distributed optimizer)")
    if p.ep > 1 and p.dp and p.dp % p.ep:
        raise ConfigError(f"placement.ep={p.ep}: must divide placement.dp={p.dp} (EP groups are formed from data-parallel ranks); "
                          f"allowed: {[e for e in valid_ep(model, range(1, p.dp + 1)) if p.dp % e == 0]}")
    if cfg.train.step_model == "phaze" and (max(zeros) > 0 or max(cps) > 1):
        field = "placement.zero" if max(zeros) > 0 else "placement.cp"
        raise ConfigError(f"{field}: ZeRO and context parallelism need train.step_model=timeline (e.g. train=megatron); "
                          "PHAZE's step all-reduces every stage's weights over the replicas; allowed with train.step_model=phaze: zero 0, cp 1")
    if True in overlaps and True not in sps:
        raise ConfigError("placement.tp_comm_overlap=true: needs sequence parallelism (Transformer Engine overlaps its all-gathers "
                          "and reduce-scatters); allowed: placement.sp=true or train.sp containing true")
    attention = cfg.train.attention or model.attention
    for cp in cps:
        if cp > 1 and attention != "flash":
            raise ConfigError(f"placement.cp={cp}: context parallelism needs FlashAttention (model.attention=flash or train.attention=flash)")
        if model.seq_len % (2 * cp):
            raise ConfigError(f"placement.cp={cp}: must cut model.seq_len={model.seq_len} into 2 x cp equal chunks (Megatron-Core's causal "
                              f"load balancing); allowed: {[c for c in range(1, model.seq_len // 2 + 1) if model.seq_len % (2 * c) == 0][:12]}")
        if True in sps:
            for width in valid_tp_widths(model, list(cfg.train.tp_widths)):
                if model.seq_len % (cp * width):
                    raise ConfigError(f"placement.sp=true: model.seq_len={model.seq_len} does not split over cp x tp = {cp} x {width} ranks")
    for vp in options(cfg, "vp"):
        if vp > 1 and p.pp and (p.pp < 2 or model.num_layers % (p.pp * vp)):
            allowed = [v for v in range(1, model.num_layers + 1) if model.num_layers % (max(p.pp, 1) * v) == 0]
            raise ConfigError(f"placement.vp={vp}: Megatron's interleaved schedule needs pp >= 2 and model.num_layers={model.num_layers} "
                              f"divisible by pp x vp = {p.pp} x {vp}; allowed with placement.pp={p.pp}: {allowed if p.pp >= 2 else [1]}")


def check_layers_per_stage(cfg, model) -> None:
    """placement.layers_per_stage: one count per pipeline stage (pp x vp chunks), the layers summing to the model's,
    every stage but the first and last (which hold the embedding and the loss) with a layer."""
    p = cfg.placement
    layers = p.get("layers_per_stage")
    if layers is None:
        return
    if not p.pp:
        raise ConfigError("placement.layers_per_stage: needs a fixed placement (placement.dp, placement.pp and placement.tp)")
    chunks = [int(p.pp) * vp for vp in options(cfg, "vp")]
    counts = [int(n) for n in layers]
    if len(counts) not in chunks or sum(counts) != model.num_layers:
        raise ConfigError(f"placement.layers_per_stage={counts}: must list pp x vp = {' or '.join(map(str, chunks))} counts summing to "
                          f"model.num_layers={model.num_layers}")
    if min(counts) < 0 or (len(counts) > 2 and min(counts[1:-1]) < 1):
        raise ConfigError(f"placement.layers_per_stage={counts}: counts must be >= 0, and >= 1 for every stage but the first and last")


def check_placement(cfg, model) -> None:
    """A fixed placement: all three widths, within the cluster, a valid TP width, a microbatch for every replica, and
    values of the fields it leaves unset that run with those it sets (phaze.plan_space.fixed_plans)."""
    p = cfg.placement
    if isinstance(p.tp, Sequence) and not isinstance(p.tp, str):
        widths = list(p.tp)
        if not cfg.train.per_stage_tp:
            raise ConfigError(f"placement.tp={widths}: the framework runs one TP width in every pipeline stage (train.per_stage_tp=false); "
                              f"allowed: one width, e.g. placement.tp={widths[0]}")
        raise ConfigError(f"placement.tp={widths}: a fixed placement takes one TP width; per-stage widths are searched "
                          "(train.per_stage_tp=true) with placement.dp, pp and tp unset")
    for name in ("dp", "pp", "tp"):
        _positive(p[name], f"placement.{name}", allow_zero=True)
    check_dimensions(cfg, model)
    check_layers_per_stage(cfg, model)
    if not (p.dp or p.pp or p.tp):
        return
    if not (p.dp and p.pp and p.tp):
        raise ConfigError("placement.dp, placement.pp and placement.tp: give all three for a fixed placement, or none")
    if p.dp * p.pp * p.tp > cfg.cluster.devices:
        raise ConfigError(f"placement.dp x pp x tp = {p.dp * p.pp * p.tp}: allowed is at most cluster.devices={cfg.cluster.devices}")
    cp = max(options(cfg, "cp"))
    if p.dp * p.pp * p.tp * cp > cfg.cluster.devices:
        raise ConfigError(f"placement.dp x pp x tp x cp = {p.dp * p.pp * p.tp * cp}: allowed is at most cluster.devices={cfg.cluster.devices}")
    if p.tp not in valid_tp_widths(model, list(cfg.train.tp_widths)):
        raise ConfigError(f"placement.tp={p.tp}: allowed values are {valid_tp_widths(model, list(cfg.train.tp_widths))} "
                          "(train.tp_widths that divide the model's heads, up to model.max_tp)")
    if p.pp > model.num_layers and p.get("layers_per_stage") is None:
        raise ConfigError(f"placement.pp={p.pp}: allowed values are 1..model.num_layers={model.num_layers} (more only with "
                          "placement.layers_per_stage giving the first or last stage the embedding or the head alone)")
    if not fixed_microbatches(cfg):
        mbs = min(positive_ints(cfg.train.mbs, "train.mbs"))
        raise ConfigError(f"placement.dp={p.dp}: with train.mbs={cfg.train.mbs} some replica gets no sequence of train.global_batch="
                          f"{cfg.train.global_batch}; allowed: placement.dp <= {cfg.train.global_batch // mbs}")
    fixed_plans(cfg)


def check_storage(url: str | None) -> None:
    """An Optuna storage URL: any SQLAlchemy database URL whose dialect and driver are installed."""
    if url is not None:
        check_database_url(url, "search.storage", "memory, sqlite:///path.db, postgresql://user:password@host:port/db, mysql+pymysql://...")


def check_database_url(url: str, field: str, allowed: str) -> None:
    """A SQLAlchemy database URL whose dialect and driver (DBAPI module) are installed; nothing is connected to."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect().import_dbapi()
    except ImportError as e:
        raise ConfigError(f"{field}={url!r}: its database driver is not installed ({e}; `pip install -e '.[cluster]'` installs "
                          f"PostgreSQL's); allowed: {allowed}") from None
    except (ArgumentError, NoSuchModuleError, ValueError) as e:
        raise ConfigError(f"{field}={url!r}: not a usable database URL ({e}); allowed: {allowed}") from None


def check_top_n(s) -> None:
    """search.top_n: a positive integer, and 1 for the samplers whose answer is a Pareto front, not a ranking."""
    if isinstance(s.top_n, bool) or not isinstance(s.top_n, int) or s.top_n <= 0:
        raise ConfigError(f"search.top_n={s.top_n!r}: allowed values are positive integers (the designs the study ranks exactly)")
    if s.sampler in FRONT_SAMPLERS and s.top_n != 1:
        raise ConfigError(f"search.top_n={s.top_n}: allowed with search={s.sampler}: 1 (its answer is a Pareto front, not a ranking)")


def check_search(cfg) -> None:
    """Sampler, objective, trial and worker counts, heartbeats, and a storage the workers can share."""
    s = cfg.search
    _choice(s.sampler, "search.sampler", SAMPLERS)
    _choice(s.objective, "search.objective", OBJECTIVES)
    _choice(s.placement, "search.placement", PLACEMENTS)
    if s.get("timeout_s") is not None:
        _positive(s.timeout_s, "search.timeout_s")
    if s.sampler == "pareto" and s.objective != "throughput":
        raise ConfigError(f"search.objective={s.objective!r}: search=pareto trades throughput against area and TDP; allowed: throughput")
    if s.objective == "throughput_per_tdp" and s.sampler == "nsga2":
        raise ConfigError("search.objective=throughput_per_tdp: allowed with samplers bound, grid, tpe (nsga2 optimises throughput vs area)")
    positive_ints(s.n_trials, "search.n_trials")
    check_top_n(s)
    positive_ints(s.n_workers, "search.n_workers")
    positive_ints(s.heartbeat_interval_s, "search.heartbeat_interval_s")
    positive_ints(s.grace_period_s, "search.grace_period_s")
    if s.grace_period_s <= s.heartbeat_interval_s:
        raise ConfigError(f"search.grace_period_s={s.grace_period_s}: allowed values are > search.heartbeat_interval_s={s.heartbeat_interval_s} "
                          "(a live trial beats at least once per grace period)")
    _positive(s.seed, "search.seed", allow_zero=True)
    if not (isinstance(s.rel_gap, (int, float)) and 0 <= s.rel_gap < 1):
        raise ConfigError(f"search.rel_gap={s.rel_gap!r}: allowed values are numbers in [0, 1)")
    if s.study_name is not None and not str(s.study_name).strip():
        raise ConfigError("search.study_name='': allowed values are null (derived from the config) or a non-empty name")
    if s.storage == MEMORY and s.n_workers > 1:
        raise ConfigError(f"search.n_workers={s.n_workers}: needs a shared search.storage (sqlite:///..., postgresql://...), not memory")
    check_storage(storage_url(cfg) if s.storage != MEMORY else None)


FILE_STORE_SCHEMES = ("", "file")
"""URI schemes of MLflow's filesystem tracking store, which MLflow 3 refuses to build unless MLFLOW_ALLOW_FILE_STORE=true
(mlflow/store/tracking/file_store.py; docs/dependencies.md §1.1)."""


def check_tracking(t) -> None:
    """The MLflow experiment name and tracking URI."""
    if not str(t.experiment).strip():
        raise ConfigError("tracking.experiment='': allowed values are non-empty names")
    if t.uri is not None and not str(t.uri).strip():
        raise ConfigError("tracking.uri='': allowed values are null ($MLFLOW_TRACKING_URI or mlruns/) or a tracking URI")
    uri = t.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if t.enabled and uri:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
        from mlflow.store.db.db_types import DATABASE_ENGINES
        from mlflow.utils.uri import get_uri_scheme

        field = "tracking.uri" if t.uri else "$MLFLOW_TRACKING_URI"
        allowed = "null (mlruns/mlflow.db here), sqlite:///path.db, postgresql://..., http(s)://<mlflow server>"
        scheme = get_uri_scheme(str(uri))
        if scheme in FILE_STORE_SCHEMES and not MLFLOW_ALLOW_FILE_STORE.get():
            raise ConfigError(f"{field}={str(uri)!r}: MLflow refuses a filesystem tracking store (unless MLFLOW_ALLOW_FILE_STORE=true); "
                              f"allowed: {allowed}")
        if scheme.split("+")[0] in DATABASE_ENGINES:
            check_database_url(str(uri), field, allowed)


def check_output_file(path: str, field: str, formats: tuple[str, ...] = ()) -> None:
    """A file a command will write: one of `formats` (its suffix) when given, in a folder that exists or can be made."""
    suffix = Path(path).suffix.lstrip(".").lower()
    if formats and suffix not in formats:
        raise ConfigError(f"{field}={path!r}: allowed: a file name ending in .{', .'.join(formats)}")
    check_output_folder(Path(path).parent, field, path)


def check_output_folder(folder, field: str, value=None) -> None:
    """A folder a command will write into (field's value: the folder, or a file in it): it exists or can be made there."""
    value = str(folder) if value is None else value
    folder = Path(folder).resolve()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        with tempfile.TemporaryFile(dir=existing):  # a trial file, gone when closed: what os.access cannot tell for root
            pass
    except OSError as e:
        raise ConfigError(f"{field}={value!r}: cannot be written ({existing}: {e.strerror}); allowed: a path in a writable folder") from None


def figure_formats() -> tuple[str, ...]:
    """The file formats matplotlib writes (the suffixes savefig accepts)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))


def check_config(cfg) -> None:
    """Raise ConfigError for the first invalid value of the job config (every model of `model=[a,b]`)."""
    models = list(cfg.get("models") or [cfg.model])
    for model in models:
        check_model(model)
    check_hw(cfg.hw)
    check_cluster(cfg.cluster)
    for model in models:
        check_train(cfg, model)
        check_placement(cfg, model)
    check_schedule(cfg.schedule)
    check_search(cfg)
    check_tracking(cfg.tracking)
    if cfg.get("workload_processes") is not None:
        positive_ints(cfg.workload_processes, "workload_processes")


def one_line(error: BaseException) -> str:
    """An error message on one line: Hydra's multi-line messages (option lists) joined."""
    text = str(error)
    options = getattr(error, "options", None)
    group = re.search(r"Available options in '([^']+)'", text)
    if options and group:
        names = ", ".join(o for o in options if not o.startswith(SCHEMA_PREFIX))
        return f"{text.strip().splitlines()[0]}; allowed values for {group.group(1)}: {names}"
    listed = re.search(r"Could not load '([\w/]+)/[^']+'", text)
    if listed:  # an unknown name in a list of group options (model=[a,b,...]): Hydra names no options
        return f"{text.strip().splitlines()[0].rstrip('.')}; allowed values for {listed.group(1)}: {', '.join(presets(listed.group(1)))}"
    cause = error.__cause__
    parts = [text] + ([str(cause)] if cause is not None and str(cause) not in text else [])
    line = " | ".join(" ".join(line.strip() for line in p.splitlines() if line.strip()) for p in parts)
    typo = re.search(r"Key '[^']+' not in '(\w+)'", line)
    node = getattr(schema, typo.group(1), None) if typo else None
    if node is not None and dataclasses.is_dataclass(node):
        line += f"; allowed keys: {', '.join(f.name for f in dataclasses.fields(node))}"
    if "is not a valid bool" in line:  # OmegaConf's message for a boolean field names no values
        line += "; allowed values: true, false"
    return line


def exit_on_config_error(error: BaseException) -> None:
    """Print `error: <one line>` to stderr, take back what Hydra wrote for the job, and exit with EXIT_CONFIG."""
    print(f"error: {one_line(error)}", file=sys.stderr)
    discard_job_output()
    sys.exit(EXIT_CONFIG)


EXIT_INTERRUPTED = 128 + signal.SIGINT
"""The shell's exit status of a command stopped by Ctrl-C (SIGINT)."""


def run_cli(main) -> None:
    """Run a @hydra.main entry point (its task under refusing_bad_config, which handles our ConfigErrors): Hydra's
    composition errors are one line on stderr and exit 2, a Ctrl-C one line and exit 130 (a search's study keeps its
    finished trials and resumes with the same command)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ["HYDRA_FULL_ERROR"] = "1"  # let Hydra's errors reach us instead of exiting 1 itself
    try:
        main()
    except (HydraException, OmegaConfBaseException) as e:
        exit_on_config_error(e)
    except KeyboardInterrupt:
        print("interrupted: a search resumes where it stopped when run again with the same command", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def refusing_bad_config(task):
    """An entry point's task whose ConfigErrors exit 2 with one line inside the Hydra job, where what Hydra wrote for
    the job can still be found and taken back (once the job ends Hydra forgets its folder); goes under @hydra.main."""

    @functools.wraps(task)
    def job(cfg):
        try:
            return task(cfg)
        except ConfigError as e:
            exit_on_config_error(e)

    return job


def check_choices(overrides) -> None:
    """A config group's schema (`model=base_model`, `train=base_train`, ...: phaze.schema registers them beside the
    presets, so Hydra accepts them) is not a preset: a model without its shape, a chip without its parts."""
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        group = override.key_or_group
        value = override.value()
        names = value if isinstance(value, list) else [value]
        if (CONF_DIR / group).is_dir() and any(str(name).startswith(SCHEMA_PREFIX) for name in names):
            raise ConfigError(f"{override.input_line}: the schema every {group} preset extends, not a preset; "
                              f"allowed values for {group}: {', '.join(presets(group))}")


def checked(cfg, overrides=()):
    """The entry points' job config: cfg with the models of a `model=[a,b,...]` override (attach_models), checked."""
    check_choices(overrides)
    cfg = attach_models(cfg, overrides)
    check_config(cfg)
    return cfg


def check_fixed(cfg) -> None:
    """A fixed placement (dp, pp and tp) has at least one plan: the fields it leaves unset are searched over the values
    consistent with those it sets (phaze.plan_space.fixed_plans)."""
    if cfg.placement.dp or cfg.placement.pp or cfg.placement.tp:
        if not (cfg.placement.dp and cfg.placement.pp and cfg.placement.tp):
            raise ConfigError("placement.dp, placement.pp and placement.tp: give all three for a fixed placement, or none")
        fixed_plans(cfg)
