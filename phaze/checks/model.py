"""model.*: what a model's fields need of its family (phaze.workload.model_rules; the shape's own rules:
phaze.schema.model)."""

from __future__ import annotations

from phaze.config_values import ConfigError, choice
from phaze.workload.model_rules import ACTIVATIONS, FAMILY_NAMES, HEAD_DIM_FAMILIES, check_moe


def check_model(m) -> None:
    """A known family and activation, heads that divide the hidden size (or the head width the family takes), KV heads
    that divide the heads, and the family's mixture-of-experts rules."""
    choice(m.family, "model.family", sorted(FAMILY_NAMES))
    if m.activation:
        choice(m.activation, "model.activation", ACTIVATIONS)
    if m.head_dim and m.head_dim * m.num_heads != m.hidden_size and m.family not in HEAD_DIM_FAMILIES:
        raise ConfigError(f"model.head_dim={m.head_dim}: model.family={m.family!r} takes only hidden_size / num_heads "
                          f"({m.hidden_size // m.num_heads}) or 0; another width needs one of {list(HEAD_DIM_FAMILIES)}")
    if not m.head_dim and m.hidden_size % m.num_heads:
        raise ConfigError(f"model.num_heads={m.num_heads}: must divide model.hidden_size={m.hidden_size} (or set model.head_dim)")
    if m.num_heads % m.num_kv_heads:
        raise ConfigError(f"model.num_kv_heads={m.num_kv_heads}: must divide model.num_heads={m.num_heads}")
    try:
        check_moe(m)
    except ValueError as err:
        raise ConfigError(str(err)) from None
