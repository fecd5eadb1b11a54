"""A layer on a chip without inter-operator parallelism (a GPU): one compute stream and one communication
stream, each running its operators in program order, every operator starting once its inputs are ready.

Compute operators run on all cores, one at a time (Megatron-LM launches them on one CUDA stream).
Collectives run on the communication stream when the framework issues them asynchronously (the
compute stream then waits only where an operator needs their result: Megatron's backward
reduction of the input gradient under the weight-gradient GEMM), else they block the compute stream.
A collective can also be pipelined with the compute operators beside it, as ring algorithms do
(ring attention: the K/V chunk of the next step travels while the current one is attended to,
Liu et al. 2023, arXiv 2310.01889; TE/NeMo's TP overlap: an all-gather's chunks feed the GEMM
chunk by chunk, a GEMM's output chunks feed the reduce-scatter): with a group of n ranks, the
compute partner runs as n chunks of 1/n, the collective as n - 1 ring steps of 1/(n - 1), chunk 0
needing no remote data (an all-gather) or sending nothing (the last chunk of a reduce-scatter). All-gathers that
feed the same operators travel together, one ring step of each at a time (ring attention sends a step's K and V
in one exchange: Transformer Engine's AttnFuncWithCPAndKVP2P), and a fused kernel's steps run chunk by chunk
(ring attention calls the whole FlashAttention kernel once per K/V chunk), so chunk k waits only for step k.
Without asynchrony or pipelining the makespan is the plain sum of the operators' latencies.
A collective running beside compute slows it (its kernels hold cores and memory bandwidth: Lee et al.,
"Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning", arXiv
2507.03114, 2025, measure compute 18.9% slower on average while NCCL collectives overlap it on A100s and
H100s): with a slowdown s, each second a collective hides under compute costs the compute s / (1 + s) s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COMPUTE, COMM = 0, 1
GATHER = "phaze.all_gather"
SCATTER = "phaze.reduce_scatter"


@dataclass(frozen=True)
class StreamOptions:
    """How a framework runs collectives on a single-stream chip."""

    tp_async: bool = False
    """TP collectives on the communication stream (Megatron's async TP communication)."""
    tp_pipelined: bool = False
    """TP all-gathers / reduce-scatters pipelined with their GEMMs (placement.tp_comm_overlap)."""
    cp_pipelined: bool = True
    """Context-parallel K/V exchanges pipelined with attention (ring attention)."""
    overlap_slowdown: float = 0.0
    """How much longer compute takes while a collective runs beside it (hw.overlap_slowdown)."""


def comm_stream(ops, unit, opts: StreamOptions) -> np.ndarray:
    """The collectives that run on the communication stream (beside compute): context-parallel exchanges, and TP
    collectives the framework issues asynchronously or pipelines; the others block the compute stream."""
    context = ops["comm_context"].to_numpy(dtype=bool) if "comm_context" in ops.columns else np.zeros(len(ops), bool)
    return (np.asarray(unit).astype(str) == "net") & (context | opts.tp_async | opts.tp_pipelined)


def contended_makespan(makespan, unit, latency_s, on_comm, slowdown: float):
    """The makespan once compute pays for the collectives that hid under it: the communication-stream time not
    exposed (makespan beyond the compute and blocking collectives) times s / (1 + s)."""
    if slowdown <= 0:
        return makespan
    lat = np.asarray(latency_s, dtype=np.float64)
    unit = np.asarray(unit).astype(str)
    busy = lat[np.isin(unit, ("tc", "vc"))].sum(axis=0) + lat[(unit == "net") & ~on_comm].sum(axis=0)
    hidden = np.maximum(lat[on_comm].sum(axis=0) - np.maximum(makespan - busy, 0.0), 0.0)
    return makespan + slowdown / (1.0 + slowdown) * hidden


def _kernel(names: list[str], i: int) -> str:
    """The traced node an op row belongs to (fused kernel steps are named node.step)."""
    return names[i].split(".")[0]


def _partners(ops, succ, pred, i: int, fused: np.ndarray, names: list[str]) -> list[int]:
    """Compute ops pipelined with collective i: the consumers of an all-gather, the producers of a
    reduce-scatter; a fused kernel's steps travel together."""
    unit_ok = ops["kind"].to_numpy() != "collective"
    near = succ[i] if ops["target"].iat[i] == GATHER else pred[i]
    out = set()
    for j in near:
        if not unit_ok[j]:
            continue
        if fused[j]:
            kernel = _kernel(names, j)
            out |= {k for k in range(len(names)) if fused[k] and _kernel(names, k) == kernel}
        else:
            out.add(j)
    return sorted(out)


def _pipelined(ops, opts: StreamOptions) -> np.ndarray:
    """Ring size per op for collectives that are pipelined with their partners (0: not pipelined)."""
    n = len(ops)
    if "comm_group" not in ops.columns:
        return np.zeros(n, np.int64)
    target = ops["target"].to_numpy()
    context = ops["comm_context"].to_numpy(dtype=bool) if "comm_context" in ops.columns else np.zeros(n, bool)
    ring = np.isin(target, (GATHER, SCATTER)) & np.where(context, opts.cp_pipelined, opts.tp_pipelined)
    return np.where(ring, ops["comm_group"].to_numpy(dtype=np.int64), 0)


def _travelling_together(ops, partners: dict[int, list[int]], succ: list[list[int]]) -> dict[int, list[int]]:
    """Each pipelined all-gather -> the pipelined all-gathers (in order) that feed the same operators and nothing else:
    one ring."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, mates in partners.items():
        if ops["target"].iat[i] == GATHER and set(succ[i]) <= set(mates):
            groups.setdefault(tuple(mates), []).append(i)
    return {i: sorted(group) for group in groups.values() for i in group}


def _kernel_steps(i: int, fused: np.ndarray, names: list[str], chunks: np.ndarray) -> list[int]:
    """The chunked operators run chunk by chunk with op i: the steps of its fused kernel, or op i alone."""
    if not fused[i]:
        return [i]
    kernel = _kernel(names, i)
    return [j for j in range(i, len(names)) if fused[j] and chunks[j] == chunks[i] and _kernel(names, j) == kernel]


def stream_makespan(graph, unit, latency_s: np.ndarray, opts: StreamOptions) -> np.ndarray:
    """Makespan per point of the layer `graph` (views removed) with op latencies [n_ops, P] on one chip stream
    and one communication stream."""
    lat = np.asarray(latency_s, dtype=np.float64)
    if lat.ndim == 1:
        lat = lat[:, None]
    ops = graph.ops
    n, p = lat.shape
    on_comm = comm_stream(ops, unit, opts)
    src = graph.edges["src"].to_numpy(dtype=np.int64)
    dst = graph.edges["dst"].to_numpy(dtype=np.int64)
    pred = [[] for _ in range(n)]
    succ = [[] for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist()):
        pred[d].append(s)
        succ[s].append(d)
    rings = _pipelined(ops, opts)
    fused = ops["fused"].to_numpy(dtype=bool) if "fused" in ops.columns else np.zeros(n, bool)
    names = ops["name"].astype(str).tolist() if "name" in ops.columns else [str(i) for i in range(n)]
    chunks = np.ones(n, np.int64)
    gathers_of: dict[int, list[int]] = {}  # partner -> pipelined all-gathers feeding it
    scatters_of: dict[int, list[int]] = {}  # partner -> pipelined reduce-scatters it feeds
    partners: dict[int, list[int]] = {}
    for i in np.flatnonzero(rings > 1).tolist():
        mates = _partners(ops, succ, pred, i, fused, names)
        if not mates or any(chunks[j] not in (1, rings[i]) for j in mates):
            rings[i] = 0
            continue
        partners[i] = mates
        for j in mates:
            chunks[j] = rings[i]
            (gathers_of if ops["target"].iat[i] == GATHER else scatters_of).setdefault(j, []).append(i)
    free = np.zeros((2, p))
    pieces: dict[int, list[np.ndarray]] = {}  # pipelined all-gather -> finish of each ring step
    parts: dict[int, list[np.ndarray]] = {}  # chunked op -> finish of each chunk
    finish = np.zeros((n, p))

    def run(stream: int, ready: np.ndarray, duration: np.ndarray) -> np.ndarray:
        end = np.maximum(free[stream], ready) + duration
        free[stream] = end
        return end

    travelling = _travelling_together(ops, partners, succ)
    done_ops: set[int] = set()
    for i in range(n):
        if i in done_ops:
            continue
        ready = np.max(finish[pred[i]], axis=0) if pred[i] else np.zeros(p)
        if i in partners:
            ring = int(rings[i])
            if ops["target"].iat[i] == GATHER:
                group = travelling.get(i, [i])
                if i != group[-1]:
                    continue  # its ring steps go with the group's last all-gather, whose inputs come last
                start = np.max([np.max(finish[pred[g]], axis=0) if pred[g] else np.zeros(p) for g in group], axis=0)
                step_s = lat[group].sum(axis=0) / (ring - 1)
                steps = [run(COMM, start if k == 0 else np.zeros(p), step_s) for k in range(ring - 1)]
                for g in group:
                    pieces[g] = steps
                    finish[g] = steps[-1]
            else:  # a reduce-scatter: its partners (earlier) ran chunk by chunk; step k sends chunk k
                others = [k for k in pred[i] if k not in partners[i]]
                start = np.max(finish[others], axis=0) if others else np.zeros(p)
                last = start
                for k in range(ring - 1):
                    after = np.max([parts[j][k] for j in partners[i]], axis=0)
                    last = run(COMM, np.maximum(after, start), lat[i] / (ring - 1))
                finish[i] = np.maximum(last, np.max([parts[j][-1] for j in partners[i]], axis=0))
            continue
        stream = COMM if on_comm[i] else COMPUTE
        if chunks[i] > 1:
            kernel = _kernel_steps(i, fused, names, chunks)
            parts.update({j: [] for j in kernel})
            for k in range(int(chunks[i])):
                for j in kernel:
                    feeds = gathers_of.get(j, [])
                    inside = [q for q in pred[j] if q in kernel]
                    others = [q for q in pred[j] if q not in feeds and q not in inside]
                    need = np.max(finish[others], axis=0) if others else np.zeros(p)
                    if feeds and k > 0:
                        need = np.maximum(need, np.max([pieces[g][k - 1] for g in feeds], axis=0))
                    if inside:
                        need = np.maximum(need, np.max([parts[q][k] for q in inside], axis=0))
                    parts[j].append(run(stream, need, lat[j] / chunks[j]))
            for j in kernel:
                finish[j] = parts[j][-1]
            done_ops.update(kernel)
        else:
            finish[i] = run(stream, ready, lat[i])
    makespan = finish.max(axis=0) if n else np.zeros(p)
    return contended_makespan(makespan, unit, lat, on_comm, opts.overlap_slowdown)
