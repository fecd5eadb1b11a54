"""Each family's Hugging Face config built from a ModelCfg's numbers (no download), with the model's depth given."""

from __future__ import annotations

from phaze.workload.graph import DENSE
from phaze.workload.model_rules import ACTIVATIONS, block_parts, layer_pattern


def _activation(cfg, key: str) -> dict:
    """The Hugging Face config argument `key` for model.activation, or nothing for the family's default."""
    name = getattr(cfg, "activation", "") or ""
    if name and name not in ACTIVATIONS:
        raise ValueError(f"model.activation={name!r} is not supported; allowed: {list(ACTIVATIONS)} or empty")
    return {key: name} if name else {}


def _head_dim(cfg) -> dict:
    """The Hugging Face `head_dim` argument for model.head_dim, or nothing for hidden size / heads (0)."""
    return {"head_dim": int(cfg.head_dim)} if getattr(cfg, "head_dim", 0) else {}


def _dropout(cfg) -> float | None:
    """model.dropout (hidden and attention dropout probability), or None for the family's own."""
    value = getattr(cfg, "dropout", None)
    return None if value is None else float(value)


# ---------------------------------------------------------------- Llama
def llama_config(cfg, num_layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
        **_activation(cfg, "hidden_act"), **_head_dim(cfg),
    )


# ---------------------------------------------------------------- Starcoder2: a GPT block with grouped-query attention
def starcoder2_config(cfg, num_layers: int):
    """LayerNorm, non-gated GeLU MLP, biases, rotary positions and grouped-query attention: Megatron-Core's
    default GPT with --group-query-attention (and, with activation relu2, Nemotron-4)."""
    from transformers import Starcoder2Config

    dropout = _dropout(cfg)
    return Starcoder2Config(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
        **_activation(cfg, "hidden_act"), **_head_dim(cfg),
        **({"residual_dropout": dropout, "embedding_dropout": dropout, "attention_dropout": dropout} if dropout is not None else {}),
    )


# ---------------------------------------------------------------- Mixtures of experts (every block's MLP is an MoE layer)
def _moe_common(cfg, num_layers: int) -> dict:
    """The arguments Mixtral, Qwen2-MoE and OLMoE configs share."""
    return dict(
        hidden_size=cfg.hidden_size, num_hidden_layers=num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, num_experts_per_tok=cfg.experts_per_token, **_activation(cfg, "hidden_act"),
        **_head_dim(cfg),
    )


def mixtral_config(cfg, num_layers: int):
    """Mixtral (Jiang et al. 2024, arXiv 2401.04088): Llama blocks whose MLP is E SwiGLU experts, top-k."""
    from transformers import MixtralConfig

    return MixtralConfig(intermediate_size=cfg.expert_ffn_hidden_size, num_local_experts=cfg.num_experts,
                         router_jitter_noise=0.0, sliding_window=None, **_moe_common(cfg, num_layers))


def qwen2_moe_config(cfg, num_layers: int):
    """Qwen-MoE (Qwen1.5-MoE / Qwen2-MoE): fine-grained routed experts plus one shared-expert MLP of
    num_shared_experts x expert_ffn_hidden_size (as DeepSeekMoE counts shared experts), QKV biases."""
    from transformers import Qwen2MoeConfig

    return Qwen2MoeConfig(
        intermediate_size=cfg.ffn_hidden_size, moe_intermediate_size=cfg.expert_ffn_hidden_size, num_experts=cfg.num_experts,
        shared_expert_intermediate_size=cfg.num_shared_experts * cfg.expert_ffn_hidden_size, decoder_sparse_step=1,
        mlp_only_layers=[i for i, part in enumerate(block_parts(cfg)[:num_layers]) if part == DENSE], norm_topk_prob=False,
        **_moe_common(cfg, num_layers),
    )


def olmoe_config(cfg, num_layers: int):
    """OLMoE (Muennighoff et al. 2024, arXiv 2409.02060): Llama-like blocks with QK-norm, 64 small experts."""
    from transformers import OlmoeConfig

    return OlmoeConfig(intermediate_size=cfg.expert_ffn_hidden_size, num_experts=cfg.num_experts, **_moe_common(cfg, num_layers))


def deepseek_v2_config(cfg, num_layers: int):
    """DeepSeek-V2 (DeepSeek-AI 2024, arXiv 2405.04434 §2): multi-head latent attention (keys and values from a
    kv_lora_rank-wide latent, a shared rope_head_dim-wide rotary key; queries from a q_lora_rank latent when set,
    else a full projection) and DeepSeekMoE blocks (fine-grained routed experts plus num_shared_experts shared
    ones, softmax top-k without group limit) after model.first_dense_layers dense blocks."""
    from transformers import DeepseekV2Config

    return DeepseekV2Config(
        intermediate_size=cfg.ffn_hidden_size, moe_intermediate_size=cfg.expert_ffn_hidden_size, n_routed_experts=cfg.num_experts,
        n_shared_experts=cfg.num_shared_experts, first_k_dense_replace=layer_pattern(cfg)[0],
        kv_lora_rank=cfg.kv_lora_rank, q_lora_rank=int(cfg.q_lora_rank) or None, qk_rope_head_dim=cfg.rope_head_dim,
        qk_nope_head_dim=cfg.head_dim or cfg.hidden_size // cfg.num_heads, v_head_dim=cfg.v_head_dim, topk_method="greedy",
        n_group=1, topk_group=1, norm_topk_prob=False, **{k: v for k, v in _moe_common(cfg, num_layers).items() if k != "head_dim"},
    )


# ---------------------------------------------------------------- GPT-2 (also Megatron GPT-2 / GPT-3)
def gpt2_config(cfg, num_layers: int):
    from transformers import GPT2Config

    dropout = _dropout(cfg)
    return GPT2Config(
        n_embd=cfg.hidden_size, n_layer=num_layers, n_head=cfg.num_heads, n_inner=cfg.ffn_hidden_size,
        vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
        **_activation(cfg, "activation_function"),
        **({"resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout} if dropout is not None else {}),
    )


# ---------------------------------------------------------------- OPT
def opt_config(cfg, num_layers: int):
    from transformers import OPTConfig

    return OPTConfig(
        hidden_size=cfg.hidden_size, ffn_dim=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        word_embed_proj_dim=cfg.word_embed_proj_dim or cfg.hidden_size, do_layer_norm_before=cfg.pre_norm,
        tie_word_embeddings=cfg.tie_word_embeddings, **_activation(cfg, "activation_function"),
    )


# ---------------------------------------------------------------- BERT (pre-training heads: masked LM + next sentence)
def bert_config(cfg, num_layers: int):
    from transformers import BertConfig

    return BertConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, **_activation(cfg, "hidden_act"),
    )
