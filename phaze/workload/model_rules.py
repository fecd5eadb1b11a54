"""What a model config may say, and the checks on it, without torch: the config check runs at every command's start
and in a search's workers (a spawned process imports the command's module again), which then need no torch.

The families that build these models are in phaze.workload.families (their names: FAMILY_NAMES here).
"""

from __future__ import annotations

from phaze.workload.graph import DENSE

FAMILY_NAMES = ("bert", "deepseek_v2", "gpt2", "llama", "mixtral", "olmoe", "opt", "qwen2_moe", "starcoder2")
"""model.family values: the keys of phaze.workload.families.FAMILIES (tests check they agree)."""

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "relu2", "silu")
"""model.activation values (Hugging Face ACT2FN names); empty keeps the family's own."""

HEAD_DIM_FAMILIES = ("llama", "starcoder2", "mixtral", "qwen2_moe", "olmoe", "deepseek_v2")
"""Families whose attention takes its head width from the config (Hugging Face's `head_dim`; DeepSeek-V2's
`qk_nope_head_dim`), so that heads x head width may differ from the hidden size (PaLM, Gemma, MaxText's 2023 models,
DeepSeek-V2's 128 heads of 128 on a hidden size of 5120); the others use hidden size / heads."""


MOE_FAMILIES = ("mixtral", "qwen2_moe", "olmoe", "deepseek_v2")
SHARED_EXPERT_FAMILIES = ("qwen2_moe", "deepseek_v2")
"""Families whose MoE block has a shared-expert MLP beside the routed experts."""
FIRST_DENSE_FAMILIES = ("qwen2_moe", "deepseek_v2")
"""Families whose Hugging Face class can make the first blocks dense (model.first_dense_layers: DeepSeek's
first_k_dense_replace, Qwen2-MoE's mlp_only_layers)."""
LAYER_FREQ_FAMILIES = ("qwen2_moe",)
"""Families whose class can interleave dense and MoE blocks (model.moe_layer_freq, through Qwen2-MoE's mlp_only_layers)."""
MLA_FAMILIES = ("deepseek_v2",)
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "rope_head_dim", "v_head_dim")
"""Multi-head latent attention's widths (families MLA_FAMILIES; q_lora_rank 0: queries from a full projection)."""


def layer_pattern(cfg) -> tuple[int, int]:
    """(model.first_dense_layers, model.moe_layer_freq), their defaults where a config leaves them out."""
    return int(getattr(cfg, "first_dense_layers", 0) or 0), int(getattr(cfg, "moe_layer_freq", 1) or 1)


def block_parts(cfg) -> tuple[str, ...]:
    """The part of each block: DENSE for the first model.first_dense_layers blocks and, after them, for every block
    but the first of each model.moe_layer_freq (Megatron-Core's --moe-layer-freq: one MoE block in N); "layer"
    (the MoE block; every block of a dense model) for the others."""
    first, freq = layer_pattern(cfg)
    return tuple(DENSE if i < first or (i - first) % freq else "layer" for i in range(int(cfg.num_layers)))


def _check_layer_pattern(cfg) -> None:
    first, freq = layer_pattern(cfg)
    if first < 0 or (first and cfg.family not in FIRST_DENSE_FAMILIES):
        raise ValueError(f"model.first_dense_layers={first}: allowed values are 0"
                         + (f"..{cfg.num_layers - 1} (at least one MoE block)" if cfg.family in FIRST_DENSE_FAMILIES else
                            f" for family {cfg.family!r} (leading dense blocks need one of {list(FIRST_DENSE_FAMILIES)})"))
    if first >= cfg.num_layers:
        raise ValueError(f"model.first_dense_layers={first}: allowed values are 0..{cfg.num_layers - 1} (at least one MoE block)")
    if freq < 1 or (freq > 1 and cfg.family not in LAYER_FREQ_FAMILIES):
        raise ValueError(f"model.moe_layer_freq={freq}: allowed values are "
                         + ("integers >= 1" if cfg.family in LAYER_FREQ_FAMILIES else
                            f"1 for family {cfg.family!r} (interleaved dense blocks need one of {list(LAYER_FREQ_FAMILIES)})"))


def _check_mla(cfg) -> None:
    values = {name: int(getattr(cfg, name, 0) or 0) for name in MLA_FIELDS}
    if cfg.family not in MLA_FAMILIES:
        if any(values.values()):
            raise ValueError(f"model.{next(n for n, v in values.items() if v)}: multi-head latent attention needs model.family in "
                             f"{list(MLA_FAMILIES)}, not {cfg.family!r}; allowed value 0")
        return
    for name, value in values.items():
        if value < (0 if name == "q_lora_rank" else 1):
            raise ValueError(f"model.{name}={value} must be >= {0 if name == 'q_lora_rank' else 1} for family {cfg.family!r}")
    if values["rope_head_dim"] % 2:
        raise ValueError(f"model.rope_head_dim={values['rope_head_dim']} must be even (rotary pairs)")


def check_moe(cfg) -> None:
    """The mixture-of-experts fields of `cfg` (and multi-head latent attention's), checked against its family
    (ValueError naming the field)."""
    e, k, f, shared = (int(getattr(cfg, n, 0) or 0) for n in ("num_experts", "experts_per_token", "expert_ffn_hidden_size", "num_shared_experts"))
    check_routing(float(getattr(cfg, "capacity_factor", 0.0) or 0.0), float(getattr(cfg, "moe_imbalance", 1.0) or 1.0))
    _check_mla(cfg)
    _check_layer_pattern(cfg)
    if cfg.family not in MOE_FAMILIES:
        if e or k or shared:
            raise ValueError(f"model.num_experts={e}, model.experts_per_token={k}, model.num_shared_experts={shared}: "
                             f"mixtures of experts need model.family in {list(MOE_FAMILIES)}, not {cfg.family!r}")
        return
    for name, value in (("num_experts", e), ("experts_per_token", k), ("expert_ffn_hidden_size", f)):
        if value < 1:
            raise ValueError(f"model.{name}={value} must be >= 1 for the mixture-of-experts family {cfg.family!r}")
    if k > e:
        raise ValueError(f"model.experts_per_token={k} exceeds model.num_experts={e}: a token picks at most every expert")
    if shared < 0 or (shared and cfg.family not in SHARED_EXPERT_FAMILIES) or (not shared and cfg.family in SHARED_EXPERT_FAMILIES):
        raise ValueError(f"model.num_shared_experts={shared}: family {cfg.family!r} "
                         + ("has shared experts (>= 1)" if cfg.family in SHARED_EXPERT_FAMILIES else "has none (0)"))


def check_routing(capacity_factor: float, imbalance: float) -> None:
    """train.capacity_factor and train.moe_imbalance (ValueError naming the field)."""
    if capacity_factor < 0:
        raise ValueError(f"train.capacity_factor={capacity_factor} must be >= 0 (0: dropless)")
    if imbalance < 1:
        raise ValueError(f"train.moe_imbalance={imbalance} must be >= 1 (1: balanced routing)")


def valid_ep(cfg, ep_values) -> list[int]:
    """The expert-parallel widths that divide model.num_experts (only 1 for a dense model)."""
    e = int(getattr(cfg, "num_experts", 0) or 0)
    return sorted({int(v) for v in ep_values if (e and e % int(v) == 0) or int(v) == 1})
