"""What the placement DP reads: per-part costs of the layer chain for each (layer variant, TP width).

A layer variant is what changes the per-part operator graphs and their latencies: the microbatch
size, Megatron sequence parallelism, the context-parallel width, TP communication overlap and the
expert-parallel width.

The chain is pre-parts (embeddings), N transformer layers, post-parts (final norm, LM head, loss).
Every per-part number is for ONE device of a t-wide tensor-parallel group and ONE microbatch.

Pipeline sends (`boundary_s`): rank r of a stage sends its activation to rank r of the next stage, all
ranks at once over their own links, so a boundary costs one `p2p_s(output_bytes)` (PHAZE; with sequence
parallelism the activation is already a 1/t shard). Without sequence parallelism the activation is
replicated on the t ranks, and Megatron-LM's scatter/gather (`p2p_scatter_gather`, Narayanan et al. 2021
§4.1) sends a 1/t chunk from each rank and all-gathers it inside the receiving node instead.
When adjacent stages have different widths, receiving ranks read round-robin from the sending
ranks; the extra fan-out of a narrow stage feeding a wider one is not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from phaze.cost.network import Network
from phaze.placement.dp import TIMELINE_FLOW_SHOP, TIMELINE_OFF, TIMELINE_ONE_STREAM
from phaze.placement.memory import (
    ADAM_MOMENTS_BYTES_PER_PARAM, FP32_MASTER_BYTES_PER_PARAM, state_components, transient_part_copies,
)

PART_FIELDS = (
    "fwd_s", "bwd_s", "tp_comm_fwd_s", "tp_comm_bwd_s",
    "param_bytes", "saved_bytes", "input_bytes", "output_bytes",
)
"""Per-part arrays of a PlacementInput, each shaped [layer-variant index, TP-width index, part]."""
OPTIONAL_PART_FIELDS = ("core_fwd_s", "core_saved_bytes", "expert_param_bytes")
"""Per-part arrays (zeros when not given): for selective recompute, the attention core's forward time
and the activations it saves (Korthikanti et al. 2022 §5); the expert weights among param_bytes (a
mixture of experts: reduced and sharded over the expert-data-parallel group)."""


@dataclass
class PartCosts:
    """One part (pre, layer or post) for every (mbs, TP width): arrays shaped [len(mbs), len(tp)].

    fwd_s / bwd_s: scheduled latencies, TP communication included; tp_comm_*_s: the share of them
    spent in exposed TP communication (breakdown only); param_bytes: weights on one device; saved_bytes:
    activations one microbatch keeps for backward (inputs included); input_bytes / output_bytes:
    the activation entering / leaving the part (what a pipeline stage receives / sends);
    core_fwd_s / core_saved_bytes: the attention core's forward time and saved activations.
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    param_bytes: np.ndarray
    saved_bytes: np.ndarray
    input_bytes: np.ndarray
    output_bytes: np.ndarray
    tp_comm_fwd_s: np.ndarray | None = None
    tp_comm_bwd_s: np.ndarray | None = None
    core_fwd_s: np.ndarray | None = None
    core_saved_bytes: np.ndarray | None = None
    expert_param_bytes: np.ndarray | None = None

    def array(self, name: str) -> np.ndarray:
        value = getattr(self, name)
        if value is None:
            return np.zeros_like(np.asarray(self.fwd_s, dtype=np.float64))
        return np.asarray(value, dtype=np.float64)


@dataclass
class PlacementInput:
    """The layer chain's costs plus the cluster and training setup the DP places it on.

    Part arrays are float64 [V, T, n] for V layer variants (`mbs_values`, `sp_values`, `cp_values`,
    `overlap_values`: one entry per variant), T TP widths (`tp_values`, ascending, at most the model's
    max_tp) and n parts in chain order. A NaN in fwd_s marks a (variant, width) the upstream stages
    could not cost: that pair is skipped.
    """

    mbs_values: np.ndarray
    tp_values: np.ndarray
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    tp_comm_fwd_s: np.ndarray
    tp_comm_bwd_s: np.ndarray
    param_bytes: np.ndarray
    saved_bytes: np.ndarray
    input_bytes: np.ndarray
    output_bytes: np.ndarray
    num_pre: int
    """Parts before the first transformer layer (embeddings)."""
    num_layers: int
    """Transformer layers: parts num_pre .. num_pre + num_layers - 1."""
    devices: int
    global_batch: int
    """Sequences per training step."""
    seq_len: int
    hbm_bytes: float
    """HBM capacity of one device."""
    network: Network
    optimizer: str = "sgd"
    bytes_per_elem: int = 2
    model_flops_per_seq: float = 0.0
    """Model FLOPs of one training step per sequence (forward + backward), for MFU."""
    peak_flops_s: float = 0.0
    """Peak FLOP/s of one device in the GEMMs' precision (FP8 training: the FP8 peak, as NVIDIA quotes its MFU), for MFU."""
    part_names: tuple[str, ...] = field(default_factory=tuple)
    recompute_granularity: str = "layer"
    """train.recompute_granularity: "layer" = Megatron-LM per-layer checkpoints (every stage
    recomputes, the last included), "stage" = PHAZE's stage-input checkpoint (the last stage does not)."""
    sp_values: np.ndarray | None = None
    """Sequence parallelism of each variant (default: off)."""
    cp_values: np.ndarray | None = None
    """Context-parallel width of each variant (default: 1)."""
    overlap_values: np.ndarray | None = None
    """TP communication overlap of each variant (default: off)."""
    ep_values: np.ndarray | None = None
    """Expert-parallel width of each variant (default: 1)."""
    core_fwd_s: np.ndarray | None = None
    core_saved_bytes: np.ndarray | None = None
    expert_param_bytes: np.ndarray | None = None
    step_model: str = "phaze"
    """train.step_model (phaze.schema.choices.StepModel)."""
    overlap_grad_reduce: bool = False
    """The framework reduces gradients bucket by bucket under the backward (timeline step)."""
    overlap_param_gather: bool = False
    """The framework prefetches ZeRO parameter gathers under compute (timeline step)."""
    grad_bucket_min_params: int = 0
    grad_bucket_params_per_rank: int = 0
    """The framework's gradient buckets (train.grad_bucket_*): at least this many parameters, and this many per rank of
    the reduction group (0 and 0: one collective per part)."""
    serial_zero3_collectives: bool = False
    """ZeRO-3's overlapped gathers and reductions share one communicator, which runs one collective at a time (PyTorch
    FSDP, Megatron-FSDP by default): the backward's flow shop then has one communication stream (phaze.placement.dp)."""
    per_param_sharding: bool = False
    """FSDP2's per-parameter sharding: ZeRO-3's gathers and reductions copy the layer through a flat buffer on the
    compute stream (train.per_param_sharding; phaze.placement.stepcomm)."""
    grad_bytes_per_elem: int = 0
    """Bytes of one gradient element, kept and reduced (0: the training precision's bytes_per_elem)."""
    master_bytes_per_param: float = FP32_MASTER_BYTES_PER_PARAM
    """Bytes of Adam's master copy of a weight below fp32 (phaze.placement.memory.MASTER_BYTES_CHOICES)."""
    moment_bytes_per_param: float = ADAM_MOMENTS_BYTES_PER_PARAM
    """Bytes of Adam's two moments per weight (phaze.placement.memory.MOMENT_BYTES_CHOICES)."""
    weight_cache_bytes_per_param_byte: float = 0.0
    """Bytes kept beside each weight byte for the GEMMs (FP8 training's weight and transpose caches)."""
    weight_bytes_per_param_byte: float = 1.0
    """Bytes a device keeps, and a ZeRO gather moves, per byte of training-precision weights (FP8 weights: 0.5)."""
    p2p_scatter_gather: bool = False
    """Megatron-LM's pipeline scatter/gather of replicated activations (module docstring)."""
    update_bytes_per_param_byte: float = 0.0
    """HBM bytes the optimizer update moves per byte of weights (0: the update is not timed, as PHAZE)."""
    hbm_bytes_s: float = 0.0
    """Achievable HBM bandwidth of one device (the optimizer update streams through it)."""
    overlap_slowdown: float = 0.0
    """How much longer compute takes while a data-parallel collective runs beside it (hw.overlap_slowdown)."""

    def __post_init__(self) -> None:
        self.mbs_values = np.asarray(self.mbs_values, dtype=np.int64)
        self.tp_values = np.asarray(self.tp_values, dtype=np.int64)
        n_var = len(self.mbs_values)
        self.sp_values = np.zeros(n_var, np.bool_) if self.sp_values is None else np.asarray(self.sp_values, dtype=np.bool_)
        self.cp_values = np.ones(n_var, np.int64) if self.cp_values is None else np.asarray(self.cp_values, dtype=np.int64)
        self.overlap_values = np.zeros(n_var, np.bool_) if self.overlap_values is None else np.asarray(self.overlap_values, dtype=np.bool_)
        self.ep_values = np.ones(n_var, np.int64) if self.ep_values is None else np.asarray(self.ep_values, dtype=np.int64)
        # C-contiguous, as the Numba kernels see every chain (one compiled signature, phaze.kernels.warm_up)
        for name in PART_FIELDS:
            setattr(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.float64))
        for name in OPTIONAL_PART_FIELDS:
            value = getattr(self, name)
            setattr(self, name, np.zeros_like(self.fwd_s) if value is None else np.ascontiguousarray(value, dtype=np.float64))
        shape = (n_var, len(self.tp_values), self.num_parts)
        for values, name in ((self.sp_values, "sp_values"), (self.cp_values, "cp_values"), (self.overlap_values, "overlap_values"),
                             (self.ep_values, "ep_values")):
            if values.shape != (n_var,):
                raise ValueError(f"{name} has shape {values.shape}, expected ({n_var},): one entry per layer variant")
        if len(set(self.variant_list())) != n_var:
            raise ValueError(f"layer variants repeat: {self.variant_list()}")
        for name in PART_FIELDS + OPTIONAL_PART_FIELDS:
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, expected {shape}")
        if np.any(np.diff(self.tp_values) <= 0) or np.any(self.tp_values < 1):
            raise ValueError(f"tp_values must be positive and strictly ascending, got {self.tp_values}")
        if np.any(self.mbs_values < 1) or np.any(self.cp_values < 1) or np.any(self.ep_values < 1):
            raise ValueError(f"mbs_values, cp_values and ep_values must be positive, got {self.mbs_values}, {self.cp_values}, {self.ep_values}")
        ok = np.isfinite(self.fwd_s)
        for name in PART_FIELDS + OPTIONAL_PART_FIELDS:
            values = getattr(self, name)[ok]
            if np.any(~np.isfinite(values)) or np.any(values < 0):
                raise ValueError(f"{name} must be finite and non-negative where fwd_s is finite")
        if self.num_pre < 0 or self.num_layers < 0 or self.num_post < 0:
            raise ValueError(f"num_pre={self.num_pre}, num_layers={self.num_layers} do not fit {self.num_parts} parts")
        if np.any(self.core_saved_bytes[ok] > self.saved_bytes[ok]):
            raise ValueError("core_saved_bytes must not exceed saved_bytes")
        if np.any(self.expert_param_bytes[ok] > self.param_bytes[ok]):
            raise ValueError("expert_param_bytes must not exceed param_bytes")
        if self.devices < 1 or self.global_batch < 1 or self.hbm_bytes <= 0:
            raise ValueError("devices, global_batch and hbm_bytes must be positive")
        if not self.part_names:
            self.part_names = tuple(
                "pre" if p < self.num_pre else "post" if p >= self.num_pre + self.num_layers else f"layer{p - self.num_pre}"
                for p in range(self.num_parts)
            )

    @property
    def num_parts(self) -> int:
        return int(np.asarray(self.fwd_s).shape[-1])

    @property
    def num_post(self) -> int:
        return self.num_parts - self.num_pre - self.num_layers

    def state_mult(self, zero: int = 0, shards: int = 1) -> float:
        """Bytes of weights, gradients and optimizer state per byte of a device's weights (phaze.placement.memory)."""
        return sum(self.state_parts(zero, shards).values())

    def state_parts(self, zero: int = 0, shards: int = 1) -> dict[str, float]:
        """state_mult split into weights, weight caches, gradients and optimizer state (phaze.placement.memory)."""
        return state_components(self.optimizer, self.bytes_per_elem, zero, shards, self.grad_bytes_per_elem or None,
                                self.master_bytes_per_param, self.weight_cache_bytes_per_param_byte, self.moment_bytes_per_param,
                                self.weight_bytes_per_param_byte)

    def memory_param_bytes(self, prm: np.ndarray, expert: np.ndarray, zero: int, shards: int, ep: int) -> np.ndarray:
        """Weights as the memory formulas read them, state_mult(zero, shards) bytes each: the expert weights
        (`expert` of `prm`) weighted by their own state over their expert-data-parallel group of shards / ep."""
        if ep <= 1 or not np.any(expert):
            return prm
        return prm + expert * (self.state_mult(zero, shards // ep) / self.state_mult(zero, shards) - 1.0)

    @property
    def reduces_gradients(self) -> bool:
        """Whether a step ends with the data-parallel gradient reduction (not for inference: optimizer none)."""
        return self.optimizer != "none"

    @property
    def grad_bytes_per_param_byte(self) -> float:
        """Gradient bytes (what the data-parallel group reduces) per byte of weights."""
        return (self.grad_bytes_per_elem or self.bytes_per_elem) / self.bytes_per_elem

    def timeline_mode(self, zero: int) -> int:
        """The kernels' step model for ZeRO stage `zero` (phaze.placement.dp.TIMELINE_*)."""
        if self.step_model != "timeline":
            return TIMELINE_OFF
        one_stream = zero >= 3 and self.serial_zero3_collectives and self.overlap_param_gather
        return TIMELINE_ONE_STREAM if one_stream else TIMELINE_FLOW_SHOP

    def transient_copies(self, zero: int) -> float:
        """ZeRO's unsharded per-part buffers, in bytes per byte of the largest part's weights (phaze.placement.memory)."""
        return transient_part_copies(zero, self.grad_bytes_per_param_byte, self.weight_bytes_per_param_byte)

    def step_comm_options(self) -> dict:
        """The framework's precisions, overlaps and update cost that shape a step's timeline arrays
        (phaze.placement.stepcomm.step_arrays), whatever the plan."""
        return dict(grad_bytes_per_param_byte=self.grad_bytes_per_param_byte, gather_bytes_per_param_byte=self.weight_bytes_per_param_byte,
                    overlap_grad_reduce=self.overlap_grad_reduce,
                    overlap_param_gather=self.overlap_param_gather, update_bytes_per_param_byte=self.update_bytes_per_param_byte,
                    hbm_bytes_s=self.hbm_bytes_s, overlap_slowdown=self.overlap_slowdown, per_param_sharding=self.per_param_sharding,
                    bucket_min_bytes=float(self.grad_bucket_min_params * self.bytes_per_elem),
                    bucket_bytes_per_rank=float(self.grad_bucket_params_per_rank * self.bytes_per_elem))

    @property
    def per_layer_recompute(self) -> bool:
        """Whether recompute keeps every part's input (the kernels' `per_layer` flag)."""
        return self.recompute_granularity == "layer"

    def boundary_s(self, nbytes: np.ndarray, vi: int, widths: np.ndarray, same_node: bool) -> np.ndarray:
        """Time to send activations of `nbytes` [width, part] (one rank's copy) across a stage boundary."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        split = self.p2p_scatter_gather and not bool(self.sp_values[vi])
        if not split:
            return np.asarray(self.network.p2p_s(nbytes, same_node), dtype=np.float64).reshape(nbytes.shape)
        out = np.empty_like(nbytes)
        for wi, t in enumerate(np.asarray(widths, dtype=np.int64)):
            out[wi] = self.network.p2p_s(nbytes[wi] / t, same_node) + self.network.all_gather_s(nbytes[wi], int(t))
        return out

    def variant_list(self) -> list[tuple[int, bool, int, bool, int]]:
        """(mbs, sp, cp, tp_comm_overlap, ep) of each layer variant, in array order."""
        return [(int(b), bool(s), int(c), bool(o), int(e))
                for b, s, c, o, e in zip(self.mbs_values, self.sp_values, self.cp_values, self.overlap_values, self.ep_values)]

    def variant_index(self, mbs: int, sp: bool = False, cp: int = 1, tp_comm_overlap: bool = False, ep: int = 1) -> int | None:
        hits = np.nonzero((self.mbs_values == mbs) & (self.sp_values == bool(sp)) & (self.cp_values == cp)
                          & (self.overlap_values == bool(tp_comm_overlap)) & (self.ep_values == ep))[0]
        return int(hits[0]) if len(hits) else None

    def mbs_index(self, mbs: int) -> int | None:
        """The variant of PHAZE's space (no sp, cp 1, no overlap) with this microbatch size."""
        return self.variant_index(mbs)

    def tp_index(self, tp: int) -> int | None:
        hits = np.nonzero(self.tp_values == tp)[0]
        return int(hits[0]) if len(hits) else None

    def available(self, variant_idx: int, tp_idx: int) -> bool:
        """Whether every part has costs for this (variant, width) pair."""
        return bool(np.all(np.isfinite(self.fwd_s[variant_idx, tp_idx])))

    @classmethod
    def from_chain(cls, costs: dict[str, PartCosts], chain: Sequence[str], **setup) -> "PlacementInput":
        """The chain of parts `chain` names (one pre-part, the blocks, one post-part; a block part's costs repeat
        wherever it is named: a model's MoE and dense blocks); `setup` holds the remaining fields."""
        names = list(dict.fromkeys(chain))
        index = np.array([names.index(part) for part in chain])
        arrays = {name: np.stack([costs[part].array(name) for part in names], axis=-1)[..., index]
                  for name in PART_FIELDS + OPTIONAL_PART_FIELDS}
        return cls(**arrays, num_pre=1, num_layers=len(chain) - 2, **setup)

    @classmethod
    def from_parts(cls, pre: PartCosts, layer: PartCosts, post: PartCosts, num_layers: int, **setup) -> "PlacementInput":
        """The chain pre, `num_layers` copies of `layer`, post (from_chain with identical blocks)."""
        return cls.from_chain({"pre": pre, "layer": layer, "post": post}, ("pre", *("layer",) * num_layers, "post"), **setup)
