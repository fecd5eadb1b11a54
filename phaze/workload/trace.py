"""Trace one training step of a model part with AOTAutograd and turn its graphs into operator tables.

`aot_function` splits the joint graph into a forward and a backward fx graph on meta tensors: the
backward holds the data-gradient and the weight-gradient matmuls, and the tensors the forward
saves for it are exactly the backward graph's non-tangent inputs (ecosystem.md §6.2).
"""

from __future__ import annotations

import pandas as pd
import torch
from functorch.compile import aot_function, make_boxed_func
from torch import fx
from torch.func import functional_call

from phaze.workload.aten_ops import GATHERS, flops_of, kind_of, matmul_dims, nbytes, op_name, tensors_of
from phaze.workload.attention import FLASH_FORWARD, FLASH_OPS, kernel_steps
from phaze.workload.families import PartSpec
from phaze.workload.graph import EDGE_COLUMNS, OP_COLUMNS, LayerGraph, OpGraph

TANGENT_PREFIX = "tangents"
"""AOTAutograd names the backward graph's incoming output gradients tangents_1, tangents_2, ..."""


def trace_part(spec: PartSpec) -> tuple[fx.GraphModule, fx.GraphModule, list[str]]:
    """Forward graph, backward graph, and the forward placeholder names that are parameters."""
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

    out = aot_function(step, fw_compiler=keep("fwd"), bw_compiler=keep("bwd"))(state, *spec.inputs)
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


def _is_kernel_output(node: fx.Node) -> bool:
    """A getitem picking one output of a fused attention kernel: a tensor of its own, not an alias."""
    return op_name(node.target) == "getitem" and isinstance(node.args[0], fx.Node) and op_name(node.args[0].target) in FLASH_OPS


def _bases(gm: fx.GraphModule, inherited: dict[str, str]) -> dict[str, str]:
    """Node name -> name of the node owning its storage (views resolve to what they alias)."""
    base: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            base[node.name] = inherited.get(node.name, node.name)
        elif node.op == "call_function" and kind_of(op_name(node.target)) == "view" and node.all_input_nodes and not _is_kernel_output(node):
            base[node.name] = base[node.all_input_nodes[0].name]
        else:
            base[node.name] = node.name
    return base


def _row(name: str, target: str, kind: str, out_shape, in_shapes, dims, numel_out: int, elem_bytes: int, fused: bool = False, **bytes_) -> dict:
    return {
        "name": name, "target": target, "kind": kind, "out_shape": out_shape, "in_shapes": in_shapes,
        "numel_out": numel_out, "flops": flops_of(kind, numel_out, dims),
        "bytes_read": 0.0, "bytes_written": 0.0, "param_bytes": 0.0, "saved_bytes": 0.0, "comm_bytes": 0.0,
        "mm_b": dims[0], "mm_m": dims[1], "mm_k": dims[2], "mm_n": dims[3],
        "elem_bytes": elem_bytes, "fused": fused,
        **bytes_,
    }


def _kernel_rows(node: fx.Node, name: str, bytes_: dict) -> list[dict]:
    """A fused attention node as the steps its kernel runs: the node's HBM reads on the first step,
    its writes (and saved bytes) on the last; the steps between keep S and P on chip (0 bytes)."""
    args = dict(zip((a.name for a in node.target._schema.arguments), node.args))
    q = args["q"].meta["val"]
    steps = kernel_steps(name == FLASH_FORWARD, tuple(q.shape), bool(args["causal"]))
    rows = [
        _row(f"{node.name}.{st.step}", st.target, st.kind, st.out_shape, st.in_shapes, st.dims, st.numel, q.element_size(), fused=True)
        for st in steps
    ]
    rows[0].update(bytes_read=bytes_["bytes_read"], param_bytes=bytes_["param_bytes"])
    rows[-1].update(bytes_written=bytes_["bytes_written"], saved_bytes=bytes_["saved_bytes"])
    return rows


def graph_to_ops(gm: fx.GraphModule, base: dict[str, str], params: set[str], saved: set[str]) -> OpGraph:
    """One row per call_function node (topological order), one edge per producer -> consumer pair.

    A fused attention node becomes one row per kernel step, chained in order by 0-byte (on-chip)
    edges: its producers feed the first step and its consumers read the last.
    """
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    op_nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    last_row: dict[str, int] = {}
    rows, edges = [], []
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
            rows.extend(_kernel_rows(node, name, bytes_))
        else:
            dims = matmul_dims(name, list(in_shapes)) if kind == "matmul" else (0, 0, 0, 0)
            rows.append(_row(
                node.name, name, kind, tuple(outs[0].shape) if outs else (), in_shapes, dims,
                int(outs[0].numel()) if outs else 0, outs[0].element_size() if outs else 0, **bytes_,
                comm_bytes=float(nbytes(in_tensors[0])) if kind == "collective" else 0.0,
            ))
        for a in inputs:
            if a.name in last_row:
                edges.append((last_row[a.name], i, float(sum(nbytes(t) for t in tensors_of(vals[a.name])))))
        edges.extend((j, j + 1, 0.0) for j in range(i, len(rows) - 1))
        last_row[node.name] = len(rows) - 1
    ops = pd.DataFrame([{"op_id": j, **r} for j, r in enumerate(rows)], columns=list(OP_COLUMNS))
    return OpGraph(ops, pd.DataFrame(edges, columns=list(EDGE_COLUMNS)))


def part_graph(part: str, spec: PartSpec, tp: int, mbs: int, seq_len: int) -> LayerGraph:
    """Trace a part and build its LayerGraph: ops both ways, parameters, saved activations, boundary bytes."""
    fwd_gm, bwd_gm, param_names = trace_part(spec)
    params = set(param_names)
    fwd_base = _bases(fwd_gm, {})
    bwd_base = _bases(bwd_gm, fwd_base)
    saved_names = [n.name for n in bwd_gm.graph.nodes if n.op == "placeholder" and not n.name.startswith(TANGENT_PREFIX)]
    saved_bases = {fwd_base[s] for s in saved_names} - params
    fwd_vals = {n.name: n.meta.get("val") for n in fwd_gm.graph.nodes}
    saved_bytes = float(sum(nbytes(tensors_of(fwd_vals[b])[0]) for b in saved_bases))
    out = spec.module(*spec.inputs)
    return LayerGraph(
        part=part,
        tp=tp,
        mbs=mbs,
        seq_len=seq_len,
        fwd=graph_to_ops(fwd_gm, fwd_base, params, saved_bases),
        bwd=graph_to_ops(bwd_gm, bwd_base, params, set()),
        param_bytes=float(sum(nbytes(p) for p in spec.module.parameters())),
        saved_bytes=saved_bytes,
        input_bytes=float(nbytes(spec.inputs[spec.grad_input])) if spec.grad_input is not None else 0.0,
        output_bytes=float(nbytes(out)) if part != "post" else 0.0,
    )
