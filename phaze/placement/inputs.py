"""What the placement DP reads: per-part costs of the layer chain for each (microbatch, TP width).

The chain is pre-parts (embeddings), N transformer layers, post-parts (final norm, LM head, loss).
Every per-part number is for ONE device of a t-wide tensor-parallel group and ONE microbatch.

Pipeline sends: Megatron-LM without scatter-gather. The activation at a stage boundary is
replicated on every TP rank; rank r of a stage sends the whole activation to rank r of the next
stage, all ranks at once over their own links, so a boundary costs one `p2p_s(output_bytes)`.
When adjacent stages have different widths, receiving ranks read round-robin from the sending
ranks; the extra fan-out of a narrow stage feeding a wider one is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from phaze.cost.network import Network

OPTIMIZERS = ("sgd", "adam")
RECOMPUTE_GRANULARITIES = ("layer", "stage")
"""Checkpoints kept under recompute: each part's input (Megatron-LM) or the stage input (PHAZE)."""

PART_FIELDS = (
    "fwd_s", "bwd_s", "tp_comm_fwd_s", "tp_comm_bwd_s",
    "param_bytes", "saved_bytes", "input_bytes", "output_bytes",
)
"""Per-part arrays of a PlacementInput, each shaped [mbs index, TP-width index, part]."""


@dataclass
class PartCosts:
    """One part (pre, layer or post) for every (mbs, TP width): arrays shaped [len(mbs), len(tp)].

    fwd_s / bwd_s: scheduled latencies, TP all-reduces included; tp_comm_*_s: the share of them
    spent in TP all-reduces (breakdown only); param_bytes: weights on one device; saved_bytes:
    activations one microbatch keeps for backward (inputs included); input_bytes / output_bytes:
    the activation entering / leaving the part (what a pipeline stage receives / sends).
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    param_bytes: np.ndarray
    saved_bytes: np.ndarray
    input_bytes: np.ndarray
    output_bytes: np.ndarray
    tp_comm_fwd_s: np.ndarray | None = None
    tp_comm_bwd_s: np.ndarray | None = None

    def array(self, name: str) -> np.ndarray:
        value = getattr(self, name)
        if value is None:
            return np.zeros_like(np.asarray(self.fwd_s, dtype=np.float64))
        return np.asarray(value, dtype=np.float64)


@dataclass
class PlacementInput:
    """The layer chain's costs plus the cluster and training setup the DP places it on.

    Part arrays are float64 [M, T, n] for M microbatch sizes (`mbs_values`), T TP widths
    (`tp_values`, ascending, at most the model's max_tp) and n parts in chain order. A NaN in
    fwd_s marks an (mbs, width) the upstream stages could not cost: that pair is skipped.
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
    """Peak FLOP/s of one device, for MFU."""
    part_names: tuple[str, ...] = field(default_factory=tuple)
    recompute_granularity: str = "layer"
    """train.recompute_granularity: "layer" = Megatron-LM per-layer checkpoints (every stage
    recomputes, the last included), "stage" = PHAZE's stage-input checkpoint (the last stage does not)."""

    def __post_init__(self) -> None:
        self.mbs_values = np.asarray(self.mbs_values, dtype=np.int64)
        self.tp_values = np.asarray(self.tp_values, dtype=np.int64)
        for name in PART_FIELDS:
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        shape = (len(self.mbs_values), len(self.tp_values), self.num_parts)
        for name in PART_FIELDS:
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, expected {shape}")
        if np.any(np.diff(self.tp_values) <= 0) or np.any(self.tp_values < 1):
            raise ValueError(f"tp_values must be positive and strictly ascending, got {self.tp_values}")
        if np.any(self.mbs_values < 1):
            raise ValueError(f"mbs_values must be positive, got {self.mbs_values}")
        ok = np.isfinite(self.fwd_s)
        for name in PART_FIELDS:
            values = getattr(self, name)[ok]
            if np.any(~np.isfinite(values)) or np.any(values < 0):
                raise ValueError(f"{name} must be finite and non-negative where fwd_s is finite")
        if self.num_pre < 0 or self.num_layers < 0 or self.num_post < 0:
            raise ValueError(f"num_pre={self.num_pre}, num_layers={self.num_layers} do not fit {self.num_parts} parts")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.recompute_granularity not in RECOMPUTE_GRANULARITIES:
            raise ValueError(
                f"train.recompute_granularity must be one of {RECOMPUTE_GRANULARITIES}, got {self.recompute_granularity!r}"
            )
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

    @property
    def per_layer_recompute(self) -> bool:
        """Whether recompute keeps every part's input (the kernels' `per_layer` flag)."""
        return self.recompute_granularity == "layer"

    def mbs_index(self, mbs: int) -> int | None:
        hits = np.nonzero(self.mbs_values == mbs)[0]
        return int(hits[0]) if len(hits) else None

    def tp_index(self, tp: int) -> int | None:
        hits = np.nonzero(self.tp_values == tp)[0]
        return int(hits[0]) if len(hits) else None

    def available(self, mbs_idx: int, tp_idx: int) -> bool:
        """Whether every part has costs for this (mbs, width) pair."""
        return bool(np.all(np.isfinite(self.fwd_s[mbs_idx, tp_idx])))

    @classmethod
    def from_parts(cls, pre: PartCosts, layer: PartCosts, post: PartCosts, num_layers: int, **setup) -> "PlacementInput":
        """The chain pre, `num_layers` copies of `layer`, post; `setup` holds the remaining fields."""
        arrays = {}
        for name in PART_FIELDS:
            p, l, q = pre.array(name), layer.array(name), post.array(name)
            arrays[name] = np.concatenate(
                [p[..., None], np.repeat(l[..., None], num_layers, axis=-1), q[..., None]], axis=-1
            )
        return cls(**arrays, num_pre=1, num_layers=num_layers, **setup)
