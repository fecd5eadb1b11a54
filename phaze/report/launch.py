"""A placement as the frameworks launch it: Megatron-LM command-line arguments and a NeMo (Megatron GPT) config
fragment, with notes where a plan has what the framework cannot express.

Argument names: Megatron-LM's megatron/training/arguments.py (--tensor-model-parallel-size, ...,
--num-layers-per-virtual-pipeline-stage, --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
for uneven first and last stages, --use-distributed-optimizer, Megatron-Core's custom FSDP with
--data-parallel-sharding-strategy for ZeRO-2 and -3); NeMo's megatron_gpt_config.yaml (tensor_model_parallel_size,
virtual_pipeline_model_parallel_size, activations_checkpoint_granularity, optim.name distributed_fused_adam, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

ZERO_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
"""Megatron-Core custom FSDP's --data-parallel-sharding-strategy for ZeRO stages 2 and 3 (stage 1 is the
distributed optimizer)."""


@dataclass(frozen=True)
class LaunchPlan:
    """What a framework needs of a plan: the strategy's dimensions, the batch, the layers per pipeline stage (chunks
    in order), the TP width of each, and the framework's overlaps."""

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

    @classmethod
    def from_strategy(cls, strategy, num_layers: int, global_batch: int, train=None) -> "LaunchPlan":
        """From a placement Strategy: its parts (0 the embedding, 1..num_layers the blocks, num_layers + 1 the head)
        counted as transformer layers per stage."""
        layers = tuple(sum(1 for part in range(first, last + 1) if 1 <= part <= num_layers) for first, last in strategy.stage_bounds)
        return cls(dp=strategy.dp, pp=strategy.pp, tp_per_stage=tuple(strategy.tp_per_stage), vp=strategy.vp, cp=strategy.cp,
                   ep=strategy.ep, sp=bool(strategy.sp), zero=strategy.zero, mbs=strategy.mbs, global_batch=global_batch,
                   recompute=strategy.recompute, layers_per_stage=layers, tp_comm_overlap=bool(strategy.tp_comm_overlap),
                   overlap_grad_reduce=bool(train is not None and train.overlap_grad_reduce),
                   overlap_param_gather=bool(train is not None and train.overlap_param_gather),
                   optimizer=str(train.optimizer) if train is not None else "adam")

    @property
    def tp(self) -> int:
        return self.tp_per_stage[0]

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp * self.cp


def stage_split(plan: LaunchPlan) -> tuple[list[str], list[str]]:
    """(Megatron arguments, notes) for the layers per stage: nothing for an even split, the first and last stages'
    counts when only they differ, else a note with the counts."""
    layers = plan.layers_per_stage
    if len(set(layers)) == 1:
        return [], []
    if plan.vp == 1 and len(layers) > 2 and len(set(layers[1:-1])) == 1:
        args = []
        if layers[0] != layers[1]:
            args += ["--decoder-first-pipeline-num-layers", str(layers[0])]
        if layers[-1] != layers[1]:
            args += ["--decoder-last-pipeline-num-layers", str(layers[-1])]
        return args, []
    if plan.vp == 1 and len(layers) == 2:
        return ["--decoder-first-pipeline-num-layers", str(layers[0]), "--decoder-last-pipeline-num-layers", str(layers[1])], []
    return [], [f"layers per pipeline stage {list(layers)}: Megatron-LM sets only the first and last stages' counts; "
                "split the others by hand (or pick the even split)"]


def megatron_args(plan: LaunchPlan) -> tuple[list[str], list[str]]:
    """(Megatron-LM command-line arguments, notes on what they cannot say)."""
    notes = []
    if len(set(plan.tp_per_stage)) > 1:
        notes.append(f"TP width per stage {list(plan.tp_per_stage)}: Megatron-LM runs one width in every stage; "
                     f"the arguments use the first stage's ({plan.tp})")
    args = ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp),
            "--context-parallel-size", str(plan.cp)]
    if plan.ep > 1:
        args += ["--expert-model-parallel-size", str(plan.ep)]
    if plan.vp > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(plan.layers_per_stage[0])]
    split, split_notes = stage_split(plan)
    args += split
    notes += split_notes
    if plan.sp:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(plan.mbs), "--global-batch-size", str(plan.global_batch)]
    if plan.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif plan.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if plan.optimizer != "adam":
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
    return args, notes


def nemo_config(plan: LaunchPlan) -> str:
    """The `model:` fragment of a NeMo Megatron GPT config (YAML), with the plan's notes as comments."""
    granularity = {"none": "null", "selective": "selective", "full": "full"}[plan.recompute]
    lines = [
        f"# {plan.world_size} GPUs: tensor {plan.tp} x pipeline {plan.pp} x context {plan.cp} x data {plan.dp}",
        "model:",
        f"  micro_batch_size: {plan.mbs}",
        f"  global_batch_size: {plan.global_batch}",
        f"  tensor_model_parallel_size: {plan.tp}",
        f"  pipeline_model_parallel_size: {plan.pp}",
        f"  virtual_pipeline_model_parallel_size: {plan.vp if plan.vp > 1 else 'null'}",
        f"  context_parallel_size: {plan.cp}",
        f"  expert_model_parallel_size: {plan.ep}",
        f"  sequence_parallel: {str(plan.sp).lower()}",
        f"  activations_checkpoint_granularity: {granularity}",
    ]
    if plan.recompute == "full":
        lines += ["  activations_checkpoint_method: uniform", "  activations_checkpoint_num_layers: 1"]
    split, _ = stage_split(plan)
    for flag, value in zip(split[::2], split[1::2]):
        key = "num_layers_in_first_pipeline_stage" if "first" in flag else "num_layers_in_last_pipeline_stage"
        lines.append(f"  {key}: {value}")
    lines += [f"  ub_tp_comm_overlap: {str(plan.tp_comm_overlap).lower()}",
              "  optim:",
              f"    name: {plan.optimizer if plan.optimizer != 'adam' else 'distributed_fused_adam' if plan.zero >= 1 else 'fused_adam'}"]
    if plan.zero > 1:
        lines.append(f"  # ZeRO-{plan.zero}: NeMo's distributed optimizer shards the optimizer state only (ZeRO-1); use "
                     f"Megatron-Core's custom FSDP ({ZERO_SHARDING[plan.zero]}) or PyTorch FSDP for stage {plan.zero}")
    _, notes = megatron_args(plan)
    return "\n".join(lines + [f"# note: {n}" for n in notes]) + "\n"
