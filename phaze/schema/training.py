"""train= and placement.*: the training step's knobs, the placement dimensions to search, a fixed placement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from phaze.config_values import ConfigError, bools, choice, positive, positive_ints, recompute_options, zero_stages
from phaze.schema.choices import Attention, Optimizer, Precision, RecomputeGranularity, SelectivePolicy, StageLayers, StepModel


@dataclass
class TrainCfg:
    """Training-step knobs: global batch, precision, optimizer, the placement dimensions the search
    considers (placement.* fixes one), and how the framework overlaps communication (docs/parallelism.md)."""

    global_batch: int = 4096
    bytes_per_elem: int = 2
    # GEMM precision: bf16 | fp8 (Transformer Engine: the transformer layers' linear GEMMs in FP8; phaze.workload.precision).
    precision: str = "bf16"
    # With precision fp8: the linear layers' weights kept in FP8 only (Transformer Engine's fp8_model_init, NeMo's
    # fp8_params): no bf16 copy, ZeRO gathers in FP8, an fp32 master copy in the optimizer.
    fp8_params: bool = False
    # Bytes of a gradient element, kept and reduced (null: bytes_per_elem; Megatron keeps bf16 runs' gradients in fp32: 4).
    grad_bytes_per_elem: Optional[int] = None
    # Bytes of Adam's master copy of a weight below fp32 (null: an fp32 copy, 4; NeMo's Apex distributed Adam keeps
    # only the 16 bits a bf16 weight lacks: 2, or none where its optimizer state is bf16 as the weights: 0).
    master_bytes_per_param: Optional[int] = None
    # Bytes of Adam's two moments per weight (null: fp32, 8; NeMo's Apex distributed Adam with optim.dtype=bf16: 4).
    moment_bytes_per_param: Optional[int] = None
    optimizer: str = "sgd"  # sgd | adam | none (inference: no gradients, no optimizer state, nothing reduced)
    # Only the forward pass (inference, phaze.workload.inference): with optimizer none, what train=inference runs.
    forward_only: bool = False
    # A value or a list of values to search: `train.mbs=4` or `train.mbs=[1,2,4,8]` (phaze.config_values checks them).
    mbs: Any = field(default_factory=lambda: [1, 2, 4, 8])
    # none | selective (attention core) | full, or booleans (false = none, true = full); one or a list.
    recompute: Any = field(default_factory=lambda: [False, True])
    tp_widths: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # Whether a pipeline's stages may differ in TP width (PHAZE's plans; false: one width in every stage, as every
    # framework runs) and which layers per stage the framework runs: any | even_middle (Megatron-Core: the first and
    # last stages free, the middle even) | even (phaze.placement.layouts).
    per_stage_tp: bool = True
    stage_layers: str = "any"
    recompute_granularity: str = "layer"  # layer = Megatron per-layer checkpoints | stage = PHAZE's stage-input checkpoint
    # ZeRO stages 0..3, Megatron sequence parallelism, interleaved chunks per rank, context-parallel widths and
    # TP communication overlap to search (one value or a list each).
    zero: Any = field(default_factory=lambda: [0])
    sp: Any = field(default_factory=lambda: [False])
    vp: Any = field(default_factory=lambda: [1])
    cp: Any = field(default_factory=lambda: [1])
    tp_comm_overlap: Any = field(default_factory=lambda: [False])
    # Expert-parallel widths to search (only those dividing model.num_experts are used; 1 for a dense model).
    ep: Any = field(default_factory=lambda: [1])
    # The MoE routing assumption, overriding the model's (null: the model's own): see ModelCfg.
    capacity_factor: Optional[float] = None
    moe_imbalance: Optional[float] = None
    # eager | flash: the attention kernel, overriding model.attention (null: the model's own).
    attention: Optional[str] = None
    # The fused attention kernel computes its matmuls with warp-level MMA (mma.sync: FlashAttention-2's kernels, which
    # PyTorch's scaled_dot_product_attention runs as its flash backend), at hw.mma_sync_fraction of the tensor cores'
    # rate; false: with the chip's own instructions (FlashAttention-3, cuDNN's fused attention, Transformer Engine).
    attention_warp_mma: bool = False
    # Whether the framework's kernels are fused (see model.fused_kernels), overriding the model's (null: the model's own).
    fused_kernels: Optional[bool] = None
    # What the framework's selective recompute runs again (see model.selective_policy), overriding the model's (null: its own).
    selective_policy: Optional[str] = None
    # phaze: PHAZE's step (flush, then the gradient all-reduce, nothing overlapped) | timeline (the framework's overlaps).
    step_model: str = "phaze"
    # The framework reduces gradients bucket by bucket under the backward, prefetches ZeRO parameter gathers
    # under compute, and issues TP collectives on a communication stream (single-stream chips).
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_async: bool = False
    # ZeRO-3's overlapped parameter gathers and gradient reductions share one communicator, which runs one collective
    # at a time: the backward's gathers and reductions take turns on one stream (PyTorch FSDP, Megatron-FSDP).
    serial_zero3_collectives: bool = False
    # PyTorch FSDP2's per-parameter sharding (fully_shard; torchtitan): each ZeRO-3 all-gather lands in one flat buffer
    # that the compute stream then copies out into the layer's parameters, and each reduce-scatter first copies the
    # layer's gradients into one flat buffer in the reduce dtype on the compute stream (docs/parallelism.md, "FSDP2's copies").
    per_param_sharding: bool = False
    # Megatron-LM's pipeline scatter/gather: without sequence parallelism each TP rank sends 1/t of the replicated
    # activation and the next stage all-gathers it over its node's links (Narayanan et al. 2021 §4.1).
    p2p_scatter_gather: bool = False
    # HBM bytes the optimizer step moves per parameter (its passes over weights, gradients and state: the
    # framework presets count them, conf/train/*.yaml); 0: the update is not timed (PHAZE's step has none).
    update_bytes_per_param: float = 0.0
    # The framework's gradient buckets, in parameters of one rank's model chunk: each holds at least
    # grad_bucket_min_params and at least grad_bucket_params_per_rank per rank of the reduction group (Megatron-Core:
    # bucket_size = max(40M, 1M x dp x cp), "to ensure that chunks used in NCCL ring-reduce implementations are large
    # enough to remain bandwidth-bound rather than latency-bound"). A part smaller than a bucket pays its share of the
    # bucket's collective latency. Both 0: one collective per part (a layer: PyTorch FSDP's unit, XLA's).
    grad_bucket_min_params: int = 0
    grad_bucket_params_per_rank: int = 0

    def __post_init__(self) -> None:
        """The step's own rules: known choices, positive sizes, the dimensions' values, microbatches dividing the global
        batch and FP8's bf16 activations. What needs the model, the chip or a stage's tables: phaze.checks.train."""
        positive_ints(self.global_batch, "train.global_batch")
        choice(self.optimizer, "train.optimizer", Optimizer.values())
        choice(self.precision, "train.precision", Precision.values())
        if self.precision == Precision.fp8:
            choice(self.bytes_per_elem, "train.bytes_per_elem (FP8 training keeps bf16 weights and activations)", [2])
        if self.fp8_params:
            choice(self.precision, "train.precision (train.fp8_params=true keeps the weights in FP8)", [Precision.fp8.value])
        choice(self.recompute_granularity, "train.recompute_granularity", RecomputeGranularity.values())
        choice(self.step_model, "train.step_model", StepModel.values())
        choice(self.stage_layers, "train.stage_layers", StageLayers.values())
        if self.attention is not None:
            choice(self.attention, "train.attention", Attention.values())
        if self.selective_policy is not None:
            choice(self.selective_policy, "train.selective_policy", SelectivePolicy.values())
        recompute_options(self.recompute)
        positive(self.update_bytes_per_param, "train.update_bytes_per_param", allow_zero=True)
        positive(self.grad_bucket_min_params, "train.grad_bucket_min_params", allow_zero=True)
        positive(self.grad_bucket_params_per_rank, "train.grad_bucket_params_per_rank", allow_zero=True)
        zero_stages(self.zero, "train.zero")
        bools(self.sp, "train.sp")
        bools(self.tp_comm_overlap, "train.tp_comm_overlap")
        positive_ints(self.vp, "train.vp")
        positive_ints(self.cp, "train.cp")
        positive_ints(self.ep, "train.ep")
        if self.capacity_factor is not None:
            positive(self.capacity_factor, "train.capacity_factor", allow_zero=True)
        if self.moe_imbalance is not None and (isinstance(self.moe_imbalance, bool) or self.moe_imbalance < 1):
            raise ConfigError(f"train.moe_imbalance={self.moe_imbalance!r}: allowed values are numbers >= 1 (1: balanced routing)")
        for mbs in positive_ints(self.mbs, "train.mbs"):
            if self.global_batch % mbs:
                raise ConfigError(f"train.global_batch={self.global_batch}: must be a multiple of every train.mbs (here {mbs}), "
                                  "so that each data-parallel replica's batch splits into microbatches")
        positive_ints(list(self.tp_widths), "train.tp_widths", powers_of_two=True)


@dataclass
class PlacementCfg:
    """A fixed placement to evaluate; zeros (or null) mean "search it" over the train.* values."""

    dp: int = 0
    pp: int = 0
    # One TP width for every stage (a list, one per stage, is refused by name: phaze.checks.placement.check_placement).
    tp: Any = 0
    zero: Optional[int] = None  # 0..3
    sp: Optional[bool] = None
    vp: int = 0
    cp: int = 0
    tp_comm_overlap: Optional[bool] = None
    ep: int = 0
    # Transformer layers per pipeline stage (pp x vp entries with interleaving, chunks in order), for a fixed
    # placement; null: Megatron's even split (the first num_layers mod pp stages one layer more).
    layers_per_stage: Optional[List[int]] = None

    def __post_init__(self) -> None:
        """The placement's own rules: sizes >= 0 (0: search) and a ZeRO stage. What needs the model, the cluster or
        train.*: phaze.checks.placement, run as the plan space is built."""
        if self.zero is not None:
            zero_stages(self.zero, "placement.zero")
        for name in ("vp", "cp", "ep", "dp", "pp") + (() if isinstance(self.tp, (list, tuple)) else ("tp",)):
            positive(getattr(self, name), f"placement.{name}", allow_zero=True)
