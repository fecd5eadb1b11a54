"""model=: a transformer's shape and family, and its expert placement (PHAZE's baseline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from phaze.config_values import ConfigError, choice, positive, positive_ints
from phaze.schema.choices import Attention, SelectivePolicy
from phaze.schema.fields import MISSING, complete

SIZE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len",
               "max_position_embeddings", "max_tp")
"""ModelCfg fields that are positive integers."""
OPTIONAL_SIZE_FIELDS = ("word_embed_proj_dim", "head_dim", "num_experts", "experts_per_token", "expert_ffn_hidden_size",
                        "num_shared_experts", "capacity_factor", "first_dense_layers", "kv_lora_rank", "q_lora_rank",
                        "rope_head_dim", "v_head_dim")
"""ModelCfg fields where 0 means none (or the family's own)."""


@dataclass
class ExpertCfg:
    """A fixed (pipeline x data x tensor) placement: PHAZE's expert baseline for the model."""

    pp: int = 1
    dp: int = 1
    tp: int = 1

    def __post_init__(self) -> None:
        for name in ("pp", "dp", "tp"):
            positive_ints(getattr(self, name), f"model.expert.{name}")


@dataclass
class ModelCfg:
    """A transformer from its published configuration; `family` picks the Hugging Face class."""

    name: str = MISSING
    family: str = MISSING  # llama | gpt2 | starcoder2 | opt | bert | mixtral | qwen2_moe | olmoe | deepseek_v2: the Hugging Face class
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    # Width of one attention head; 0: hidden_size / num_heads. Another width (PaLM, Gemma) needs a family that
    # takes it (phaze.workload.model_rules.HEAD_DIM_FAMILIES).
    head_dim: int = 0
    ffn_hidden_size: int = MISSING
    vocab_size: int = MISSING
    seq_len: int = MISSING
    max_position_embeddings: int = MISSING
    max_tp: int = 1
    # OPT-350m projects between a 512-wide embedding and the 1024-wide decoder; 0 means no projection.
    word_embed_proj_dim: int = 0
    tie_word_embeddings: bool = True
    # Layer norm before attention/MLP (pre-LN); OPT-350m is the one OPT that normalises after.
    pre_norm: bool = True
    # eager | flash: Hugging Face's eager attention (s^2 scores in HBM, PHAZE) or one fused FlashAttention-2 kernel.
    attention: str = "eager"
    # The MLP activation by its Hugging Face name (empty: the family's own, e.g. GPT-2's gelu_new, six unfused
    # operators); gelu_pytorch_tanh is the same tanh GeLU as one kernel, as Megatron's fused bias-GeLU runs it.
    activation: str = ""
    # Hidden and attention dropout probability (null: the family's own: GPT-2 0.1, Starcoder2 0, Llama none).
    dropout: Optional[float] = None
    # The framework fuses elementwise chains (Megatron/Apex/Transformer Engine kernels, torch.compile), so the
    # forward saves only what a min-cut rematerialization partition keeps; false: every eager operator saves its inputs.
    fused_kernels: bool = False
    # What train.recompute=selective runs again in backward: attention_core = Megatron's (the attention core, Korthikanti
    # et al. 2022 §5); torchtitan_op = torchtitan's op policy (every operator but the odd-numbered matmuls of a block and
    # its SDPA, whose outputs it keeps; phaze.workload.op_policy).
    selective_policy: str = "attention_core"
    # Multi-head latent attention (family deepseek_v2; 0 otherwise): the key/value latent's width, the query latent's
    # (0: a full query projection), the shared rotary key's head width and the value head width; head_dim is then
    # the width of a head's non-rotary query/key part (DeepSeek's qk_nope_head_dim).
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    # Mixture of experts (families mixtral | qwen2_moe | olmoe | deepseek_v2; 0 for a dense model): routed experts, experts
    # each token picks, the FFN width of one expert, shared experts (one shared MLP of num_shared_experts x that width).
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn_hidden_size: int = 0
    num_shared_experts: int = 0
    # The layer pattern of a mixture of experts (phaze.workload.model_rules.block_parts): the first first_dense_layers
    # blocks are dense (DeepSeek's first_k_dense_replace; families qwen2_moe | deepseek_v2), and after them one block in
    # moe_layer_freq is an MoE block (Megatron-Core's --moe-layer-freq; family qwen2_moe), the others dense, with an
    # MLP of ffn_hidden_size.
    first_dense_layers: int = 0
    moe_layer_freq: int = 1
    # The routing assumption (phaze.workload.experts; train.* overrides when set): 0 = dropless, else tokens padded
    # to capacity_factor x an expert's balanced share; moe_imbalance >= 1: the busiest device's share of a dropless layer.
    capacity_factor: float = 0.0
    moe_imbalance: float = 1.0
    source: str = ""
    # Parameter counts the source publishes (total and active per token; 0: not given), checked by the tests.
    published_params: float = 0.0
    published_active_params: float = 0.0
    expert: ExpertCfg = field(default_factory=ExpertCfg)

    def __post_init__(self) -> None:
        """The shape's own rules: positive sizes, a known attention kernel, a dropout in [0, 1), a sequence within the
        positions. What needs the family's tables (phaze.workload.model_rules): phaze.checks.model."""
        if not complete(self):
            return
        choice(self.attention, "model.attention", Attention.values())
        choice(self.selective_policy, "model.selective_policy", SelectivePolicy.values())
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ConfigError(f"model.dropout={self.dropout}: allowed values are in [0, 1), or null (the family's own)")
        for name in SIZE_FIELDS:
            positive_ints(getattr(self, name), f"model.{name}")
        for name in OPTIONAL_SIZE_FIELDS:
            positive(getattr(self, name), f"model.{name}", allow_zero=True)
        positive(self.moe_layer_freq, "model.moe_layer_freq")
        if self.seq_len > self.max_position_embeddings:
            raise ConfigError(f"model.seq_len={self.seq_len}: allowed values are 1..model.max_position_embeddings={self.max_position_embeddings}")
