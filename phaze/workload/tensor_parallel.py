"""Megatron-LM tensor parallelism applied to a built model (Shoeybi et al. 2019, arXiv 1909.08053 §3),
with sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198 §4.2.2).

Column-parallel linears keep 1/t of their output features, row-parallel linears 1/t of their input
features; an all-reduce follows each row-parallel linear in forward ("reduce from" region) and its
mirror all-reduces the input gradient of each column-parallel block in backward ("copy to"
region). With sequence parallelism the regions between them (layer norms, dropouts, residual adds)
hold 1/t of the sequence: the all-reduce becomes a reduce-scatter along the sequence and the copy an
all-gather (the same volume). The collectives are real operators (`phaze::all_reduce`,
`phaze::all_gather`, `phaze::reduce_scatter`), so they appear in the traced forward and backward
graphs exactly where Megatron communicates; their arguments say the group size and how many devices
apart its members are (TP ranks are adjacent, context-parallel ranks a TP group apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from phaze.workload.graph import SEQ_DIM

@torch.library.custom_op("phaze::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """Sum over the `group_size` devices of a tensor-parallel group (one device: a copy)."""
    return x.clone()


@all_reduce.register_fake
def _all_reduce_fake(x: torch.Tensor, group_size: int) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("phaze::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, group_size: int, stride: int, dim: int, context: bool) -> torch.Tensor:
    """The slices of the `group_size` devices (members `stride` devices apart) concatenated along `dim`;
    `context`: the group is the context-parallel ranks (keys and values of ring attention), else a TP group."""
    return torch.cat([x] * group_size, dim=dim)


@all_gather.register_fake
def _all_gather_fake(x: torch.Tensor, group_size: int, stride: int, dim: int, context: bool) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] *= group_size
    return x.new_empty(shape)


@torch.library.custom_op("phaze::reduce_scatter", mutates_args=())
def reduce_scatter(x: torch.Tensor, group_size: int, stride: int, dim: int, context: bool) -> torch.Tensor:
    """This device's 1/group_size slice along `dim` of the sum over the group (one device: a copy)."""
    return x.narrow(dim, 0, x.shape[dim] // group_size).clone()


@reduce_scatter.register_fake
def _reduce_scatter_fake(x: torch.Tensor, group_size: int, stride: int, dim: int, context: bool) -> torch.Tensor:
    shape = list(x.shape)
    if shape[dim] % group_size:
        raise ValueError(f"reduce-scatter over {group_size} devices needs dimension {dim} ({shape[dim]}) divisible by it")
    shape[dim] //= group_size
    return x.new_empty(shape)


def _collective_context(ctx, inputs, output):
    ctx.args = inputs[1:]


all_gather.register_autograd(lambda ctx, grad: (reduce_scatter(grad, *ctx.args), None, None, None, None), setup_context=_collective_context)
reduce_scatter.register_autograd(lambda ctx, grad: (all_gather(grad, *ctx.args), None, None, None, None), setup_context=_collective_context)


def token_dim(x: torch.Tensor) -> int:
    """The token dimension: the sequence of [batch, sequence, hidden], the rows of a flattened [tokens, hidden]
    (OPT's MLP) or of heads-last [batch, sequence, heads, head_dim] keys and values."""
    return SEQ_DIM if x.dim() >= 3 else 0


def gather_sequence(x: torch.Tensor, group_size: int, stride: int = 1, context: bool = False) -> torch.Tensor:
    return all_gather(x, group_size, stride, token_dim(x), context)


def scatter_sequence(x: torch.Tensor, group_size: int, stride: int = 1, context: bool = False) -> torch.Tensor:
    return reduce_scatter(x, group_size, stride, token_dim(x), context)


def split_sequence(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """This device's slice of a replicated activation (Megatron's scatter_to_sequence_parallel_region: no communication)."""
    return x.narrow(token_dim(x), 0, x.shape[token_dim(x)] // group_size)


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce in forward, identity in backward: the output of a row-parallel linear."""

    @staticmethod
    def forward(ctx, x, group_size):
        return all_reduce(x, group_size)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _CopyToTP(torch.autograd.Function):
    """Identity in forward, all-reduce of the gradient in backward: the input of a column-parallel block."""

    @staticmethod
    def forward(ctx, x, group_size):
        ctx.group_size = group_size
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.group_size), None


def reduce_from_tp(x: torch.Tensor, group_size: int) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group_size)


def copy_to_tp(x: torch.Tensor, group_size: int) -> torch.Tensor:
    return _CopyToTP.apply(x, group_size)


@dataclass(frozen=True)
class TPPlan:
    """Where one family's block is split: dotted module paths relative to the block."""

    column: tuple[str, ...]
    """Linears whose output features are split (QKV, FC1 / gate / up); one the block sets to None is absent by
    its configuration and skipped (DeepSeek's q_proj when queries come from a latent, q_b_proj when not)."""
    row: tuple[str, ...]
    """Linears whose input features are split and whose output is all-reduced (out-proj, FC2 / down)."""
    copy_to: tuple[str, ...]
    """Modules whose input is the shared input of a column-parallel group (gradient all-reduce)."""
    head_attrs: tuple[tuple[str, str], ...] = ()
    """(module path, attribute) integers that count heads or feature widths per device: divided by t."""
    attention: str = ""
    """The attention module (its keys and values are gathered under context parallelism)."""
    partial_row: tuple[str, ...] = ()
    """Linears whose input features are split and whose partial output is reduced further on (a shared
    expert's down projection, summed with the routed experts before the block's one reduction)."""
    reduce_out: tuple[str, ...] = ()
    """Modules whose output is a partial sum over the TP group, reduced as a row-parallel linear's is
    (a mixture-of-experts block: its experts keep 1/t of their FFN width)."""
    experts: str = ""
    """The fused-weight experts module of a mixture-of-experts block (phaze.workload.experts)."""


def _split_linear(module: nn.Module, t: int, dim: str) -> nn.Module:
    """A copy of a Linear (or GPT-2 Conv1D) with its `dim` ("out" or "in") features divided by t."""
    weight = module.weight
    is_conv1d = type(module).__name__ == "Conv1D"  # GPT-2's transposed linear: weight is [in, out]
    in_f, out_f = (weight.shape[0], weight.shape[1]) if is_conv1d else (weight.shape[1], weight.shape[0])
    if dim == "out":
        out_f = _divide(out_f, t, "output features")
    else:
        in_f = _divide(in_f, t, "input features")
    has_bias = getattr(module, "bias", None) is not None
    with torch.device(weight.device):
        if is_conv1d:
            new = type(module)(out_f, in_f)
            if not has_bias:
                new.bias = None
        else:
            new = nn.Linear(in_f, out_f, bias=has_bias)
    return new.to(weight.dtype)


def _divide(n: int, t: int, what: str) -> int:
    if n % t:
        raise ValueError(f"tensor-parallel width {t} does not divide {what} ({n})")
    return n // t


def vocab_shard(vocab_size: int, t: int) -> int:
    """Rows of a vocab-parallel embedding / LM head on one device: the vocabulary padded to a multiple of t."""
    return -(-vocab_size // t)


def set_submodule(root: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, name, new)


def shard_block(block: nn.Module, plan: TPPlan, t: int, sp: bool = False) -> None:
    """Turn a transformer block into the slice one device of a t-wide TP group holds, with its collectives
    (with `sp`, the sequence-parallel ones)."""
    if t == 1:
        return
    for path in plan.column:
        parent, _, name = path.rpartition(".")
        if getattr(block.get_submodule(parent) if parent else block, name) is not None:
            set_submodule(block, path, _split_linear(block.get_submodule(path), t, "out"))
    reduce = (lambda x: scatter_sequence(x, t)) if sp else (lambda x: reduce_from_tp(x, t))
    for path in plan.row + plan.partial_row:
        new = _split_linear(block.get_submodule(path), t, "in")
        if path in plan.row:
            new.register_forward_hook(lambda mod, args, out: reduce(out))
        set_submodule(block, path, new)
    for path in plan.reduce_out:
        block.get_submodule(path).register_forward_hook(lambda mod, args, out: reduce(out))
    copy = (lambda x: gather_sequence(x, t)) if sp else (lambda x: copy_to_tp(x, t))
    for path in plan.copy_to:
        block.get_submodule(path).register_forward_pre_hook(input_hook(copy), with_kwargs=True)
    for path, attr in plan.head_attrs:
        mod = block.get_submodule(path)
        setattr(mod, attr, _divide(getattr(mod, attr), t, f"{path}.{attr}"))


def input_hook(fn):
    """Pre-hook that routes a module's hidden-state input (first positional or `hidden_states`) through fn."""

    def hook(module, args, kwargs):
        if args:
            return (fn(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": fn(kwargs["hidden_states"])}

    return hook


def shard_vocab_embedding(emb: nn.Embedding, t: int) -> nn.Embedding:
    """Vocab-parallel embedding: 1/t of the rows per device, partial lookups summed by an all-reduce."""
    with torch.device(emb.weight.device):
        new = nn.Embedding(vocab_shard(emb.num_embeddings, t), emb.embedding_dim).to(emb.weight.dtype)
    if t > 1:
        new.register_forward_hook(lambda mod, args, out: reduce_from_tp(out, t))
    return new


def shard_vocab_head(head: nn.Linear, t: int, sp: bool = False) -> nn.Linear:
    """Vocab-parallel LM head: column-parallel over the vocabulary; its input gradient is all-reduced
    (with `sp`: its sequence-parallel input is all-gathered, the gradient reduce-scattered)."""
    has_bias = head.bias is not None
    with torch.device(head.weight.device):
        new = nn.Linear(head.in_features, vocab_shard(head.out_features, t), bias=has_bias).to(head.weight.dtype)
    if t > 1:
        copy = gather_sequence if sp else copy_to_tp
        new.register_forward_pre_hook(lambda mod, args: (copy(args[0], t),))
    return new


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy as log-softmax and a gather.

    Same value as `nn.functional.cross_entropy`, written out because AOTAutograd on meta tensors
    drops the autograd of aten::nll_loss (it warns and returns an empty backward graph).
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -log_probs.gather(-1, labels.unsqueeze(-1)).mean()


def vocab_parallel_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, t: int) -> torch.Tensor:
    """Mean cross-entropy over a vocab-sharded logits tensor (Megatron's vocab-parallel loss).

    Three all-reduces over [tokens] tensors in forward (max, sum of exponentials, target logit);
    the backward (softmax minus one-hot) needs no communication.
    """
    logits = logits.float()
    if t == 1:
        return cross_entropy(logits, labels)
    shard = logits.shape[-1]
    global_max = reduce_from_tp(logits.amax(dim=-1).detach(), t)
    shifted = logits - global_max.unsqueeze(-1)
    sum_exp = reduce_from_tp(shifted.exp().sum(dim=-1), t)
    local = labels.remainder(shard)
    in_shard = (labels >= 0) & (labels < shard)
    target = reduce_from_tp(shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1) * in_shard, t)
    return (sum_exp.log() - target).mean()
