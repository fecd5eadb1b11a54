"""What each traced aten operator is: its kind (which unit runs it) and its FLOPs.

Matmul FLOPs are 2 per multiply-add (the convention of torch.utils.flop_counter and of the
closed forms in Kaplan et al. 2020); every vector operator is counted as one operation per
output element, its cost being set by the cost stage from element counts and bytes.
"""

from __future__ import annotations

import math

import torch

MATMUL = {"mm", "bmm", "addmm", "baddbmm"}
SOFTMAX = {"_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data"}
NORM = {"native_layer_norm", "native_layer_norm_backward", "phaze.rms_norm", "phaze.rms_norm_backward"}
EMBEDDING = {"embedding", "embedding_dense_backward"}
LOSS = {"nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"}
REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "var", "var_mean", "std", "argmax", "logsumexp", "prod", "cumsum"}
COLLECTIVE = {"phaze.all_reduce", "phaze.all_gather", "phaze.reduce_scatter", "phaze.all_to_all"}
VIEW = {
    # Aliases and metadata-only reshapes: no data moves.
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "unsqueeze",
    "squeeze", "slice", "select", "alias", "detach", "as_strided", "split", "split_with_sizes", "unbind",
    "diagonal", "view_as", "lift_fresh_copy", "getitem",
    # Factories of constants (masks, positions): built once, not per-layer work.
    "arange", "full", "zeros", "ones", "empty", "scalar_tensor", "new_zeros", "new_ones", "new_empty",
    "new_full", "zeros_like", "ones_like", "empty_like", "full_like", "_local_scalar_dense", "sym_size",
    # Markers of the attention core's edges (phaze.workload.attention.attention_core): identities.
    "phaze.attention_core",
}


GATHERS = {"embedding", "gather", "index_select"}
"""Lookups: their first argument is a table of which only the gathered rows are read."""


def op_name(target) -> str:
    """Short operator name: the aten overload packet ("mm", "add"), or "ns.op" outside aten."""
    if isinstance(target, torch._ops.OpOverload):
        ns = target.namespace
        base = target._overloadpacket.__name__
        return base if ns == "aten" else f"{ns}.{base}"
    return getattr(target, "__name__", str(target))


def kind_of(name: str) -> str:
    for kind, names in (
        ("matmul", MATMUL), ("softmax", SOFTMAX), ("norm", NORM), ("embedding", EMBEDDING), ("loss", LOSS),
        ("reduction", REDUCTION), ("collective", COLLECTIVE), ("view", VIEW),
    ):
        if name in names:
            return kind
    return "elementwise"


def matmul_dims(name: str, in_shapes: list[tuple[int, ...]]) -> tuple[int, int, int, int]:
    """(b, m, k, n) of C[b, m, n] = A[b, m, k] @ B[b, k, n] for mm / bmm / addmm / baddbmm."""
    a, b = (in_shapes[1], in_shapes[2]) if name in ("addmm", "baddbmm") else (in_shapes[0], in_shapes[1])
    if len(a) == 2:
        return 1, a[0], a[1], b[1]
    return a[0], a[1], a[2], b[2]


def tensors_of(value) -> list[torch.Tensor]:
    """The tensors in a node's value (a tensor, or a tuple such as native_layer_norm's outputs)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def nbytes(t: torch.Tensor) -> int:
    return math.prod(t.shape) * t.element_size()


def flops_of(kind: str, numel_out: int, dims: tuple[int, int, int, int]) -> float:
    if kind == "matmul":
        b, m, k, n = dims
        return 2.0 * b * m * k * n
    if kind in ("view", "collective"):
        return 0.0
    return float(numel_out)
