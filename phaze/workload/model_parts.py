"""Each family's model cut into traceable pre / layer / post parts, with meta inputs for one microbatch on one device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from phaze.workload.graph import Shard
from phaze.workload.tensor_parallel import (
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


def llama_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
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


def gpt2_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
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


def opt_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
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


def bert_parts(model, cfg, mbs: int, shard: Shard, dtype) -> dict[str, PartSpec]:
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
