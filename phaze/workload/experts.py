"""Mixture-of-experts layers traced under a stated routing assumption, with expert parallelism.

Routing is data-dependent, so a trace on `meta` tensors cannot say which expert gets which token.
Our experts function (registered with Hugging Face's ExpertsInterface, as FlashAttention is with its
AttentionInterface) keeps the model's own router and expert weights and replaces the token loop by
what a dropless or capacity-limited grouped-GEMM layer runs (Megatron-Core's MoE layer; Gale et al.
2023, MegaBlocks, arXiv 2211.15841; Fedus et al. 2021, Switch, arXiv 2101.03961 §2.1):
- permutation: the k copies of each token sorted by expert (a gather of T·k rows);
- dispatch: an all-to-all over the `ep` ranks of the expert-parallel group (`phaze::all_to_all`; none
  when ep = 1, where the rows are only padded to capacity);
  with a TP group of t (expert tensor parallelism = TP, Megatron-Core's default), each TP rank
  dispatches its 1/t of the rows and the ranks then all-gather what they received;
- regrouping: with ep > 1 and more than one local expert, the rows arrive grouped by the rank that sent
  them and are regrouped by local expert for the grouped GEMM, and back before the combine (a gather of
  every received row each way; Megatron-Core's all-to-all dispatcher, `sort_chunks_by_idxs`);
- the grouped expert GEMMs: one batched matmul over the E/ep local experts, each with `rows` tokens
  and 1/t of its FFN width;
- combine: a reduce-scatter over the TP group (t > 1), the reverse all-to-all, then the rows weighted
  by their routing probabilities and added into their tokens (an index-add); each TP rank then holds
  its rows' outputs, which the block's TP reduction sums as it sums a row-parallel linear's.
`rows` follows the routing assumption (`expert_rows`): balanced by default (every expert gets its
share T·k·ep/E of the tokens its EP group routes), times the capacity factor when tokens are padded
to capacity, or times an imbalance factor for the busiest device of a dropless layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from phaze.workload.tensor_parallel import all_gather, reduce_scatter

HF_EXPERTS_NAME = "phaze_routed"
"""Our experts function's name in Hugging Face's ExpertsInterface."""
ROUTING_ATTR = "_phaze_routing"
"""Attribute of an experts module holding its Routing."""
ALL_TO_ALL = "phaze.all_to_all"


@torch.library.custom_op("phaze::all_to_all", mutates_args=())
def all_to_all(x: torch.Tensor, group_size: int, stride: int, out_rows: int) -> torch.Tensor:
    """Rows of x sent to the `group_size` devices of an expert-parallel group (members `stride` devices
    apart), `out_rows` rows received: the dispatch or combine of an MoE layer (one device: a local copy)."""
    return x.new_zeros((out_rows, *x.shape[1:]))


@all_to_all.register_fake
def _all_to_all_fake(x: torch.Tensor, group_size: int, stride: int, out_rows: int) -> torch.Tensor:
    return x.new_empty((out_rows, *x.shape[1:]))


def _all_to_all_context(ctx, inputs, output):
    ctx.group, ctx.stride, ctx.rows = inputs[1], inputs[2], inputs[0].shape[0]


all_to_all.register_autograd(lambda ctx, grad: (all_to_all(grad, ctx.group, ctx.stride, ctx.rows), None, None, None),
                             setup_context=_all_to_all_context)


@dataclass(frozen=True)
class Routing:
    """How one device's experts are reached: the expert-parallel group and the routing assumption."""

    ep: int = 1
    """Expert-parallel ranks: each holds num_experts / ep experts."""
    tp: int = 1
    """Tensor-parallel ranks sharing each expert (1/tp of its FFN width each)."""
    stride: int = 1
    """Devices between members of the EP group (Megatron-Core orders ranks tp, cp, ep, dp, pp: t x cp)."""
    capacity_factor: float = 0.0
    """0: dropless; > 0: every expert padded (or cut) to capacity_factor x its balanced share."""
    imbalance: float = 1.0
    """Dropless only: the busiest device's tokens over the balanced share (1: balanced routing)."""


def expert_rows(tokens: int, experts_per_token: int, num_experts: int, routing: Routing) -> int:
    """Tokens one local expert computes on the busiest device: its balanced share of the T·k token copies
    its EP group routes (T·k·ep / E), times the capacity factor (padded to capacity) or the imbalance."""
    share = tokens * experts_per_token * routing.ep / num_experts
    factor = routing.capacity_factor if routing.capacity_factor > 0 else routing.imbalance
    return max(1, math.ceil(share * factor - 1e-9))


def _regrouped(x: torch.Tensor, routing: Routing, local: int) -> torch.Tensor:
    """The received rows reordered between source-rank and local-expert order (a gather of every row) when rows from
    ep > 1 ranks arrive for more than one local expert; else x itself."""
    if routing.ep > 1 and local > 1:
        return x.index_select(0, torch.arange(x.shape[0], device=x.device))
    return x


def _exchange(x: torch.Tensor, routing: Routing, rows: int) -> torch.Tensor:
    """An all-to-all over the EP group; on one rank (ep = 1) no exchange, only the padding (or cut) to `rows`."""
    if routing.ep > 1:
        return all_to_all(x, routing.ep, routing.stride, rows)
    if rows == x.shape[0]:
        return x
    if rows > x.shape[0]:
        return torch.nn.functional.pad(x, (0, 0, 0, rows - x.shape[0]))
    return x.narrow(0, 0, rows)


def routed_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """The experts of one device under its Routing (module docstring), for Hugging Face's fused-weight experts
    (gate_up_proj [E, 2f, h] or up_proj [E, f, h], down_proj [E, h, f]): output [T, h]."""
    routing: Routing = getattr(self, ROUTING_ATTR, Routing())
    tokens, hidden = hidden_states.shape
    k, t = top_k_index.shape[-1], routing.tp
    if tokens % t:
        raise ValueError(f"{tokens} tokens do not split over a TP group of {t}")
    local = self.down_proj.shape[0]
    rows = expert_rows(tokens // t, k, local * routing.ep, routing)
    mine = tokens * k // t
    order = top_k_index.reshape(-1).argsort().narrow(0, 0, mine)
    token_of = torch.div(order, k, rounding_mode="floor")
    x = _regrouped(_exchange(hidden_states.index_select(0, token_of), routing, local * rows), routing, local)
    if t > 1:
        x = all_gather(x, t, 1, 0, False)
    up = self.gate_up_proj if self.has_gate else self.up_proj
    y = torch.bmm(x.view(local, rows * t, hidden), up.transpose(1, 2))
    y = self._apply_gate(y) if self.has_gate else self.act_fn(y)
    y = torch.bmm(y, self.down_proj.transpose(1, 2)).reshape(local * rows * t, hidden)
    if t > 1:
        y = reduce_scatter(y, t, 1, 0, False)
    y = _exchange(_regrouped(y, routing, local), routing, mine)
    y = y * top_k_weights.reshape(-1).index_select(0, order).unsqueeze(-1).to(y.dtype)
    return hidden_states.new_zeros(tokens, hidden).index_add(0, token_of, y)


def register_experts() -> None:
    """Make `config._experts_implementation = HF_EXPERTS_NAME` select routed_experts_forward (idempotent)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(HF_EXPERTS_NAME, routed_experts_forward)


def shard_experts(experts: torch.nn.Module, ep: int, tp: int, routing: Routing) -> None:
    """One device's slice of a fused-weight experts module: num_experts / ep experts, each with 1/tp of its
    FFN width (expert tensor parallelism = the TP width, Megatron-Core's default), and its Routing."""
    num_experts = experts.down_proj.shape[0]
    ffn = experts.down_proj.shape[2]
    if ffn % tp:
        raise ValueError(f"tensor-parallel width {tp} does not divide model.expert_ffn_hidden_size={ffn}")
    local, width = num_experts // ep, ffn // tp
    device, dtype = experts.down_proj.device, experts.down_proj.dtype
    up_name = "gate_up_proj" if experts.has_gate else "up_proj"
    up_rows = (2 if experts.has_gate else 1) * width
    setattr(experts, up_name, torch.nn.Parameter(torch.empty(local, up_rows, experts.down_proj.shape[1], device=device, dtype=dtype)))
    experts.down_proj = torch.nn.Parameter(torch.empty(local, experts.down_proj.shape[1], width, device=device, dtype=dtype))
    experts.num_experts = local
    setattr(experts, ROUTING_ATTR, routing)


def expert_param_bytes(module: torch.nn.Module) -> float:
    """Bytes of the expert weights in `module` (those of experts modules, not routers or shared experts)."""
    return float(sum(p.numel() * p.element_size() for m in module.modules() if hasattr(m, ROUTING_ATTR)
                     for p in m.parameters(recurse=False)))
