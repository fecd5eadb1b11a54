"""train.*: what a training step's fields need of the model and the stages' tables (the step's own rules:
phaze.schema.training; what it needs of the chip: phaze.checks.hardware.check_precision)."""

from __future__ import annotations

from phaze.config_values import ConfigError, choice
from phaze.placement.memory import FP32_MASTER_BYTES_PER_PARAM, MASTER_BYTES_CHOICES, MOMENT_BYTES_CHOICES
from phaze.workload.extract import DTYPES, valid_tp_widths


def check_train(config) -> None:
    """Bytes per element and per parameter the stages model, and TP widths against the model's heads (`config`:
    phaze.schema.Config of one model; run as its ModelJob is built)."""
    t, m = config.train, config.model
    choice(t.bytes_per_elem, "train.bytes_per_elem", sorted(DTYPES))
    if t.grad_bytes_per_elem is not None:
        choice(t.grad_bytes_per_elem, "train.grad_bytes_per_elem", sorted(DTYPES))
    if t.master_bytes_per_param is not None:
        choice(t.master_bytes_per_param, "train.master_bytes_per_param", MASTER_BYTES_CHOICES)
    if t.moment_bytes_per_param is not None:
        choice(t.moment_bytes_per_param, "train.moment_bytes_per_param", MOMENT_BYTES_CHOICES)
    if t.fp8_params and t.master_bytes_per_param is not None:
        choice(t.master_bytes_per_param, "train.master_bytes_per_param (FP8 weights have no bf16 half for a remainder: "
                "an fp32 master copy)", [int(FP32_MASTER_BYTES_PER_PARAM)])
    widths = sorted(set(t.tp_widths))
    too_wide = [w for w in widths if w > m.num_heads]
    if too_wide:
        raise ConfigError(f"train.tp_widths={widths}: {too_wide} exceed model.num_heads={m.num_heads}; allowed widths are <= {m.num_heads}")
    if not valid_tp_widths(m, widths):
        raise ConfigError(f"train.tp_widths={widths}: none divides model.num_heads={m.num_heads} and model.num_kv_heads={m.num_kv_heads} "
                          f"within model.max_tp={m.max_tp}; allowed: powers of two up to {m.max_tp} that divide the heads")
