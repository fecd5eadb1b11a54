"""torchtitan's selective activation checkpointing by operator (model.selective_policy=torchtitan_op): what a block's
forward keeps and what its backward runs again.

torchtitan wraps each transformer block in torch.utils.checkpoint with a policy that keeps the outputs of the
operators in its save list (matrix multiplications, scaled-dot-product attention, reduce-scatters, abs and max) except
every second matrix multiplication of the block, counted in forward order, and recomputes every other operator in
backward (torchtitan/parallelisms/parallelize_llama.py, `_save_list` and `_custom_policy`, selective_ac_option 'op',
the default of its Llama training configs). The block's input is the checkpoint's own saved tensor.
"""

from __future__ import annotations

from torch import fx

from phaze.workload.aten_ops import nbytes, op_name, tensors_of
from phaze.workload.attention import FLASH_FORWARD

COUNTED_MATMUL = "mm"
"""The operator the policy counts (aten.mm: a linear layer without bias, as torchtitan's Llama has)."""
ALWAYS_SAVED = frozenset({FLASH_FORWARD, "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                          "reduce_scatter_tensor", "abs", "max"})
"""The save list's other operators (the traced FlashAttention kernel is its SDPA); their outputs are always kept."""


def kept_nodes(fwd_gm: fx.GraphModule) -> set[str]:
    """The forward nodes whose outputs the policy keeps: the odd-numbered matmuls (1st, 3rd, ...) and ALWAYS_SAVED."""
    kept, matmuls = set(), 0
    for node in fwd_gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name == COUNTED_MATMUL:
            matmuls += 1
            if matmuls % 2 == 1:
                kept.add(node.name)
        elif name in ALWAYS_SAVED:
            kept.add(node.name)
    return kept


def recomputed_and_kept_bytes(fwd_gm: fx.GraphModule, input_bytes: float) -> tuple[set[str], float]:
    """(the forward nodes the backward runs again, the bytes the forward keeps: the kept nodes' outputs and the block's
    input)."""
    kept = kept_nodes(fwd_gm)
    recomputed = {n.name for n in fwd_gm.graph.nodes if n.op == "call_function" and n.name not in kept}
    kept_bytes = sum(nbytes(t) for n in fwd_gm.graph.nodes if n.name in kept for t in tensors_of(n.meta.get("val")))
    return recomputed, float(kept_bytes + input_bytes)
