"""Hugging Face model classes built from a ModelCfg on the `meta` device, split into traceable parts.

Each family says how to build its config, which submodules form the pre-layers (embeddings), the
repeated block and the post-layers (final norm, LM head, loss), how the block is called, and where
Megatron tensor parallelism splits it. No weights are downloaded: configs are built from numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from phaze.workload.attention import CONTEXT_PARALLEL_ATTR, HF_EAGER_NAME, HF_NAME, register_with_transformers
from phaze.workload.experts import HF_EXPERTS_NAME, Routing, register_experts, shard_experts
from phaze.workload.graph import DENSE, Shard
from phaze.workload.model_rules import ACTIVATIONS, block_parts, check_attention, check_moe, layer_pattern
from phaze.workload.tensor_parallel import (
    TPPlan,
    shard_block,
    shard_vocab_embedding,
    shard_vocab_head,
    cross_entropy,
    split_sequence,
    vocab_parallel_cross_entropy,
)

LABEL_DTYPE = torch.int64
"""Token ids and labels, as Hugging Face models take them."""


class Part(nn.Module):
    """A model part: the submodules it owns (so its parameters are exactly theirs) and how to run them."""

    def __init__(self, modules: dict[str, nn.Module], run: Callable[..., torch.Tensor]):
        super().__init__()
        self.mods = nn.ModuleDict(modules)
        self.run = run

    def forward(self, *inputs):
        return self.run(self.mods, *inputs)


@dataclass
class PartSpec:
    """A part plus meta inputs for one microbatch; `grad_input` is the index of the hidden-state input."""

    module: Part
    inputs: tuple[torch.Tensor, ...]
    grad_input: int | None


@dataclass(frozen=True)
class Family:
    """How one Hugging Face architecture is built and cut into pre / layer / post parts."""

    name: str
    build_config: Callable
    model_class: Callable
    tp_plan: TPPlan
    make_parts: Callable  # (model, cfg, mbs, shard, dtype) -> dict[str, PartSpec]
    blocks: Callable  # model -> nn.ModuleList of transformer blocks
    dense_tp_plan: TPPlan | None = None
    """Where the dense blocks of a mixture of experts with a dense/MoE layer pattern are split (None: no dense blocks)."""


def _activation(cfg, key: str) -> dict:
    """The Hugging Face config argument `key` for model.activation, or nothing for the family's default."""
    name = cfg.get("activation", "") or ""
    if name and name not in ACTIVATIONS:
        raise ValueError(f"model.activation={name!r} is not supported; allowed: {list(ACTIVATIONS)} or empty")
    return {key: name} if name else {}


def _head_dim(cfg) -> dict:
    """The Hugging Face `head_dim` argument for model.head_dim, or nothing for hidden size / heads (0)."""
    return {"head_dim": int(cfg.head_dim)} if cfg.get("head_dim", 0) else {}


def _dropout(cfg) -> float | None:
    """model.dropout (hidden and attention dropout probability), or None for the family's own."""
    value = cfg.get("dropout")
    return None if value is None else float(value)


def _hidden(cfg, mbs: int, seq: int, dtype, width: int | None = None) -> torch.Tensor:
    return torch.empty(mbs, seq, width or cfg.hidden_size, device="meta", dtype=dtype, requires_grad=True)


def _ids(mbs: int, seq: int) -> torch.Tensor:
    return torch.empty(mbs, seq, device="meta", dtype=LABEL_DTYPE)


def _causal_mask(mbs: int, seq: int, dtype) -> torch.Tensor:
    """The additive [b, 1, s, s] mask Hugging Face passes to every eager-attention block."""
    return torch.empty(mbs, 1, seq, seq, device="meta", dtype=dtype)


def _lengths(cfg, shard: Shard) -> tuple[int, int]:
    """(tokens of a context-parallel rank, tokens entering a block on one device: 1/t of them under sequence parallelism)."""
    local = cfg.seq_len // shard.cp
    return local, cfg.seq_len // shard.seq_split


def _scattered(x: torch.Tensor, shard: Shard) -> torch.Tensor:
    """The pre-layers' output as a block takes it: this device's sequence slice under sequence parallelism."""
    return split_sequence(x, shard.tp) if shard.sp and shard.tp > 1 else x


# ---------------------------------------------------------------- Llama
def _llama_config(cfg, num_layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
        **_activation(cfg, "hidden_act"), **_head_dim(cfg),
    )


def _llama_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
    """Llama-style parts (also Starcoder2 and DeepSeek-V2): token embedding, rotary positions computed once for the
    blocks ((cos, sin), or DeepSeek's one complex tensor), final norm and LM head; an embedding dropout when the
    config has one."""
    t = shard.tp
    local, block_in = _lengths(cfg, shard)
    inner = model.model
    inner.embed_tokens = shard_vocab_embedding(inner.embed_tokens, t)
    model.lm_head = shard_vocab_head(model.lm_head, t, shard.sp)
    positions = torch.arange(local, device="meta")[None]
    rotary = inner.rotary_emb(_hidden(cfg, mbs, local, dtype), positions)
    rotary = tuple(rotary) if isinstance(rotary, (tuple, list)) else (rotary,)
    embed_dropout = float(getattr(model.config, "embedding_dropout", 0.0))

    def pre(m, ids):
        x = _scattered(m["embed"](ids), shard)
        return torch.nn.functional.dropout(x, p=embed_dropout, training=True) if embed_dropout else x

    def layer(m, x, *rotary_and_mask):
        *rotary_, mask = rotary_and_mask
        return m["block"](x, attention_mask=mask, position_embeddings=tuple(rotary_) if len(rotary_) > 1 else rotary_[0])

    def post(m, x, labels):
        return vocab_parallel_cross_entropy(m["head"](m["norm"](x)), labels, t)

    return {
        "pre": PartSpec(Part({"embed": inner.embed_tokens}, pre), (_ids(mbs, local),), None),
        "layer": PartSpec(Part({"block": inner.layers[0]}, layer), (_hidden(cfg, mbs, block_in, dtype), *rotary, _causal_mask(mbs, local, dtype)), 0),
        "post": PartSpec(Part({"norm": inner.norm, "head": model.lm_head}, post), (_hidden(cfg, mbs, block_in, dtype), _ids(mbs, local)), 0),
    }


# ---------------------------------------------------------------- Starcoder2: a GPT block with grouped-query attention
def _starcoder2_config(cfg, num_layers: int):
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


def _mixtral_config(cfg, num_layers: int):
    """Mixtral (Jiang et al. 2024, arXiv 2401.04088): Llama blocks whose MLP is E SwiGLU experts, top-k."""
    from transformers import MixtralConfig

    return MixtralConfig(intermediate_size=cfg.expert_ffn_hidden_size, num_local_experts=cfg.num_experts,
                         router_jitter_noise=0.0, sliding_window=None, **_moe_common(cfg, num_layers))


def _qwen2_moe_config(cfg, num_layers: int):
    """Qwen-MoE (Qwen1.5-MoE / Qwen2-MoE): fine-grained routed experts plus one shared-expert MLP of
    num_shared_experts x expert_ffn_hidden_size (as DeepSeekMoE counts shared experts), QKV biases."""
    from transformers import Qwen2MoeConfig

    return Qwen2MoeConfig(
        intermediate_size=cfg.ffn_hidden_size, moe_intermediate_size=cfg.expert_ffn_hidden_size, num_experts=cfg.num_experts,
        shared_expert_intermediate_size=cfg.num_shared_experts * cfg.expert_ffn_hidden_size, decoder_sparse_step=1,
        mlp_only_layers=[i for i, part in enumerate(block_parts(cfg)[:num_layers]) if part == DENSE], norm_topk_prob=False,
        **_moe_common(cfg, num_layers),
    )


def _olmoe_config(cfg, num_layers: int):
    """OLMoE (Muennighoff et al. 2024, arXiv 2409.02060): Llama-like blocks with QK-norm, 64 small experts."""
    from transformers import OlmoeConfig

    return OlmoeConfig(intermediate_size=cfg.expert_ffn_hidden_size, num_experts=cfg.num_experts, **_moe_common(cfg, num_layers))


def _deepseek_v2_config(cfg, num_layers: int):
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
def _gpt2_config(cfg, num_layers: int):
    from transformers import GPT2Config

    dropout = _dropout(cfg)
    return GPT2Config(
        n_embd=cfg.hidden_size, n_layer=num_layers, n_head=cfg.num_heads, n_inner=cfg.ffn_hidden_size,
        vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
        **_activation(cfg, "activation_function"),
        **({"resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout} if dropout is not None else {}),
    )


def _gpt2_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
    t = shard.tp
    local, block_in = _lengths(cfg, shard)
    tr = model.transformer
    tr.wte = shard_vocab_embedding(tr.wte, t)
    model.lm_head = shard_vocab_head(model.lm_head, t, shard.sp)

    def pre(m, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        return m["drop"](_scattered(m["wte"](ids) + m["wpe"](positions), shard))

    def post(m, x, labels):
        return vocab_parallel_cross_entropy(m["head"](m["ln_f"](x)), labels, t)

    return {
        "pre": PartSpec(Part({"wte": tr.wte, "wpe": tr.wpe, "drop": tr.drop}, pre), (_ids(mbs, local),), None),
        "layer": PartSpec(
            Part({"block": tr.h[0]}, lambda m, x, mask: m["block"](x, attention_mask=mask)),
            (_hidden(cfg, mbs, block_in, dtype), _causal_mask(mbs, local, dtype)), 0,
        ),
        "post": PartSpec(Part({"ln_f": tr.ln_f, "head": model.lm_head}, post), (_hidden(cfg, mbs, block_in, dtype), _ids(mbs, local)), 0),
    }


# ---------------------------------------------------------------- OPT
def _opt_config(cfg, num_layers: int):
    from transformers import OPTConfig

    return OPTConfig(
        hidden_size=cfg.hidden_size, ffn_dim=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        word_embed_proj_dim=cfg.word_embed_proj_dim or cfg.hidden_size, do_layer_norm_before=cfg.pre_norm,
        tie_word_embeddings=cfg.tie_word_embeddings, **_activation(cfg, "activation_function"),
    )


def _opt_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
    t = shard.tp
    local, block_in = _lengths(cfg, shard)
    dec = model.model.decoder
    dec.embed_tokens = shard_vocab_embedding(dec.embed_tokens, t)
    model.lm_head = shard_vocab_head(model.lm_head, t, shard.sp)
    pre_mods = {"embed": dec.embed_tokens, "pos": dec.embed_positions}
    if dec.project_in is not None:
        pre_mods["proj_in"] = dec.project_in
    post_mods = {"head": model.lm_head}
    if dec.final_layer_norm is not None:
        post_mods["norm"] = dec.final_layer_norm
    if dec.project_out is not None:
        post_mods["proj_out"] = dec.project_out

    def pre(m, ids):
        ones = torch.ones(ids.shape, device=ids.device, dtype=dtype)
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        x = m["embed"](ids)
        if "proj_in" in m:
            x = m["proj_in"](x)
        return _scattered(x + m["pos"](ones, 0, position_ids=positions), shard)

    def post(m, x, labels):
        if "norm" in m:
            x = m["norm"](x)
        if "proj_out" in m:
            x = m["proj_out"](x)
        return vocab_parallel_cross_entropy(m["head"](x), labels, t)

    return {
        "pre": PartSpec(Part(pre_mods, pre), (_ids(mbs, local),), None),
        "layer": PartSpec(
            Part({"block": dec.layers[0]}, lambda m, x, mask: m["block"](x, attention_mask=mask)[0]),
            (_hidden(cfg, mbs, block_in, dtype), _causal_mask(mbs, local, dtype)), 0,
        ),
        "post": PartSpec(Part(post_mods, post), (_hidden(cfg, mbs, block_in, dtype), _ids(mbs, local)), 0),
    }


# ---------------------------------------------------------------- BERT (pre-training heads: masked LM + next sentence)
def _bert_config(cfg, num_layers: int):
    from transformers import BertConfig

    return BertConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, **_activation(cfg, "hidden_act"),
    )


def _bert_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
    t = shard.tp
    local, block_in = _lengths(cfg, shard)
    bert, heads = model.bert, model.cls
    bert.embeddings.word_embeddings = shard_vocab_embedding(bert.embeddings.word_embeddings, t)
    heads.predictions.decoder = shard_vocab_head(heads.predictions.decoder, t, shard.sp)
    heads.predictions.bias = heads.predictions.decoder.bias

    def pre(m, ids):
        return _scattered(m["emb"](input_ids=ids, token_type_ids=torch.zeros_like(ids)), shard)

    def post(m, x, labels):
        mlm_logits = m["mlm"](x)
        nsp_logits = m["nsp"](m["pooler"](x))
        nsp_labels = labels[:, 0].remainder(nsp_logits.shape[-1])
        return vocab_parallel_cross_entropy(mlm_logits, labels, t) + cross_entropy(nsp_logits, nsp_labels)

    padding_mask = torch.empty(mbs, 1, 1, local, device="meta", dtype=dtype)
    return {
        "pre": PartSpec(Part({"emb": bert.embeddings}, pre), (_ids(mbs, local),), None),
        "layer": PartSpec(
            Part({"block": bert.encoder.layer[0]}, lambda m, x, mask: m["block"](x, attention_mask=mask)),
            (_hidden(cfg, mbs, block_in, dtype), padding_mask), 0,
        ),
        "post": PartSpec(
            Part({"pooler": bert.pooler, "mlm": heads.predictions, "nsp": heads.seq_relationship}, post),
            (_hidden(cfg, mbs, block_in, dtype), _ids(mbs, local)), 0,
        ),
    }


def _transformers_class(name: str):
    import transformers

    return getattr(transformers, name)


LLAMA_ATTENTION_COLUMNS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
MLA_COLUMNS = ("self_attn.q_proj", "self_attn.q_b_proj", "self_attn.kv_b_proj")
"""Multi-head latent attention split by heads (Megatron-Core's MLA): the up-projections of the query latent (or the
full query projection, whichever the model has) and of the key/value latent; the down-projections to the latents
(q_a_proj, kv_a_proj_with_mqa) are replicated on every TP rank."""


def _moe_family(name: str, build_config, class_name: str, shared_expert: str = "", attention_columns=LLAMA_ATTENTION_COLUMNS,
                dense_blocks: bool = False) -> Family:
    """A Llama-style mixture of experts: attention columns split by heads and its output projection by rows, the MoE
    block's input copied to the TP group and its output reduced, its experts sharded (phaze.workload.experts); a
    shared-expert MLP column- and row-split with one reduction for both. `dense_blocks`: the class also builds
    dense blocks (model.first_dense_layers, model.moe_layer_freq), whose SwiGLU MLP is split as Llama's."""
    shared_columns = (f"{shared_expert}.gate_proj", f"{shared_expert}.up_proj") if shared_expert else ()
    dense = TPPlan(column=(*attention_columns, "mlp.gate_proj", "mlp.up_proj"), row=("self_attn.o_proj", "mlp.down_proj"),
                   copy_to=("self_attn", "mlp"), attention="self_attn")
    return Family(
        name, build_config, lambda: _transformers_class(class_name),
        TPPlan(column=(*attention_columns, *shared_columns), row=("self_attn.o_proj",),
               partial_row=(f"{shared_expert}.down_proj",) if shared_expert else (), copy_to=("self_attn", "mlp"),
               attention="self_attn", reduce_out=("mlp",), experts="mlp.experts"),
        _llama_parts, lambda m: m.model.layers, dense if dense_blocks else None,
    )


FAMILIES: dict[str, Family] = {
    "starcoder2": Family(
        "starcoder2", _starcoder2_config, lambda: _transformers_class("Starcoder2ForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.c_fc"),
            row=("self_attn.o_proj", "mlp.c_proj"), copy_to=("self_attn", "mlp"), attention="self_attn",
        ),
        _llama_parts, lambda m: m.model.layers,
    ),
    "llama": Family(
        "llama", _llama_config, lambda: _transformers_class("LlamaForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"),
            row=("self_attn.o_proj", "mlp.down_proj"), copy_to=("self_attn", "mlp"), attention="self_attn",
        ),
        _llama_parts, lambda m: m.model.layers,
    ),
    "mixtral": _moe_family("mixtral", _mixtral_config, "MixtralForCausalLM"),
    "qwen2_moe": _moe_family("qwen2_moe", _qwen2_moe_config, "Qwen2MoeForCausalLM", shared_expert="mlp.shared_expert", dense_blocks=True),
    "deepseek_v2": _moe_family("deepseek_v2", _deepseek_v2_config, "DeepseekV2ForCausalLM", shared_expert="mlp.shared_experts",
                               attention_columns=MLA_COLUMNS, dense_blocks=True),
    # OLMoE normalises queries and keys over all heads at once (QK-norm over the full projection), which a
    # TP split of the heads would change: conf/model/olmoe_1b_7b.yaml sets max_tp 1 (OLMoE trains without TP).
    "olmoe": _moe_family("olmoe", _olmoe_config, "OlmoeForCausalLM"),
    "gpt2": Family(
        "gpt2", _gpt2_config, lambda: _transformers_class("GPT2LMHeadModel"),
        TPPlan(
            column=("attn.c_attn", "mlp.c_fc"), row=("attn.c_proj", "mlp.c_proj"), copy_to=("attn", "mlp"),
            head_attrs=(("attn", "split_size"), ("attn", "num_heads")), attention="attn",
        ),
        _gpt2_parts, lambda m: m.transformer.h,
    ),
    "opt": Family(
        "opt", _opt_config, lambda: _transformers_class("OPTForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "fc1"),
            row=("self_attn.out_proj", "fc2"), copy_to=("self_attn", "fc1"), head_attrs=(("self_attn", "num_heads"),),
            attention="self_attn",
        ),
        _opt_parts, lambda m: m.model.decoder.layers,
    ),
    "bert": Family(
        "bert", _bert_config, lambda: _transformers_class("BertForPreTraining"),
        TPPlan(
            column=("attention.self.query", "attention.self.key", "attention.self.value", "intermediate.dense"),
            row=("attention.output.dense", "output.dense"), copy_to=("attention.self", "intermediate"),
            attention="attention.self",
        ),
        _bert_parts, lambda m: m.bert.encoder.layer,
    ),
}


def family_of(cfg) -> Family:
    """The family of `cfg`, after checking `model.family`, `model.attention` and the mixture-of-experts fields."""
    check_attention(cfg.attention)
    try:
        family = FAMILIES[cfg.family]
    except KeyError:
        raise ValueError(f"model.family={cfg.family!r} is not supported; allowed: {sorted(FAMILIES)}") from None
    check_moe(cfg)
    return family


def build_model(cfg, num_layers: int, dtype=torch.bfloat16) -> nn.Module:
    """The Hugging Face model for `cfg` with `num_layers` blocks, on `meta`, in training mode, with eager
    attention or our FlashAttention operator (`model.attention`)."""
    family = family_of(cfg)
    hf_cfg = family.build_config(cfg, num_layers)
    register_with_transformers()
    register_experts()
    # Our eager wrapper calls the model's own eager attention (SDPA on meta fails inside AOTAutograd, docs/dependencies.md §6.2).
    hf_cfg._attn_implementation = HF_NAME if cfg.attention == "flash" else HF_EAGER_NAME
    if family.tp_plan.experts:
        hf_cfg._experts_implementation = HF_EXPERTS_NAME
    with torch.device("meta"):
        model = family.model_class()(hf_cfg)
    return model.to(dtype).train()


def count_params(cfg) -> tuple[int, int]:
    """(unique parameters of the full-depth model as Hugging Face builds it, tied weights once; the active
    ones: all but the (E - k) / E share of the routed experts' weights that a token does not pass through)."""
    model = build_model(cfg, cfg.num_layers)
    total = sum(p.numel() for p in model.parameters())
    expert_path = FAMILIES[cfg.family].tp_plan.experts
    if not expert_path:
        return total, total
    routed = sum(p.numel() for block, part in zip(FAMILIES[cfg.family].blocks(model), block_parts(cfg)) if part != DENSE
                 for p in block.get_submodule(expert_path).parameters())
    idle = (cfg.num_experts - cfg.experts_per_token) / cfg.num_experts
    return total, int(round(total - idle * routed))


def _shard_one_block(block: nn.Module, plan: TPPlan, t: int, sp: bool, cp: int) -> None:
    """One block as a device of a t-wide TP group (sequence-parallel with `sp`) with 1/cp of the sequence holds it."""
    shard_block(block, plan, t, sp)
    if cp > 1:
        setattr(block.get_submodule(plan.attention), CONTEXT_PARALLEL_ATTR, (cp, t))


def build_parts(cfg, mbs: int, t: int, dtype=torch.bfloat16, layer_index: int | None = None, sp: bool = False, cp: int = 1,
                ep: int = 1) -> dict[str, PartSpec]:
    """Pre / layer / post parts of the model sharded for one device of a t-wide TP group (sequence-parallel
    with `sp`) holding 1/cp of the sequence (context parallelism: cp > 1 needs model.attention=flash) and,
    in a mixture of experts, 1/ep of the experts (phaze.workload.experts); plus a DENSE part, the first dense
    block run as the layer part runs, when the layer pattern has dense blocks (block_parts). The layer part is
    block `layer_index` (default: the first MoE block; tests trace two and compare)."""
    family = family_of(cfg)
    shard = Shard(t, sp, cp, ep).canonical()
    if ep > 1 and not family.tp_plan.experts:
        raise ValueError(f"placement.ep={ep}: expert parallelism needs a mixture-of-experts model, not family {cfg.family!r}")
    if cfg.seq_len % shard.seq_split:
        raise ValueError(f"model.seq_len={cfg.seq_len} does not split into {shard.seq_split} pieces (cp x tp under sequence parallelism)")
    if cp > 1 and cfg.attention != "flash":
        raise ValueError("context parallelism needs model.attention=flash (Megatron-Core runs it on fused attention)")
    kinds = block_parts(cfg)
    main = kinds.index("layer") if layer_index is None else layer_index
    dense = kinds.index(DENSE) if DENSE in kinds else None
    model = build_model(cfg, max(2, main + 1, (dense or 0) + 1), dtype)
    blocks = family.blocks(model)
    dense_block = blocks[dense] if dense is not None else None
    blocks[0] = blocks[main]
    _shard_one_block(blocks[0], family.tp_plan, t, shard.sp, cp)
    if family.tp_plan.experts:
        routing = Routing(ep, t, t * cp, float(cfg.get("capacity_factor", 0.0) or 0.0), float(cfg.get("moe_imbalance", 1.0) or 1.0))
        shard_experts(blocks[0].get_submodule(family.tp_plan.experts), ep, t, routing)
    parts = family.make_parts(model, cfg, mbs, shard, dtype)
    if dense_block is not None:
        _shard_one_block(dense_block, family.dense_tp_plan, t, shard.sp, cp)
        layer = parts["layer"]
        parts[DENSE] = PartSpec(Part({"block": dense_block}, layer.module.run), layer.inputs, layer.grad_input)
    return parts
