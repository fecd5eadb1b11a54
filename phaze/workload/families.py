"""Hugging Face model classes built from a ModelCfg on the `meta` device, split into traceable parts.

Each family says how to build its config (phaze.workload.model_configs), which submodules form the pre-layers
(embeddings), the repeated block and the post-layers (final norm, LM head, loss) and how the block is called
(phaze.workload.model_parts), and where Megatron tensor parallelism splits it. No weights are downloaded: configs
are built from numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from phaze.workload.attention import CONTEXT_PARALLEL_ATTR, HF_EAGER_NAME, HF_NAME, register_with_transformers
from phaze.workload.experts import HF_EXPERTS_NAME, Routing, register_experts, shard_experts
from phaze.workload.graph import DENSE, Shard
from phaze.workload.model_configs import (
    bert_config, deepseek_v2_config, gpt2_config, llama_config, mixtral_config, olmoe_config, opt_config, qwen2_moe_config,
    starcoder2_config,
)
from phaze.workload.model_parts import Part, PartSpec, bert_parts, gpt2_parts, llama_parts, opt_parts
from phaze.workload.model_rules import block_parts
from phaze.workload.tensor_parallel import TPPlan, shard_block


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
        llama_parts, lambda m: m.model.layers, dense if dense_blocks else None,
    )


FAMILIES: dict[str, Family] = {
    "starcoder2": Family(
        "starcoder2", starcoder2_config, lambda: _transformers_class("Starcoder2ForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.c_fc"),
            row=("self_attn.o_proj", "mlp.c_proj"), copy_to=("self_attn", "mlp"), attention="self_attn",
        ),
        llama_parts, lambda m: m.model.layers,
    ),
    "llama": Family(
        "llama", llama_config, lambda: _transformers_class("LlamaForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"),
            row=("self_attn.o_proj", "mlp.down_proj"), copy_to=("self_attn", "mlp"), attention="self_attn",
        ),
        llama_parts, lambda m: m.model.layers,
    ),
    "mixtral": _moe_family("mixtral", mixtral_config, "MixtralForCausalLM"),
    "qwen2_moe": _moe_family("qwen2_moe", qwen2_moe_config, "Qwen2MoeForCausalLM", shared_expert="mlp.shared_expert", dense_blocks=True),
    "deepseek_v2": _moe_family("deepseek_v2", deepseek_v2_config, "DeepseekV2ForCausalLM", shared_expert="mlp.shared_experts",
                               attention_columns=MLA_COLUMNS, dense_blocks=True),
    # OLMoE normalises queries and keys over all heads at once (QK-norm over the full projection), which a
    # TP split of the heads would change: conf/model/olmoe_1b_7b.yaml sets max_tp 1 (OLMoE trains without TP).
    "olmoe": _moe_family("olmoe", olmoe_config, "OlmoeForCausalLM"),
    "gpt2": Family(
        "gpt2", gpt2_config, lambda: _transformers_class("GPT2LMHeadModel"),
        TPPlan(
            column=("attn.c_attn", "mlp.c_fc"), row=("attn.c_proj", "mlp.c_proj"), copy_to=("attn", "mlp"),
            head_attrs=(("attn", "split_size"), ("attn", "num_heads")), attention="attn",
        ),
        gpt2_parts, lambda m: m.transformer.h,
    ),
    "opt": Family(
        "opt", opt_config, lambda: _transformers_class("OPTForCausalLM"),
        TPPlan(
            column=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "fc1"),
            row=("self_attn.out_proj", "fc2"), copy_to=("self_attn", "fc1"), head_attrs=(("self_attn", "num_heads"),),
            attention="self_attn",
        ),
        opt_parts, lambda m: m.model.decoder.layers,
    ),
    "bert": Family(
        "bert", bert_config, lambda: _transformers_class("BertForPreTraining"),
        TPPlan(
            column=("attention.self.query", "attention.self.key", "attention.self.value", "intermediate.dense"),
            row=("attention.output.dense", "output.dense"), copy_to=("attention.self", "intermediate"),
            attention="attention.self",
        ),
        bert_parts, lambda m: m.bert.encoder.layer,
    ),
}


def family_of(cfg) -> Family:
    """The family of `cfg` (its fields checked where the model's config is: phaze.schema.model, phaze.checks.model)."""
    return FAMILIES[cfg.family]


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
    kinds = block_parts(cfg)
    main = kinds.index("layer") if layer_index is None else layer_index
    dense = kinds.index(DENSE) if DENSE in kinds else None
    model = build_model(cfg, max(2, main + 1, (dense or 0) + 1), dtype)
    blocks = family.blocks(model)
    dense_block = blocks[dense] if dense is not None else None
    blocks[0] = blocks[main]
    _shard_one_block(blocks[0], family.tp_plan, t, shard.sp, cp)
    if family.tp_plan.experts:
        routing = Routing(ep, t, t * cp, float(getattr(cfg, "capacity_factor", 0.0) or 0.0), float(getattr(cfg, "moe_imbalance", 1.0) or 1.0))
        shard_experts(blocks[0].get_submodule(family.tp_plan.experts), ep, t, routing)
    parts = family.make_parts(model, cfg, mbs, shard, dtype)
    if dense_block is not None:
        _shard_one_block(dense_block, family.dense_tp_plan, t, shard.sp, cp)
        layer = parts["layer"]
        parts[DENSE] = PartSpec(Part({"block": dense_block}, layer.module.run), layer.inputs, layer.grad_input)
    return parts
