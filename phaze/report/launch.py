"""A placement as the frameworks launch it: a torchrun command with Megatron-LM's arguments, a NeMo (Megatron GPT)
config fragment, a torchtitan job config (TOML) for PyTorch FSDP runs, and why a plan cannot be launched.

Names: Megatron-LM's megatron/training/arguments.py (--tensor-model-parallel-size, ...,
--num-layers-per-virtual-pipeline-stage, --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers,
--use-distributed-optimizer, Megatron-Core's custom FSDP with --data-parallel-sharding-strategy for ZeRO-2 and -3);
Megatron-Core's megatron/core/transformer/transformer_config.py (the uneven first and last stages hold > 0 layers, the
middle ones the same number; with interleaving, even chunks); NeMo's megatron_gpt_config.yaml
(tensor_model_parallel_size, num_layers_in_first_pipeline_stage, activations_checkpoint_granularity, optim.name, ...);
torchtitan's torchtitan/config/job_config.py ([training] local_batch_size / global_batch_size / seq_len,
[parallelism] data_parallel_shard_degree / data_parallel_replicate_degree / tensor_parallel_degree /
pipeline_parallel_degree / pipeline_parallel_split_points / pipeline_parallel_microbatch_size /
context_parallel_degree / expert_parallel_degree, [activation_checkpoint] mode, [float8], [optimizer] name).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from phaze.config_values import ConfigError
from phaze.placement.layouts import rule_breach

ZERO_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
"""Megatron-Core custom FSDP's --data-parallel-sharding-strategy for ZeRO stages 2 and 3 (stage 1 is the
distributed optimizer)."""
MEGATRON_STAGE_LAYERS = "even_middle"
"""Megatron-Core's rule for layers per pipeline stage without interleaving (phaze.placement.layouts)."""
RMSNORM_SWIGLU_FAMILIES = ("llama", "mixtral", "qwen2_moe", "olmoe", "deepseek_v2")
"""Decoder families with RMSNorm, a SwiGLU MLP, rotary positions and no linear biases (Megatron: --normalization RMSNorm
--swiglu --position-embedding-type rope --disable-bias-linear)."""
LAYERNORM_GELU_FAMILIES = ("gpt2",)
"""GPT-2/3-style decoders: Megatron's defaults (LayerNorm, GeLU, learned absolute positions, biases)."""
QKV_BIAS_FAMILIES = ("qwen2_moe",)
"""Families whose query/key/value projections keep biases under --disable-bias-linear (Megatron: --add-qkv-bias)."""
TORCHTITAN_OPTIMIZERS = {"adam": "AdamW"}
"""torchtitan's optimizer names for train.optimizer (its build_optimizers offers Adam and AdamW; the presets count AdamW)."""
TORCHTITAN_ZERO = {0: (1, "default"), 2: (0, "never"), 3: (0, "default")}
"""ZeRO stage -> (data-parallel ranks replicating instead of sharding: 1 all, 0 none; fsdp_reshard_after_forward):
FSDP2 keeping the gathered weights after the forward is ZeRO-2, resharding them ZeRO-3; torchtitan has no ZeRO-1."""


@dataclass(frozen=True)
class LaunchPlan:
    """What a framework needs of a plan: the strategy's dimensions, the batch, the layers per pipeline stage (chunks
    in order), the TP width of each, the framework's overlaps, precision and optimizer, and the devices of a node."""

    dp: int
    pp: int
    tp_per_stage: tuple[int, ...]
    vp: int
    cp: int
    ep: int
    sp: bool
    zero: int
    mbs: int
    global_batch: int
    recompute: str
    layers_per_stage: tuple[int, ...]
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    optimizer: str = "adam"
    bytes_per_elem: int = 2
    grad_bytes_per_elem: int = 4
    precision: str = "bf16"
    fp8_params: bool = False
    recompute_granularity: str = "layer"
    node_size: int = 8

    @classmethod
    def from_strategy(cls, strategy, num_layers: int, global_batch: int, train=None, node_size: int = 8) -> "LaunchPlan":
        """From a placement Strategy: its parts (0 the embedding, 1..num_layers the blocks, num_layers + 1 the head)
        counted as transformer layers per stage; the training knobs from `train` (a TrainCfg) when given."""
        layers = tuple(sum(1 for part in range(first, last + 1) if 1 <= part <= num_layers) for first, last in strategy.stage_bounds)
        knobs = {}
        if train is not None:
            knobs = dict(overlap_grad_reduce=bool(train.overlap_grad_reduce), overlap_param_gather=bool(train.overlap_param_gather),
                         optimizer=str(train.optimizer), bytes_per_elem=int(train.bytes_per_elem),
                         grad_bytes_per_elem=int(train.grad_bytes_per_elem or train.bytes_per_elem), precision=str(train.precision),
                         fp8_params=bool(train.fp8_params), recompute_granularity=str(train.recompute_granularity))
        return cls(dp=strategy.dp, pp=strategy.pp, tp_per_stage=tuple(strategy.tp_per_stage), vp=strategy.vp, cp=strategy.cp,
                   ep=strategy.ep, sp=bool(strategy.sp), zero=strategy.zero, mbs=strategy.mbs, global_batch=global_batch,
                   recompute=strategy.recompute, layers_per_stage=layers, tp_comm_overlap=bool(strategy.tp_comm_overlap),
                   node_size=int(node_size), **knobs)

    @property
    def tp(self) -> int:
        return self.tp_per_stage[0]

    @property
    def world_size(self) -> int:
        """The devices the launch takes: dp x pp x tp x cp (the plan's devices when every stage has one TP width)."""
        return self.dp * self.pp * self.tp * self.cp

    def torchrun(self) -> list[str]:
        """torchrun's node and per-node process counts for the plan's devices (whole nodes where they fill them)."""
        per_node = math.gcd(self.world_size, self.node_size)
        return ["torchrun", "--nnodes", str(self.world_size // per_node), "--nproc-per-node", str(per_node)]


def launch_breach(plan: LaunchPlan) -> str | None:
    """Why Megatron-LM cannot run the plan as costed (None: it can)."""
    if len(set(plan.tp_per_stage)) > 1:
        return (f"its pipeline stages have TP widths {list(plan.tp_per_stage)} and Megatron-LM runs one width in every stage")
    layers = plan.layers_per_stage
    if plan.vp > 1 and len(set(layers)) > 1:
        return f"its interleaved chunks hold {list(layers)} layers and Megatron-LM's chunks are even"
    breach = rule_breach(layers, MEGATRON_STAGE_LAYERS) if plan.vp == 1 else None
    if breach:
        return (f"{breach}: Megatron-LM sets only the first and last stages apart (--decoder-first/last-pipeline-num-layers, "
                "each >= 1), the stages between them even")
    if plan.recompute == "full" and plan.recompute_granularity == "stage":
        return "it recomputes from each stage's input (train.recompute_granularity=stage) and Megatron-LM checkpoints per layer"
    return None


def stage_split(plan: LaunchPlan) -> list[str]:
    """Megatron arguments for the layers per stage: nothing for an even split, else the first and last stages' counts
    where they differ from the middle ones' (both for two stages)."""
    layers = plan.layers_per_stage
    if len(set(layers)) == 1:
        return []
    if len(layers) == 2:
        return ["--decoder-first-pipeline-num-layers", str(layers[0]), "--decoder-last-pipeline-num-layers", str(layers[1])]
    args = []
    if layers[0] != layers[1]:
        args += ["--decoder-first-pipeline-num-layers", str(layers[0])]
    if layers[-1] != layers[1]:
        args += ["--decoder-last-pipeline-num-layers", str(layers[-1])]
    return args


def _family(model) -> str:
    family = str(model.family)
    if family not in RMSNORM_SWIGLU_FAMILIES + LAYERNORM_GELU_FAMILIES:
        raise ConfigError(f"model.family={family}: the export writes GPT-style decoders; allowed families: "
                          f"{', '.join(RMSNORM_SWIGLU_FAMILIES + LAYERNORM_GELU_FAMILIES)}")
    return family


def architecture_args(model, attention: str) -> list[str]:
    """Megatron-LM's model arguments for cfg.model (with the attention kernel the run uses: flash or eager)."""
    family = _family(model)
    args = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size), "--ffn-hidden-size", str(model.ffn_hidden_size),
            "--num-attention-heads", str(model.num_heads)]
    if model.head_dim and model.head_dim * model.num_heads != model.hidden_size:
        args += ["--kv-channels", str(model.head_dim)]
    if model.num_kv_heads != model.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    args += ["--seq-length", str(model.seq_len), "--max-position-embeddings", str(model.max_position_embeddings),
             "--vocab-size", str(model.vocab_size)]
    if family in RMSNORM_SWIGLU_FAMILIES:
        args += ["--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope", "--disable-bias-linear"]
        if family in QKV_BIAS_FAMILIES:
            args.append("--add-qkv-bias")
    if not model.tie_word_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if model.num_experts:
        args += ["--num-experts", str(model.num_experts), "--moe-router-topk", str(model.experts_per_token),
                 "--moe-ffn-hidden-size", str(model.expert_ffn_hidden_size)]
        if model.num_shared_experts:
            args += ["--moe-shared-expert-intermediate-size", str(model.num_shared_experts * model.expert_ffn_hidden_size)]
        pattern = [0 if b < model.first_dense_layers or (b - model.first_dense_layers) % model.moe_layer_freq else 1
                   for b in range(model.num_layers)]
        if 0 in pattern:
            args += ["--moe-layer-freq", str(pattern).replace(" ", "")]
    if model.kv_lora_rank:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(model.kv_lora_rank), "--qk-head-dim", str(model.head_dim),
                 "--qk-pos-emb-head-dim", str(model.rope_head_dim), "--v-head-dim", str(model.v_head_dim)]
        if model.q_lora_rank:
            args += ["--q-lora-rank", str(model.q_lora_rank)]
    args += ["--attention-backend", "flash" if attention == "flash" else "unfused"]
    return args


def precision_args(plan: LaunchPlan) -> list[str]:
    """16-bit weights with fp32 gradients are Megatron's --bf16 (it accumulates and reduces bf16 runs' gradients in
    fp32), with 16-bit gradients its --fp16; FP8 GEMMs add Transformer Engine's hybrid format; 4 bytes: fp32."""
    if plan.bytes_per_elem != 2:
        return []
    args = ["--bf16"] if plan.grad_bytes_per_elem == 4 else ["--fp16"]
    if plan.precision == "fp8":
        args += ["--fp8-format", "hybrid"] + (["--fp8-param-gather"] if plan.fp8_params else [])
    return args


def megatron_args(plan: LaunchPlan, model=None, attention: str = "flash") -> list[str]:
    """Megatron-LM's arguments for the plan (with cfg.model's architecture when `model` is given); ConfigError naming
    the plan when Megatron-LM cannot run it (launch_breach)."""
    breach = launch_breach(plan)
    if breach:
        raise ConfigError(f"the plan: Megatron-LM cannot run it: {breach}")
    args = architecture_args(model, attention) if model is not None else []
    args += ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp),
             "--context-parallel-size", str(plan.cp)]
    if plan.ep > 1:
        args += ["--expert-model-parallel-size", str(plan.ep)]
    if plan.vp > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(plan.layers_per_stage[0])]
    args += stage_split(plan)
    if plan.sp:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(plan.mbs), "--global-batch-size", str(plan.global_batch)]
    args += precision_args(plan)
    if plan.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif plan.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    args += ["--optimizer", plan.optimizer]
    if plan.zero == 1:
        args.append("--use-distributed-optimizer")
    elif plan.zero > 1:
        args += ["--use-custom-fsdp", "--data-parallel-sharding-strategy", ZERO_SHARDING[plan.zero]]
    if plan.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    if plan.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
    if plan.overlap_param_gather and plan.zero >= 1:
        args.append("--overlap-param-gather")
    return args


def megatron_command(plan: LaunchPlan, model, attention: str) -> list[str]:
    """The torchrun command launching Megatron-LM's pretrain_gpt.py on the plan's devices."""
    return plan.torchrun() + ["pretrain_gpt.py"] + megatron_args(plan, model, attention)


def _yaml_bool(value: bool) -> str:
    return str(bool(value)).lower()


def nemo_config(plan: LaunchPlan, model=None) -> str:
    """The trainer's devices and the `model:` fragment of a NeMo Megatron GPT config (YAML), the architecture from
    `model` (cfg.model) when given; ConfigError when Megatron cannot run the plan."""
    args = megatron_args(plan)
    granularity = {"none": "null", "selective": "selective", "full": "full"}[plan.recompute]
    per_node = math.gcd(plan.world_size, plan.node_size)
    precision = {"--bf16": "bf16-mixed", "--fp16": "16-mixed"}.get(next(iter(precision_args(plan)), ""), "32")
    lines = [f"# {plan.world_size} GPUs: tensor {plan.tp} x pipeline {plan.pp} x context {plan.cp} x data {plan.dp}",
             "trainer:", f"  devices: {per_node}", f"  num_nodes: {plan.world_size // per_node}", f"  precision: {precision}", "model:"]
    if model is not None:
        family = _family(model)
        rms = family in RMSNORM_SWIGLU_FAMILIES
        lines += [f"  num_layers: {model.num_layers}", f"  hidden_size: {model.hidden_size}", f"  ffn_hidden_size: {model.ffn_hidden_size}",
                  f"  num_attention_heads: {model.num_heads}", f"  num_query_groups: {model.num_kv_heads}",
                  f"  encoder_seq_length: {model.seq_len}", f"  max_position_embeddings: {model.max_position_embeddings}",
                  f"  normalization: {'rmsnorm' if rms else 'layernorm'}", f"  activation: {'fast-swiglu' if rms else 'gelu'}",
                  f"  position_embedding_type: {'rope' if rms else 'learned_absolute'}", f"  bias: {_yaml_bool(not rms)}",
                  f"  share_embeddings_and_output_weights: {_yaml_bool(model.tie_word_embeddings)}"]
    lines += [
        f"  micro_batch_size: {plan.mbs}",
        f"  global_batch_size: {plan.global_batch}",
        f"  tensor_model_parallel_size: {plan.tp}",
        f"  pipeline_model_parallel_size: {plan.pp}",
        f"  virtual_pipeline_model_parallel_size: {plan.vp if plan.vp > 1 else 'null'}",
        f"  context_parallel_size: {plan.cp}",
        f"  expert_model_parallel_size: {plan.ep}",
        f"  sequence_parallel: {_yaml_bool(plan.sp)}",
        f"  activations_checkpoint_granularity: {granularity}",
    ]
    if plan.recompute == "full":
        lines += ["  activations_checkpoint_method: uniform", "  activations_checkpoint_num_layers: 1"]
    split = stage_split(plan)
    for flag, value in zip(split[::2], split[1::2]):
        key = "num_layers_in_first_pipeline_stage" if "first" in flag else "num_layers_in_last_pipeline_stage"
        lines.append(f"  {key}: {value}")
    lines += [f"  ub_tp_comm_overlap: {_yaml_bool(plan.tp_comm_overlap)}",
              "  optim:",
              f"    name: {plan.optimizer if plan.optimizer != 'adam' else 'distributed_fused_adam' if plan.zero >= 1 else 'fused_adam'}"]
    if plan.zero > 1:
        lines.append(f"  # ZeRO-{plan.zero}: NeMo's distributed optimizer shards the optimizer state only (ZeRO-1); Megatron-LM "
                     f"runs it as {' '.join(args[args.index('--use-custom-fsdp'):args.index('--use-custom-fsdp') + 3])}")
    return "\n".join(lines) + "\n"


def torchtitan_split_points(plan: LaunchPlan, num_layers: int) -> list[str]:
    """torchtitan's pipeline split points: the module each stage after the first begins with (`layers.<i>`, or `norm`
    for a last stage holding only the head)."""
    points, first = [], 0
    for count in plan.layers_per_stage[:-1]:
        first += count
        points.append(f"layers.{first}" if first < num_layers else "norm")
    return points


def torchtitan_config(plan: LaunchPlan, model, seq_len: int) -> str:
    """A torchtitan job config (TOML) running the plan; ConfigError naming the field torchtitan cannot follow."""
    if len(set(plan.tp_per_stage)) > 1:
        raise ConfigError(f"the plan: torchtitan cannot run it: its pipeline stages have TP widths {list(plan.tp_per_stage)} "
                          "and torchtitan runs one width (parallelism.tensor_parallel_degree)")
    if plan.optimizer not in TORCHTITAN_OPTIMIZERS:
        raise ConfigError(f"train.optimizer={plan.optimizer}: torchtitan's optimizers are Adam and AdamW; allowed: "
                          f"{', '.join(TORCHTITAN_OPTIMIZERS)}")
    if plan.zero not in TORCHTITAN_ZERO:
        raise ConfigError(f"placement.zero={plan.zero}: torchtitan shards with FSDP2 (ZeRO-2 or -3) or replicates (ZeRO-0); "
                          f"allowed: {', '.join(map(str, TORCHTITAN_ZERO))}")
    if plan.recompute == "full" and plan.recompute_granularity == "stage":
        raise ConfigError("train.recompute_granularity=stage: torchtitan checkpoints per layer; allowed: layer")
    replicate, reshard = TORCHTITAN_ZERO[plan.zero]
    per_node = math.gcd(plan.world_size, plan.node_size)
    local_batch = plan.global_batch // plan.dp if plan.pp > 1 else plan.mbs
    lines = [f"# {plan.world_size} GPUs: torchrun --nnodes {plan.world_size // per_node} --nproc-per-node {per_node} "
             "-m torchtitan.train --job.config_file torchtitan.toml",
             f"# {model.name}: torchtitan builds the model from a registered flavor; register one with {model.num_layers} layers, "
             f"dim {model.hidden_size}, FFN {model.ffn_hidden_size}, {model.num_heads} heads, {model.num_kv_heads} KV heads, "
             f"vocabulary {model.vocab_size}"]
    if plan.tp > 1 and not plan.sp:
        lines.append("# torchtitan's tensor parallelism always shards the norms' activations over the sequence; the plan was "
                     "costed without sequence parallelism")
    lines += ["", "[model]", f'name = "{"llama3" if str(model.family) in RMSNORM_SWIGLU_FAMILIES else str(model.family)}"',
              f'flavor = "{model.name}"', "",
              "[training]", f"local_batch_size = {local_batch}", f"global_batch_size = {plan.global_batch}", f"seq_len = {seq_len}",
              f'mixed_precision_param = "{"bfloat16" if plan.bytes_per_elem == 2 else "float32"}"', "",
              "[optimizer]", f'name = "{TORCHTITAN_OPTIMIZERS[plan.optimizer]}"', "",
              "[parallelism]",
              f"data_parallel_replicate_degree = {plan.dp if replicate else 1}",
              f"data_parallel_shard_degree = {1 if replicate else plan.dp}",
              f'fsdp_reshard_after_forward = "{reshard}"',
              f"tensor_parallel_degree = {plan.tp}",
              f"enable_async_tensor_parallel = {_yaml_bool(plan.tp_comm_overlap)}",
              f"pipeline_parallel_degree = {plan.pp}",
              f"context_parallel_degree = {plan.cp}",
              f"expert_parallel_degree = {plan.ep}"]
    if plan.pp > 1:
        lines += [f'pipeline_parallel_schedule = "{"Interleaved1F1B" if plan.vp > 1 else "1F1B"}"',
                  f"pipeline_parallel_microbatch_size = {plan.mbs}",
                  f"pipeline_parallel_split_points = {torchtitan_split_points(plan, int(model.num_layers))}".replace("'", '"')]
    lines += ["", "[activation_checkpoint]", f'mode = "{plan.recompute}"']
    if plan.recompute == "selective":
        lines.append('selective_ac_option = "op"')
    if plan.precision == "fp8":
        lines += ["", "[float8]", 'recipe_name = "tensorwise"', f"enable_fsdp_float8_all_gather = {_yaml_bool(plan.fp8_params)}"]
    return "\n".join(lines) + "\n"
