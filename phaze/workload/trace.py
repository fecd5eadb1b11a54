"""Trace one training step of a model part with AOTAutograd and turn its graphs into operator tables.

`aot_function` splits the joint graph into a forward and a backward fx graph on meta tensors: the
backward holds the data-gradient and the weight-gradient matmuls, and the tensors the forward
saves for it are exactly the backward graph's non-tangent inputs (docs/dependencies.md §6.2).
"""

from __future__ import annotations

import pandas as pd
import torch
from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
from torch import fx
from torch.func import functional_call

from phaze.workload.aten_ops import GATHERS, flops_of, kind_of, matmul_dims, nbytes, op_name, tensors_of
from phaze.workload.attention import CORE_MARKER, FLASH_FORWARD, FLASH_OPS, kernel_steps
from phaze.workload.experts import ALL_TO_ALL
from phaze.workload.families import PartSpec
from phaze.workload.graph import BLOCK_PARTS, EDGE_COLUMNS, NO_TRAFFIC, OP_COLUMNS, LayerGraph, OpGraph
from phaze.workload.op_policy import recomputed_and_kept_bytes
from phaze.workload.tensor_parallel import token_dim

TANGENT_PREFIX = "tangents"
GATHER = "phaze.all_gather"
"""AOTAutograd names the backward graph's incoming output gradients tangents_1, tangents_2, ..."""


def trace_part(spec: PartSpec, fused: bool = False) -> tuple[fx.GraphModule, fx.GraphModule, list[str]]:
    """Forward graph, backward graph, and the forward placeholder names that are parameters.

    `fused`: split with the min-cut rematerialization partition (what fused elementwise kernels save: a
    chain's inputs, its intermediates recomputed in backward) instead of saving every operator's inputs."""
    graphs: dict[str, fx.GraphModule] = {}

    def keep(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm
            return make_boxed_func(gm.forward)

        return compiler

    params = dict(spec.module.named_parameters())
    state = {**params, **dict(spec.module.named_buffers())}  # buffers too, so none is captured as a real constant

    def step(p, *inputs):
        return functional_call(spec.module, p, inputs)

    partition = {"partition_fn": min_cut_rematerialization_partition} if fused else {}
    out = aot_function(step, fw_compiler=keep("fwd"), bw_compiler=keep("bwd"), **partition)(state, *spec.inputs)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"a part must return one tensor, got {type(out).__name__}")
    out.backward(torch.empty_like(out))
    placeholders = [n.name for n in graphs["fwd"].graph.nodes if n.op == "placeholder"]
    return graphs["fwd"], graphs["bwd"], placeholders[: len(params)]


def _input_nodes(node: fx.Node) -> list[fx.Node]:
    seen: dict[fx.Node, None] = {}
    for a in node.all_input_nodes:
        seen[a] = None
    return list(seen)


def _is_own_output(node: fx.Node) -> bool:
    """A getitem picking one output of a multi-output operator (a layer norm's mean, a dropout's mask, a
    fused attention kernel's log-sum-exp): a tensor of its own, not an alias."""
    return (op_name(node.target) == "getitem" and isinstance(node.args[0], fx.Node)
            and isinstance(node.args[0].meta.get("val"), (tuple, list)))


def _bases(gm: fx.GraphModule, inherited: dict[str, str]) -> dict[str, str]:
    """Node name -> name of the node owning its storage (views resolve to what they alias)."""
    base: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            base[node.name] = inherited.get(node.name, node.name)
        elif node.op == "call_function" and kind_of(op_name(node.target)) == "view" and node.all_input_nodes and not _is_own_output(node):
            base[node.name] = base[node.all_input_nodes[0].name]
        else:
            base[node.name] = node.name
    return base


def _row(name: str, target: str, kind: str, out_shape, in_shapes, dims, numel_out: int, elem_bytes: int, fused: bool = False, **bytes_) -> dict:
    return {
        "name": name, "target": target, "kind": kind, "out_shape": out_shape, "in_shapes": in_shapes,
        "numel_out": numel_out, "flops": flops_of(kind, numel_out, dims),
        "bytes_read": 0.0, "bytes_written": 0.0, **NO_TRAFFIC,
        "mm_b": dims[0], "mm_m": dims[1], "mm_k": dims[2], "mm_n": dims[3],
        "elem_bytes": elem_bytes, "fused": fused,
        **bytes_,
    }


def collective_group(node: fx.Node) -> tuple[int, int, bool]:
    """(group size, stride, context-parallel?) of a traced collective: all_reduce(x, n) over a TP group of
    adjacent devices, all_gather / reduce_scatter(x, n, stride, dim, context), all_to_all(x, n, stride, rows)."""
    args = node.args
    if op_name(node.target) == ALL_TO_ALL:
        return int(args[1]), int(args[2]), False
    return int(args[1]), (int(args[2]) if len(args) > 2 else 1), bool(args[4]) if len(args) > 4 else False


def regather_row(name: str, shard: torch.Tensor, group: int, stride: int, context: bool) -> dict:
    """The backward all-gather of a tensor the forward gathered: only the shard is kept in between
    (Megatron's sequence-parallel linears and ring attention gather again in backward)."""
    full = nbytes(shard) * group
    shape = list(shard.shape)
    shape[token_dim(shard)] *= group
    return _row(name, "phaze.all_gather", "collective", tuple(shape), (tuple(shard.shape),), (0, 0, 0, 0), int(shard.numel()) * group,
                shard.element_size(), bytes_read=float(nbytes(shard)), bytes_written=float(full), comm_bytes=float(full),
                comm_group=group, comm_stride=stride, comm_context=context)


def _kernel_rows(node: fx.Node, name: str, bytes_: dict) -> list[dict]:
    """A fused attention node as the steps its kernel runs: the node's HBM reads on the first step,
    its writes (and saved bytes) on the last; the steps between keep S and P on chip (0 bytes)."""
    args = dict(zip((a.name for a in node.target._schema.arguments), node.args))
    q = args["q"].meta["val"]
    steps = kernel_steps(name == FLASH_FORWARD, tuple(q.shape), bool(args["causal"]), int(args["k"].meta["val"].shape[1]),
                         int(args["v"].meta["val"].shape[3]))
    return kernel_step_rows(node.name, steps, q.element_size(), **bytes_)


def kernel_step_rows(name: str, steps, elem_bytes: int, bytes_read: float, bytes_written: float, param_bytes: float = 0.0,
                     saved_bytes: float = 0.0) -> list[dict]:
    """Operator rows (OP_COLUMNS) of a fused kernel's steps (phaze.workload.attention.kernel_steps): the kernel's HBM reads
    on the first step, its writes and saved bytes on the last, nothing between (S and P stay on chip)."""
    rows = [_row(f"{name}.{st.step}", st.target, st.kind, st.out_shape, st.in_shapes, st.dims, st.numel, elem_bytes, fused=True)
            for st in steps]
    rows[0].update(bytes_read=bytes_read, param_bytes=param_bytes)
    rows[-1].update(bytes_written=bytes_written, saved_bytes=saved_bytes)
    return rows


def graph_to_ops(gm: fx.GraphModule, base: dict[str, str], params: set[str], saved: set[str],
                 regather: dict[str, tuple] | None = None, core: set[str] = frozenset()) -> OpGraph:
    """One row per call_function node (topological order), one edge per producer -> consumer pair.

    A fused attention node becomes one row per kernel step, chained in order by 0-byte (on-chip)
    edges: its producers feed the first step and its consumers read the last. `regather` maps a
    gathered forward tensor to (shard, its collective_group, the placeholders that are views of it): each
    becomes one all-gather row at the start, which every reader of those placeholders depends on.
    Rows of nodes in `core` (the attention core) are flagged.
    """
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    op_nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    last_row: dict[str, int] = {}
    rows, edges = [], []
    for gathered, (shard, group, placeholders) in (regather or {}).items():
        for placeholder in placeholders:
            last_row[placeholder] = len(rows)
        rows.append(regather_row(f"{gathered}.regather", shard, *group))
    for node in op_nodes:
        i = len(rows)
        name = op_name(node.target)
        kind = kind_of(name)
        outs = tensors_of(vals[node.name])
        inputs = _input_nodes(node)
        in_tensors = [t for a in inputs for t in tensors_of(vals[a.name])]
        in_shapes = tuple(tuple(t.shape) for t in in_tensors)
        moves_data = kind != "view"
        read = sum(nbytes(t) for t in in_tensors)
        if name in GATHERS and outs:  # the table (first argument) is read only where gathered: output-sized
            read += sum(nbytes(t) for t in outs) - sum(nbytes(t) for t in tensors_of(vals[node.args[0].name]))
        bytes_ = {
            "bytes_read": float(read) if moves_data else 0.0,
            "bytes_written": float(sum(nbytes(t) for t in outs)) if moves_data else 0.0,
            "param_bytes": float(sum(nbytes(t) for a in inputs if base[a.name] in params for t in tensors_of(vals[a.name]))),
            "saved_bytes": float(nbytes(outs[0])) if node.name in saved and outs else 0.0,
        }
        if name in FLASH_OPS:
            rows.extend({**r, "core": node.name in core} for r in _kernel_rows(node, name, bytes_))
        else:
            dims = matmul_dims(name, list(in_shapes)) if kind == "matmul" else (0, 0, 0, 0)
            group, stride, context = collective_group(node) if kind == "collective" else (0, 0, False)
            rows.append(_row(
                node.name, name, kind, tuple(outs[0].shape) if outs else (), in_shapes, dims,
                int(outs[0].numel()) if outs else 0, outs[0].element_size() if outs else 0, **bytes_,
                comm_bytes=float(max(nbytes(in_tensors[0]), nbytes(outs[0]))) if kind == "collective" else 0.0,
                comm_group=group, comm_stride=stride, comm_context=context, core=node.name in core,
            ))
        for a in inputs:
            if a.name in last_row:
                edges.append((last_row[a.name], i, float(sum(nbytes(t) for t in tensors_of(vals[a.name])))))
        edges.extend((j, j + 1, 0.0) for j in range(i, len(rows) - 1))
        last_row[node.name] = len(rows) - 1
    ops = pd.DataFrame([{"op_id": j, **r} for j, r in enumerate(rows)], columns=list(OP_COLUMNS))
    return OpGraph(ops, pd.DataFrame(edges, columns=list(EDGE_COLUMNS)))


def attention_core_nodes(gm: fx.GraphModule) -> tuple[set[str], set[str], set[str]]:
    """(the nodes between the attention core's markers, the core's outputs, its inputs): every descendant
    of a start marker that is an ancestor of an end marker (phaze.workload.attention.attention_core)."""
    markers = [n for n in gm.graph.nodes if n.op == "call_function" and op_name(n.target) == CORE_MARKER]
    starts = [n for n in markers if not n.args[1]]
    ends = [n for n in markers if n.args[1]]

    def closure(nodes, step):
        seen, todo = set(), list(nodes)
        while todo:
            for nxt in step(todo.pop()):
                if nxt.name not in seen:
                    seen.add(nxt.name)
                    todo.append(nxt)
        return seen

    inside = closure(starts, lambda n: n.users) & closure(ends, lambda n: n.all_input_nodes)
    inside -= {n.name for n in markers}
    inside |= {n.name for n in gm.graph.nodes if _is_own_output(n) and n.args[0].name in inside}  # e.g. a dropout's mask
    return inside, {e.args[0].name for e in ends}, {m.args[0].name for m in starts}


def _gathered(fwd_gm: fx.GraphModule) -> dict[str, fx.Node]:
    """Forward nodes that are all-gather outputs, by name."""
    return {n.name: n for n in fwd_gm.graph.nodes if n.op == "call_function" and op_name(n.target) == GATHER}


def part_graph(part: str, spec: PartSpec, tp: int, mbs: int, seq_len: int, fused: bool = False, expert_bytes: float = 0.0,
               selective_policy: str = "attention_core") -> LayerGraph:
    """Trace a part and build its LayerGraph: ops both ways, parameters, saved activations, boundary bytes.

    A saved all-gather output is kept as its shard and gathered again in backward (`regather`).
    `core_saved_bytes` is what selective recompute frees and the forward ops marked `core` what it runs again: under
    attention_core the attention core's saved tensors less its inputs (query, key, value), which become the checkpoint
    the core is recomputed from (Korthikanti et al. 2022 §5); under torchtitan_op (a layer part) every operator but
    those whose outputs torchtitan's policy keeps, which with the block's input are all the forward saves
    (phaze.workload.op_policy)."""
    fwd_gm, bwd_gm, param_names = trace_part(spec, fused)
    params = set(param_names)
    fwd_base = _bases(fwd_gm, {})
    bwd_base = _bases(bwd_gm, fwd_base)
    saved_names = [n.name for n in bwd_gm.graph.nodes if n.op == "placeholder" and not n.name.startswith(TANGENT_PREFIX)]
    saved_bases = {fwd_base[s] for s in saved_names} - params
    fwd_vals = {n.name: n.meta.get("val") for n in fwd_gm.graph.nodes}
    gathered = _gathered(fwd_gm)
    regather: dict[str, tuple] = {}
    for name in saved_names:
        node = gathered.get(fwd_base[name])
        if node is not None:
            regather.setdefault(node.name, (fwd_vals[node.args[0].name], collective_group(node), []))[2].append(name)
    kept = {fwd_base[gathered[b].args[0].name] if b in gathered else b for b in saved_bases}
    saved_bytes = float(sum(nbytes(tensors_of(fwd_vals[b])[0]) for b in kept))
    core, core_outputs, core_inputs = attention_core_nodes(fwd_gm)
    outputs = {fwd_base[o] for o in core_outputs}
    inside_saved = sum(nbytes(tensors_of(fwd_vals[b])[0]) for b in kept if b in core and b not in outputs)
    checkpoint = sum(nbytes(tensors_of(fwd_vals[b])[0]) for b in {fwd_base[i] for i in core_inputs} - kept)
    core_saved = float(inside_saved - checkpoint)
    input_bytes = float(nbytes(spec.inputs[spec.grad_input])) if spec.grad_input is not None else 0.0
    if selective_policy == "torchtitan_op" and part in BLOCK_PARTS:
        core, kept_bytes = recomputed_and_kept_bytes(fwd_gm, input_bytes)
        core_saved = saved_bytes - kept_bytes
    out = spec.module(*spec.inputs)
    return LayerGraph(
        part=part,
        tp=tp,
        mbs=mbs,
        seq_len=seq_len,
        fwd=graph_to_ops(fwd_gm, fwd_base, params, kept, core=core),
        bwd=graph_to_ops(bwd_gm, bwd_base, params, set(), regather),
        param_bytes=float(sum(nbytes(p) for p in spec.module.parameters())),
        saved_bytes=saved_bytes,
        input_bytes=input_bytes,
        output_bytes=float(nbytes(out)) if part != "post" else 0.0,
        core_saved_bytes=core_saved,
        expert_param_bytes=expert_bytes,
    )
