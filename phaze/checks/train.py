"""train.*: batch, precision, optimizer, microbatches and TP widths of each model's training step."""

from __future__ import annotations

from phaze.checks.values import choice, positive
from phaze.config_values import ConfigError, bools, positive_ints, recompute_options, zero_stages
from phaze.placement.inputs import OPTIMIZERS, RECOMPUTE_GRANULARITIES, STEP_MODELS
from phaze.placement.layouts import STAGE_LAYER_RULES
from phaze.placement.memory import FP32_MASTER_BYTES_PER_PARAM, MASTER_BYTES_CHOICES, MOMENT_BYTES_CHOICES
from phaze.workload.extract import DTYPES, valid_tp_widths
from phaze.workload.model_rules import ATTENTION_IMPLEMENTATIONS
from phaze.workload.precision import PRECISIONS


def check_train(cfg, m) -> None:
    """Batch, precision, optimizer, microbatches (dividing the global batch), TP widths against the heads,
    and the placement dimensions the preset searches."""
    t = cfg.train
    positive_ints(t.global_batch, "train.global_batch")
    choice(t.bytes_per_elem, "train.bytes_per_elem", sorted(DTYPES))
    if t.grad_bytes_per_elem is not None:
        choice(t.grad_bytes_per_elem, "train.grad_bytes_per_elem", sorted(DTYPES))
    if t.master_bytes_per_param is not None:
        choice(t.master_bytes_per_param, "train.master_bytes_per_param", MASTER_BYTES_CHOICES)
    if t.moment_bytes_per_param is not None:
        choice(t.moment_bytes_per_param, "train.moment_bytes_per_param", MOMENT_BYTES_CHOICES)
    choice(t.optimizer, "train.optimizer", OPTIMIZERS)
    choice(t.precision, "train.precision", PRECISIONS)
    if t.precision == "fp8":
        choice(t.bytes_per_elem, "train.bytes_per_elem (FP8 training keeps bf16 weights and activations)", [2])
        if float(cfg.hw.fp8_matmul_ratio) < 1:
            raise ConfigError(f"hw.fp8_matmul_ratio={cfg.hw.fp8_matmul_ratio}: train.precision=fp8 needs tensor cores with FP8; "
                              f"allowed values are >= 1 (the FP8 peak over the bf16 peak; hw=h100: 2.0), or train.precision=bf16")
    if t.fp8_params:
        choice(t.precision, "train.precision (train.fp8_params=true keeps the weights in FP8)", ["fp8"])
        if t.master_bytes_per_param is not None:
            choice(t.master_bytes_per_param, "train.master_bytes_per_param (FP8 weights have no bf16 half for a remainder: "
                    "an fp32 master copy)", [int(FP32_MASTER_BYTES_PER_PARAM)])
    choice(t.recompute_granularity, "train.recompute_granularity", RECOMPUTE_GRANULARITIES)
    choice(t.step_model, "train.step_model", STEP_MODELS)
    choice(t.stage_layers, "train.stage_layers", STAGE_LAYER_RULES)
    if t.attention is not None:
        choice(t.attention, "train.attention", ATTENTION_IMPLEMENTATIONS)
    recompute_options(t.recompute)
    positive(t.update_bytes_per_param, "train.update_bytes_per_param", allow_zero=True)
    zero_stages(t.zero, "train.zero")
    bools(t.sp, "train.sp")
    bools(t.tp_comm_overlap, "train.tp_comm_overlap")
    positive_ints(t.vp, "train.vp")
    positive_ints(t.cp, "train.cp")
    positive_ints(t.ep, "train.ep")
    if t.capacity_factor is not None:
        positive(t.capacity_factor, "train.capacity_factor", allow_zero=True)
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
