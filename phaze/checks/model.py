"""model.*: the architecture fields of every model of the job."""

from __future__ import annotations

from phaze.checks.values import choice, positive
from phaze.config_values import ConfigError, positive_ints
from phaze.workload.model_rules import ACTIVATIONS, ATTENTION_IMPLEMENTATIONS, FAMILY_NAMES, HEAD_DIM_FAMILIES, check_moe


def check_model(m) -> None:
    """Architecture fields: positive sizes, heads that divide the hidden size, a known family and attention."""
    choice(m.family, "model.family", sorted(FAMILY_NAMES))
    choice(m.attention, "model.attention", ATTENTION_IMPLEMENTATIONS)
    if m.activation:
        choice(m.activation, "model.activation", ACTIVATIONS)
    if m.dropout is not None and not 0 <= m.dropout < 1:
        raise ConfigError(f"model.dropout={m.dropout}: allowed values are in [0, 1), or null (the family's own)")
    for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len",
                 "max_position_embeddings", "max_tp"):
        positive_ints(m[name], f"model.{name}")
    positive(m.word_embed_proj_dim, "model.word_embed_proj_dim", allow_zero=True)
    positive(m.head_dim, "model.head_dim", allow_zero=True)
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
        positive(m[name], f"model.{name}", allow_zero=True)
    positive(m.moe_layer_freq, "model.moe_layer_freq")
    try:
        check_moe(m)
    except ValueError as err:
        raise ConfigError(str(err)) from None
