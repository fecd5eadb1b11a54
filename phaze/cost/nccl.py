"""NCCL's own cost model of a collective across nodes (and of NVLink SHARP inside one), and its choice between its
algorithms by that model (cluster.collective_algorithm=nccl).

NCCL times each algorithm as latency + bytes / algorithm bandwidth and runs the fastest (src/graph/tuning.cc,
ncclTopoTuneModel and ncclTopoGetAlgoTime; NCCL 2.2x, Simple protocol: the large messages of training):
- its ring is flat over all n ranks of the N nodes: 2(n-1) steps for an all-reduce, of which 2(N-1) cross the
  network, each step at its link's latency; the bytes stream through every link at once, so the ring runs at its
  bus bandwidth, the slower of a chip's intra-node rate and the NICs of the group's members in one node (one per
  chip on a rail-optimised fabric); multi-node ring all-reduces pay a plateau factor on their latency;
- its tree (all-reduce only) is a chain inside each node and a double binary tree across nodes:
  2((n/N - 1) intra + floor(log2 N) inter) steps, at 0.92 of the bus bandwidth and half of it as the algorithm's
  (every byte goes up and down the tree), less a correction at medium sizes.
A hierarchical reduce-scatter, inter-node all-reduce and all-gather run one after another (phaze.cost.network's
ring and tree) take about twice the flat ring's time on 8-GPU nodes, whose NVLink and NICs move bytes together.
"""

from __future__ import annotations

import math

import numpy as np

TREE_BUS_FACTOR = 0.92
"""The tree all-reduce's bus bandwidth against the ring's (tuning.cc: busBw * .92 for Tree AllReduce)."""
TREE_ALGO_RATIO = 0.5
"""The tree's algorithm bandwidth per bus bandwidth: every byte goes up the tree and down again (tuning.cc: ratio .5)."""
RING_PLATEAU = 1.4
"""Multi-node ring all-reduces' latency factor on sm80 and later (tuning.cc, ncclTopoGetAlgoTime: 'Plateau effect of
ring', 1.4; 1.9 before sm80, a chip no GPU preset here has)."""
TREE_INTRA_STEP_S = 4.0e-6
"""Per tree step over NVLink (tuning.cc hwLat, NVLINK, Tree, Simple)."""
TREE_INTER_STEP_S = 14.0e-6
"""Per tree step over the network (tuning.cc hwLat, NET, Tree, Simple)."""
TREE_CORRECTION = (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7,
                   0.8, 0.9, 0.9)
"""The tree all-reduce's bandwidth factor by message size, floor(log2(bytes / 64)) = 0..22 (64 B to 256 MiB; larger
messages take 1), Simple protocol (tuning.cc treeCorrectionFactor: 'Trees are not perfectly sticking to the model for
medium sizes')."""
NVLS_LATENCY_S = 25e-6
"""An NVLink SHARP all-reduce's latency inside a node (tuning.cc: NVLS base latency 0, hwLat NVLINK NVLS Simple 25 us)."""
SMALLEST_CORRECTED_BYTES = 64
"""The size the correction's index counts from (tuning.cc: log2i(nBytes >> 6))."""


def tree_correction(nbytes) -> np.ndarray:
    """TREE_CORRECTION at each message size (1 beyond the table)."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    index = np.floor(np.log2(np.maximum(nbytes, SMALLEST_CORRECTED_BYTES) / SMALLEST_CORRECTED_BYTES)).astype(np.int64)
    table = np.asarray(TREE_CORRECTION)
    return np.where(index < len(table), table[np.minimum(index, len(table) - 1)], 1.0)


def bus_bytes_s(per_node: int, intra_bytes_s: float, inter_bytes_s: float) -> float:
    """A multi-node ring's or tree's bus bandwidth: a chip's intra-node rate or the NICs of the group's `per_node` members
    in one node, whichever is slower (every member sends through its own NIC)."""
    return min(intra_bytes_s, per_node * inter_bytes_s)


def _ring_latency_s(steps: int, inter_steps: int, intra_step_s: float, inter_step_s: float, launch_s: float) -> float:
    """A flat ring's latency: the call, then its steps, `inter_steps` of them over the network."""
    return launch_s + (steps - inter_steps) * intra_step_s + inter_steps * inter_step_s


def ring_allreduce_s(nbytes, n: int, nodes: int, bus_s: float, intra_step_s: float, inter_step_s: float, launch_s: float):
    """NCCL's flat ring all-reduce of `nbytes` over n ranks on `nodes` nodes (more than one)."""
    latency_s = _ring_latency_s(2 * (n - 1), 2 * (nodes - 1), intra_step_s, inter_step_s, launch_s)
    return RING_PLATEAU * latency_s + 2.0 * (n - 1) / n * np.asarray(nbytes, dtype=np.float64) / bus_s


def tree_allreduce_s(nbytes, n: int, nodes: int, bus_s: float, launch_s: float):
    """NCCL's tree all-reduce of `nbytes` over n ranks, n / nodes per node, on `nodes` nodes (more than one)."""
    latency_s = launch_s + 2 * ((n // nodes - 1) * TREE_INTRA_STEP_S + int(math.log2(nodes)) * TREE_INTER_STEP_S)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    return latency_s + nbytes / (TREE_BUS_FACTOR * TREE_ALGO_RATIO * bus_s * tree_correction(nbytes))


def allreduce_s(nbytes, n: int, nodes: int, bus_s: float, intra_step_s: float, inter_step_s: float, launch_s: float):
    """NCCL's all-reduce across nodes: its ring or its tree, whichever its model times faster for each size."""
    return np.minimum(ring_allreduce_s(nbytes, n, nodes, bus_s, intra_step_s, inter_step_s, launch_s),
                      tree_allreduce_s(nbytes, n, nodes, bus_s, launch_s))


def ring_reduce_scatter_s(nbytes, n: int, nodes: int, bus_s: float, intra_step_s: float, inter_step_s: float, launch_s: float):
    """NCCL's flat ring reduce-scatter (or all-gather: the same steps) of `nbytes`, the whole tensor, across nodes: n - 1
    steps, nodes - 1 of them over the network; NCCL has no tree for these."""
    latency_s = _ring_latency_s(n - 1, nodes - 1, intra_step_s, inter_step_s, launch_s)
    return latency_s + (n - 1) / n * np.asarray(nbytes, dtype=np.float64) / bus_s


def nvls_allreduce_s(nbytes, n: int, bus_s: float):
    """NCCL's NVLink SHARP all-reduce of `nbytes` over n ranks of one node: the switch reduces, so its bytes move at
    the measured NVLS bus bandwidth (nccl-tests' busbw), after NVLS_LATENCY_S."""
    return NVLS_LATENCY_S + 2.0 * (n - 1) / n * np.asarray(nbytes, dtype=np.float64) / bus_s
