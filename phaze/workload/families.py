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

from phaze.workload.attention import HF_NAME, check_attention, register_with_transformers
from phaze.workload.tensor_parallel import (
    TPPlan,
    shard_block,
    shard_vocab_embedding,
    shard_vocab_head,
    cross_entropy,
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
    make_parts: Callable  # (model, cfg, mbs, t, dtype) -> dict[str, PartSpec]
    blocks: Callable  # model -> nn.ModuleList of transformer blocks


def _hidden(cfg, mbs: int, dtype, width: int | None = None) -> torch.Tensor:
    return torch.empty(mbs, cfg.seq_len, width or cfg.hidden_size, device="meta", dtype=dtype, requires_grad=True)


def _ids(cfg, mbs: int) -> torch.Tensor:
    return torch.empty(mbs, cfg.seq_len, device="meta", dtype=LABEL_DTYPE)


def _causal_mask(cfg, mbs: int, dtype) -> torch.Tensor:
    """The additive [b, 1, s, s] mask Hugging Face passes to every eager-attention block."""
    return torch.empty(mbs, 1, cfg.seq_len, cfg.seq_len, device="meta", dtype=dtype)


# ---------------------------------------------------------------- Llama
def _llama_config(cfg, num_layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
    )


def _llama_parts(model, cfg, mbs: int, t: int, dtype) -> dict[str, PartSpec]:
    inner = model.model
    inner.embed_tokens = shard_vocab_embedding(inner.embed_tokens, t)
    model.lm_head = shard_vocab_head(model.lm_head, t)
    h = _hidden(cfg, mbs, dtype)
    positions = torch.arange(cfg.seq_len, device="meta")[None]
    cos, sin = inner.rotary_emb(h, positions)

    def layer(m, x, cos_, sin_, mask):
        return m["block"](x, attention_mask=mask, position_embeddings=(cos_, sin_))

    def post(m, x, labels):
        return vocab_parallel_cross_entropy(m["head"](m["norm"](x)), labels, t)

    return {
        "pre": PartSpec(Part({"embed": inner.embed_tokens}, lambda m, ids: m["embed"](ids)), (_ids(cfg, mbs),), None),
        "layer": PartSpec(Part({"block": inner.layers[0]}, layer), (h, cos, sin, _causal_mask(cfg, mbs, dtype)), 0),
        "post": PartSpec(Part({"norm": inner.norm, "head": model.lm_head}, post), (_hidden(cfg, mbs, dtype), _ids(cfg, mbs)), 0),
    }


# ---------------------------------------------------------------- GPT-2 (also Megatron GPT-2 / GPT-3)
def _gpt2_config(cfg, num_layers: int):
    from transformers import GPT2Config

    return GPT2Config(
        n_embd=cfg.hidden_size, n_layer=num_layers, n_head=cfg.num_heads, n_inner=cfg.ffn_hidden_size,
        vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings, tie_word_embeddings=cfg.tie_word_embeddings,
    )


def _gpt2_parts(model, cfg, mbs: int, t: int, dtype) -> dict[str, PartSpec]:
    tr = model.transformer
    tr.wte = shard_vocab_embedding(tr.wte, t)
    model.lm_head = shard_vocab_head(model.lm_head, t)

    def pre(m, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        return m["drop"](m["wte"](ids) + m["wpe"](positions))

    def post(m, x, labels):
        return vocab_parallel_cross_entropy(m["head"](m["ln_f"](x)), labels, t)

    return {
        "pre": PartSpec(Part({"wte": tr.wte, "wpe": tr.wpe, "drop": tr.drop}, pre), (_ids(cfg, mbs),), None),
        "layer": PartSpec(
            Part({"block": tr.h[0]}, lambda m, x, mask: m["block"](x, attention_mask=mask)),
            (_hidden(cfg, mbs, dtype), _causal_mask(cfg, mbs, dtype)), 0,
        ),
        "post": PartSpec(Part({"ln_f": tr.ln_f, "head": model.lm_head}, post), (_hidden(cfg, mbs, dtype), _ids(cfg, mbs)), 0),
    }


# ---------------------------------------------------------------- OPT
def _opt_config(cfg, num_layers: int):
    from transformers import OPTConfig

    return OPTConfig(
        hidden_size=cfg.hidden_size, ffn_dim=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        word_embed_proj_dim=cfg.word_embed_proj_dim or cfg.hidden_size, do_layer_norm_before=cfg.pre_norm,
        tie_word_embeddings=cfg.tie_word_embeddings,
    )


def _opt_parts(model, cfg, mbs: int, t: int, dtype) -> dict[str, PartSpec]:
    dec = model.model.decoder
    dec.embed_tokens = shard_vocab_embedding(dec.embed_tokens, t)
    model.lm_head = shard_vocab_head(model.lm_head, t)
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
        return x + m["pos"](ones, 0, position_ids=positions)

    def post(m, x, labels):
        if "norm" in m:
            x = m["norm"](x)
        if "proj_out" in m:
            x = m["proj_out"](x)
        return vocab_parallel_cross_entropy(m["head"](x), labels, t)

    return {
        "pre": PartSpec(Part(pre_mods, pre), (_ids(cfg, mbs),), None),
        "layer": PartSpec(
            Part({"block": dec.layers[0]}, lambda m, x, mask: m["block"](x, attention_mask=mask)[0]),
            (_hidden(cfg, mbs, dtype), _causal_mask(cfg, mbs, dtype)), 0,
        ),
        "post": PartSpec(Part(post_mods, post), (_hidden(cfg, mbs, dtype), _ids(cfg, mbs)), 0),
    }


# ---------------------------------------------------------------- BERT (pre-training heads: masked LM + next sentence)
def _bert_config(cfg, num_layers: int):
    from transformers import BertConfig

    return BertConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_heads, vocab_size=cfg.vocab_size, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings,
    )


def _bert_parts(model, cfg, mbs: int, t: int, dtype) -> dict[str, PartSpec]:
    bert, heads = model.bert, model.cls
    bert.embeddings.word_embeddings = shard_vocab_embedding(bert.embeddings.word_embeddings, t)
    heads.predictions.decoder = shard_vocab_head(heads.predictions.decoder, t)
    heads.predictions.bias = heads.predictions.decoder.bias

    def pre(m, ids):
        return m["emb"](input_ids=ids, token_type_ids=torch.zeros_like(ids))

    def post(m, x, labels):
        mlm_logits = m["mlm"](x)
        nsp_logits = m["nsp"](m["pooler"](x))
        nsp_labels = labels[:, 0].remainder(nsp_logits.shape[-1])
        return vocab_parallel_cross_entropy(mlm_logits, labels, t) + cross_entropy(nsp_logits, nsp_labels)

    padding_mask = torch.empty(mbs, 1, 1, cfg.seq_len, device="meta", dtype=dtype)
    return {
        "pre": PartSpec(Part({"emb": bert.embeddings}, pre), (_ids(cfg, mbs),), None),
        "layer": PartSpec(
            Part({"block": bert.encoder.layer[0]}, lambda m, x, mask: m["block"](x, attention_mask=mask)),
            (_hidden(cfg, mbs, dtype), padding_mask), 0,
        ),
        "post": PartSpec(
            Part({"pooler": bert.pooler, "mlm": heads.predictions, "nsp": heads.seq_relationship}, post),
            (_hidden(cfg, mbs, dtype), _ids(cfg, mbs)), 0,
        ),
    }


def _transformers_class(name: str):
    import transformers

    return getattr(transformers, name)


FAMILIES: dict[str, Family] = {
    "llama": Family(
        "llama", _llama_config, lambda: _transformers_class("LlamaForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"),
            row=("self_attn.o_proj", "mlp.down_proj"), copy_to=("self_attn", "mlp"),
        ),
        _llama_parts, lambda m: m.model.layers,
    ),
    "gpt2": Family(
        "gpt2", _gpt2_config, lambda: _transformers_class("GPT2LMHeadModel"),
        TPPlan(
            column=("attn.c_attn", "mlp.c_fc"), row=("attn.c_proj", "mlp.c_proj"), copy_to=("attn", "mlp"),
            head_attrs=(("attn", "split_size"), ("attn", "num_heads")),
        ),
        _gpt2_parts, lambda m: m.transformer.h,
    ),
    "opt": Family(
        "opt", _opt_config, lambda: _transformers_class("OPTForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "fc1"),
            row=("self_attn.out_proj", "fc2"), copy_to=("self_attn", "fc1"), head_attrs=(("self_attn", "num_heads"),),
        ),
        _opt_parts, lambda m: m.model.decoder.layers,
    ),
    "bert": Family(
        "bert", _bert_config, lambda: _transformers_class("BertForPreTraining"),
        TPPlan(
            column=("attention.self.query", "attention.self.key", "attention.self.value", "intermediate.dense"),
            row=("attention.output.dense", "output.dense"), copy_to=("attention.self", "intermediate"),
        ),
        _bert_parts, lambda m: m.bert.encoder.layer,
    ),
}


def family_of(cfg) -> Family:
    """The family of `cfg`, after checking `model.family` and `model.attention`."""
    check_attention(cfg.attention)
    try:
        return FAMILIES[cfg.family]
    except KeyError:
        raise ValueError(f"model.family={cfg.family!r} is not supported; allowed: {sorted(FAMILIES)}") from None


def build_model(cfg, num_layers: int, dtype=torch.bfloat16) -> nn.Module:
    """The Hugging Face model for `cfg` with `num_layers` blocks, on `meta`, in training mode, with eager
    attention or our FlashAttention operator (`model.attention`)."""
    family = family_of(cfg)
    hf_cfg = family.build_config(cfg, num_layers)
    if cfg.attention == "flash":
        register_with_transformers()
        hf_cfg._attn_implementation = HF_NAME
    else:
        hf_cfg._attn_implementation = "eager"  # SDPA on meta fails inside AOTAutograd (ecosystem.md §6.2)
    with torch.device("meta"):
        model = family.model_class()(hf_cfg)
    return model.to(dtype).train()


def count_params(cfg) -> int:
    """Unique parameters of the full-depth model as Hugging Face builds it (tied weights once)."""
    return sum(p.numel() for p in build_model(cfg, cfg.num_layers).parameters())


def build_parts(cfg, mbs: int, t: int, dtype=torch.bfloat16, layer_index: int = 0) -> dict[str, PartSpec]:
    """Pre / layer / post parts of the model sharded for one device of a t-wide TP group."""
    family = family_of(cfg)
    model = build_model(cfg, max(2, layer_index + 1), dtype)
    blocks = family.blocks(model)
    if layer_index:
        blocks[0] = blocks[layer_index]
    shard_block(blocks[0], family.tp_plan, t)
    return family.make_parts(model, cfg, mbs, t, dtype)
