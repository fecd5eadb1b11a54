"""The workload stage's output: operator tables per layer part, direction and tensor-parallel width.

Every downstream stage (cost, schedule, placement) reads only these dataclasses and frames.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

SEQ_DIM = 1
"""The sequence dimension of [batch, sequence, hidden] activations."""

PARTS = ("pre", "layer", "post")
"""pre: embeddings; layer: the repeated transformer block; post: final norm, LM head and loss."""
DENSE = "dense"
"""The dense blocks of a mixture of experts whose layer pattern has some (DeepSeek's leading dense layers): a part
of their own, traced once beside the MoE block ("layer")."""
BLOCK_PARTS = ("layer", DENSE)
"""Parts that are transformer blocks (what pipeline stages split, recompute and run in FP8)."""

KINDS = ("matmul", "elementwise", "reduction", "softmax", "norm", "embedding", "loss", "collective", "view")
"""Operator kinds. matmul runs on tensor cores, collective on the network, view costs nothing,
every other kind runs on vector cores."""

OP_COLUMNS = (
    "op_id", "name", "target", "kind", "out_shape", "in_shapes", "numel_out", "flops",
    "bytes_read", "bytes_written", "param_bytes", "saved_bytes",
    "mm_b", "mm_m", "mm_k", "mm_n", "comm_bytes", "comm_group", "comm_stride", "comm_context", "elem_bytes", "fused", "core",
)
NO_TRAFFIC = {"param_bytes": 0.0, "saved_bytes": 0.0, "comm_bytes": 0.0, "comm_group": 0, "comm_stride": 0,
              "comm_context": False, "core": False}
"""The OP_COLUMNS values of an operator with no parameters, nothing saved for backward, no collective and no
attention core: what the extraction writes before filling in an operator's own, and what a hand-made row takes."""
EDGE_COLUMNS = ("src", "dst", "bytes")


class DerivedOnce:
    """A frozen graph's values derived once (functools.cached_property, named with a leading underscore) stay out of
    its pickle: a cached workload's bytes do not depend on what was computed from it."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


@dataclass(frozen=True)
class OpGraph(DerivedOnce):
    """A DAG of operators for one direction of one part.

    `ops` has OP_COLUMNS, one row per operator, `op_id` = 0..n-1 in a topological order. For a
    matmul, (mm_b, mm_m, mm_k, mm_n) is C[b, m, n] = A[b, m, k] @ B[b, k, n]; zeros otherwise.
    `comm_bytes` is the size of the whole tensor a collective reduces or gathers, over `comm_group`
    devices `comm_stride` apart (a TP group: adjacent; a context-parallel group, `comm_context`: a TP group apart);
    `saved_bytes` (forward only) the bytes of
    the op's output kept for the backward pass; `elem_bytes` the size of one element it computes.
    `fused` marks a step inside a fused kernel (FlashAttention): its operands stay on chip, so its
    own bytes_read / bytes_written are all the memory traffic it causes. `core` marks the attention
    core (forward only), which selective recompute runs again. `edges` (src, dst, bytes) are data dependencies.
    """

    ops: pd.DataFrame
    edges: pd.DataFrame

    def __len__(self) -> int:
        return len(self.ops)

    def kind_counts(self) -> dict[str, int]:
        return self.ops["kind"].value_counts().to_dict()

    def total(self, column: str, kind: str | None = None) -> float:
        ops = self.ops if kind is None else self.ops[self.ops["kind"] == kind]
        return float(ops[column].sum())

    def without_views(self) -> "OpGraph":
        """The same DAG with zero-cost `view` operators removed and their dependencies kept.

        An edge a -> view -> b becomes a -> b, so schedulers see only operators that take time. Computed once per
        graph: a search costs the same layer graph on every point it evaluates.
        """
        return self._view_free

    @cached_property
    def _view_free(self) -> "OpGraph":
        keep = self.ops["kind"].to_numpy() != "view"
        ids = self.ops["op_id"].to_numpy()
        preds: dict[int, set[int]] = {int(i): set() for i in ids}
        for s, d in zip(self.edges["src"].to_numpy(), self.edges["dst"].to_numpy()):
            preds[int(d)].add(int(s))
        kept_preds: dict[int, set[int]] = {}
        is_kept = dict(zip(ids.tolist(), keep.tolist()))
        for i in ids.tolist():  # topological order: predecessors are resolved first
            resolved: set[int] = set()
            for p in preds[i]:
                resolved |= {p} if is_kept[p] else kept_preds[p]
            kept_preds[i] = resolved
        new_id = {old: new for new, old in enumerate(ids[keep].tolist())}
        ops = self.ops[keep].copy()
        ops["op_id"] = np.arange(len(ops))
        edge_bytes = {(int(s), int(d)): float(b) for s, d, b in self.edges[list(EDGE_COLUMNS)].itertuples(index=False)}
        rows = []
        for d in ids[keep].tolist():
            for s in sorted(kept_preds[d]):
                rows.append((new_id[s], new_id[d], edge_bytes.get((s, d), 0.0)))
        edges = pd.DataFrame(rows, columns=list(EDGE_COLUMNS))
        return OpGraph(ops.reset_index(drop=True), edges)


@dataclass(frozen=True)
class LayerGraph(DerivedOnce):
    """One part of the model on one device of a tensor-parallel group of width `tp`."""

    part: str
    tp: int
    mbs: int
    seq_len: int
    fwd: OpGraph
    bwd: OpGraph
    param_bytes: float
    """Parameters held by one device of the TP group (tied embeddings counted in each part using them)."""
    saved_bytes: float
    """Activation bytes one microbatch keeps from forward to backward on one device (inputs included)."""
    input_bytes: float
    """Activation bytes entering the part for one microbatch: what a pipeline stage receives."""
    output_bytes: float
    """Activation bytes leaving the part for one microbatch: what a pipeline stage sends."""
    core_saved_bytes: float = 0.0
    """The part of saved_bytes the attention core keeps internally (scores, softmax, dropout): what
    selective recompute does not store."""
    expert_param_bytes: float = 0.0
    """The part of param_bytes that is expert weights (reduced over the expert-data-parallel group)."""

    def matmul_flops(self) -> float:
        return self._matmul_flops

    @cached_property
    def _matmul_flops(self) -> float:
        """Forward and backward matmul FLOPs, summed once: the placement input of every point reads them."""
        return self.fwd.total("flops", "matmul") + self.bwd.total("flops", "matmul")

    def n_collectives(self) -> tuple[int, int]:
        """(forward, backward) number of collective operators."""
        return (int((self.fwd.ops["kind"] == "collective").sum()), int((self.bwd.ops["kind"] == "collective").sum()))


@dataclass(frozen=True)
class Shard:
    """How one device's slice of the model is cut: TP width, sequence parallelism, context-parallel width,
    expert-parallel width."""

    tp: int = 1
    sp: bool = False
    cp: int = 1
    ep: int = 1

    def canonical(self) -> "Shard":
        """Sequence parallelism at TP width 1 is no parallelism: the same graphs as without it."""
        return Shard(self.tp, self.sp and self.tp > 1, self.cp, self.ep)

    @property
    def seq_split(self) -> int:
        """Into how many pieces the sequence entering a block is cut on one device."""
        return self.cp * (self.tp if self.sp and self.tp > 1 else 1)


@dataclass(frozen=True)
class Workload:
    """The extracted training step of one model at one microbatch size, for every TP width."""

    model_name: str
    num_layers: int
    seq_len: int
    mbs: int
    bytes_per_elem: int
    params: int
    """Unique parameters of the whole model as built (tied weights counted once)."""
    graphs: dict[Shard, dict[str, LayerGraph]] = field(default_factory=dict)
    """Shard (tp, sp, cp, ep; canonical) -> part ("pre", "layer", "post" and, with dense blocks, DENSE) -> graph."""
    active_params: int = 0
    """Parameters one token passes through (a mixture of experts: its k routed experts; else all of them)."""
    block_parts: tuple[str, ...] = ()
    """The part of each of the num_layers blocks in chain order ("layer" or DENSE); empty: every block is "layer"."""

    @property
    def tp_widths(self) -> list[int]:
        return sorted({s.tp for s in self.graphs})

    @property
    def blocks(self) -> tuple[str, ...]:
        """The part of each block in chain order."""
        return self.block_parts or ("layer",) * self.num_layers

    @property
    def parts(self) -> tuple[str, ...]:
        """The distinct parts of the chain: pre, the block parts, post."""
        return tuple(self.part_counts)

    @property
    def part_counts(self) -> dict[str, int]:
        """How many times each part appears in the chain, in chain order (pre 1, each block part its blocks, post 1)."""
        return dict(Counter(self.chain))

    @property
    def chain(self) -> tuple[str, ...]:
        """The part at each position of the chain: pre, one per block, post."""
        return ("pre", *self.blocks, "post")

    def has(self, tp: int, sp: bool = False, cp: int = 1, ep: int = 1) -> bool:
        return Shard(tp, sp, cp, ep).canonical() in self.graphs

    def part(self, tp: int, part: str, sp: bool = False, cp: int = 1, ep: int = 1) -> LayerGraph:
        return self.graphs[Shard(tp, sp, cp, ep).canonical()][part]

    def with_parts(self, convert) -> "Workload":
        """The workload with `convert` applied to every part of every shard (LayerGraph -> LayerGraph)."""
        return replace(self, graphs={shard: {name: convert(layer) for name, layer in parts.items()}
                                     for shard, parts in self.graphs.items()})

    def train_matmul_flops_per_seq(self, tp: int | None = None) -> float:
        """Matmul FLOPs of one training step (fwd + bwd) per sequence, summed over all devices of a TP (and
        context-parallel) group: from the shard without sequence or context parallelism at width `tp` when
        extracted, else from the first shard (the total does not depend on how it is cut)."""
        shard = Shard(tp) if tp is not None and Shard(tp) in self.graphs else next(iter(self.graphs))
        g = self.graphs[shard]
        per_mb = sum(g[part].matmul_flops() for part in self.chain)
        return per_mb * shard.tp * shard.cp / self.mbs
