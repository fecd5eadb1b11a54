"""Collective and point-to-point times over a flat, two-level (node / cluster) or torus network.

Ring algorithms (Patarasuk & Yuan 2009; NCCL's ring): an all-reduce of B bytes over n devices moves
2(n-1)/n * B per device in 2(n-1) steps; reduce-scatter and all-gather move (n-1)/n * B in n-1
steps. Tree (NCCL's double binary tree, Sanders et al. 2009): an all-reduce moves 2B per device in
2*ceil(log2 n) steps. On a hierarchy the all-reduce is a ring reduce-scatter inside the node, an
all-reduce of the 1/k shard across nodes (k parallel groups, one per local rank; ring or tree), then
a ring all-gather inside the node. Each step pays its level's latency (inside a node or on a torus
`latency_s`, across nodes `inter_latency_s`) and each collective or send its launch (`launch_latency_s`):
NCCL's own cost model (src/graph/tuning.cc: a base latency per call plus one per ring step, by link type).
All-to-all (an MoE layer's dispatch and combine): each of the n devices sends 1/n of its B bytes to
every other member (Thakur, Rabenseifner & Gropp 2005, pairwise exchange, n - 1 steps). NCCL posts all
the sends at once (grouped ncclSend / ncclRecv), so the shares to peers in the node (over the node's
links) and to peers in other nodes (over the chip's inter-node link) move concurrently: the slower of
the two sets the time.

A network is a nest of levels. Two-level: the node (`node_size` chips on fast links), then the nodes.
Torus (TPU pods; Jouppi et al., ISCA 2023): one level per dimension, chips numbered x fastest, every link
at one rate. A group's members spread over the levels (how many share each nested domain), and each
collective runs level by level, innermost first, on 1/(members below) of the data: the hierarchical
ring above, and on a torus the ring per dimension (Ying et al., "Image Classification at Supercomputer
Scale", 2018, 2-D torus all-reduce). A ring over a whole torus dimension closes through the wraparound
link and runs both ways at once (twice one link's rate); over part of a dimension it is a line, on which
a ring uses each link once per direction (one link's rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from phaze.cost import nccl
from phaze.schema.choices import CollectiveAlgorithm

GB = 1e9
"""Bandwidths in the cluster config are in GB/s (10^9 bytes per second), per chip and direction."""

ALGORITHMS = CollectiveAlgorithm.values()

TORUS_RING_DIRECTIONS = 2
"""A ring over a whole torus dimension (more than two chips, so the wraparound is a third link) sends half
the data each way round: twice one link's rate per chip."""


def nic_share(cluster) -> float:
    """The share of a NIC each chip of a node has: cluster.rails NICs over cluster.node_size chips (1 without rails)."""
    rails = getattr(cluster, "rails", None)
    return 1.0 if rails is None else int(rails) / int(cluster.node_size)


def _out(t):
    return t if np.ndim(t) else float(t)


@dataclass(frozen=True)
class Network:
    """The links of a cluster: `node_size` chips share fast links; slower links join the nodes. With
    `torus_dims` the chips form a torus instead (node_size = devices, every link at intra = inter)."""

    devices: int
    node_size: int
    intra_bytes_s: float
    inter_bytes_s: float
    latency_s: float = 0.0
    algorithm: str = "ring"
    torus_dims: tuple[int, ...] = ()
    inter_latency_s: float | None = None
    """Per step across nodes; None: `latency_s`."""
    launch_latency_s: float = 0.0
    """Once per collective or point-to-point transfer."""
    nvls_bytes_s: float | None = None
    """NVLink SHARP's all-reduce bus bandwidth inside a node (algorithm nccl); None: none."""
    rail_group_nodes: int | None = None
    """Nodes under one set of rail (leaf) switches; a group over more nodes crosses the spine. None: every node."""
    spine_oversubscription: float = 1.0
    """The leaves' bandwidth over the spine's (1: non-blocking): a group crossing the spine runs at inter_bytes_s over it."""

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"cluster.collective_algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.inter_latency_s is None:
            object.__setattr__(self, "inter_latency_s", self.latency_s)
        if min(self.intra_bytes_s, self.inter_bytes_s) <= 0 or min(self.latency_s, self.inter_latency_s, self.launch_latency_s) < 0:
            raise ValueError("link bandwidths must be positive and the latencies non-negative")
        if self.torus_dims and self.algorithm == "nccl":
            raise ValueError("cluster.collective_algorithm=nccl: NCCL runs on nodes of GPUs; a torus allows ring, tree or best")
        if self.torus_dims and (math.prod(self.torus_dims) != self.devices or min(self.torus_dims) < 1):
            raise ValueError(f"cluster.torus_dims {list(self.torus_dims)} must be positive with product cluster.devices={self.devices}")

    @classmethod
    def from_cfg(cls, cluster) -> "Network":
        """The cluster's links at their achievable rates (line rate x efficiency)."""
        if cluster.node_size <= 0 or cluster.devices <= 0:
            raise ValueError(
                f"cluster.devices and cluster.node_size must be positive, got {cluster.devices}, {cluster.node_size}"
            )
        torus = tuple(int(d) for d in getattr(cluster, "torus_dims", []) or [])
        return cls(
            devices=int(cluster.devices),
            node_size=int(cluster.devices if torus else min(cluster.node_size, cluster.devices)),
            intra_bytes_s=float(cluster.intra_node_gbps) * GB * float(getattr(cluster, "intra_node_efficiency", 1.0)),
            inter_bytes_s=float(cluster.inter_node_gbps) * GB * float(getattr(cluster, "inter_node_efficiency", 1.0)) * nic_share(cluster),
            latency_s=float(cluster.link_latency_s),
            algorithm=str(getattr(cluster, "collective_algorithm", "ring")),
            torus_dims=torus,
            inter_latency_s=None if getattr(cluster, "inter_node_latency_s", None) is None else float(cluster.inter_node_latency_s),
            launch_latency_s=float(getattr(cluster, "collective_launch_s", 0.0)),
            nvls_bytes_s=None if getattr(cluster, "nvls_bus_gbps", None) is None else float(cluster.nvls_bus_gbps) * GB,
            rail_group_nodes=getattr(cluster, "rail_group_nodes", None),
            spine_oversubscription=float(getattr(cluster, "spine_oversubscription", 1.0)),
        )

    @property
    def domains(self) -> tuple[int, ...]:
        """Sizes of the nested domains below the whole network: the node, or the torus's first dimensions' products."""
        if self.torus_dims:
            return tuple(math.prod(self.torus_dims[: i + 1]) for i in range(len(self.torus_dims) - 1))
        return (self.node_size,) if self.node_size < self.devices else ()

    def spread(self, n: int, stride: int = 1) -> tuple[int, ...]:
        """How many of a group's n members, `stride` devices apart, share each of `domains`."""
        return tuple(int(max(1, min(n, d // max(1, stride)))) for d in self.domains)

    def _counts(self, n: int, within) -> list[int]:
        """How many of the group's n members each level holds, innermost first (1 where the group does not span it):
        `within` members share each domain (an int: per node), the rest spread over the whole network."""
        within = (within,) if np.ndim(within) == 0 else tuple(within)
        counts, below = [], 1
        for inside in within[: len(self.domains)]:
            inside = int(max(below, min(n, inside)))
            counts.append(inside // below)
            below = inside
        counts.append(math.ceil(n / below))
        return counts

    def _levels(self, n: int, within) -> list[tuple[int, float, float]]:
        """(members, bytes/s, latency per step) of each level the group spans, innermost first (_counts)."""
        counts = self._counts(n, within)
        if self.torus_dims:
            rates = [self.intra_bytes_s * (TORUS_RING_DIRECTIONS if c == dim > 2 else 1) for c, dim in zip(counts, self.torus_dims)]
            latencies = [self.latency_s] * len(counts)
        else:
            rates = [self.intra_bytes_s, self.inter_rate(counts[-1])][: len(counts)]
            latencies = [self.latency_s, self.inter_latency_s][: len(counts)]
        return [(c, r, lat) for c, r, lat in zip(counts, rates, latencies) if c > 1]

    def _nccl_spans(self, n: int, within) -> tuple[int, float] | None:
        """(nodes, bus bandwidth) of a group of n spanning several nodes under cluster.collective_algorithm=nccl
        (phaze.cost.nccl times it); None otherwise (one node, or another algorithm: the levels' collectives)."""
        if self.algorithm != "nccl" or not self.domains:
            return None
        per_node, nodes = self._counts(n, within)
        return (nodes, nccl.bus_bytes_s(per_node, self.intra_bytes_s, self.inter_rate(nodes))) if nodes > 1 else None

    def inter_rate(self, nodes: int) -> float:
        """Bytes/s per chip across nodes for a group over `nodes` nodes, taken as consecutive (Megatron's rank order:
        TP, CP, DP, then PP outermost): the NIC's share, over the spine's oversubscription once the nodes span more than
        one rail group (a ring runs at its slowest link)."""
        crosses = self.rail_group_nodes is not None and nodes > self.rail_group_nodes
        return self.inter_bytes_s / self.spine_oversubscription if crosses else self.inter_bytes_s

    @staticmethod
    def _ring_allreduce(nbytes, n: int, bytes_s: float, step_s: float):
        return 2.0 * (n - 1) / n * nbytes / bytes_s + 2 * (n - 1) * step_s

    @staticmethod
    def _tree_allreduce(nbytes, n: int, bytes_s: float, step_s: float):
        return 2.0 * nbytes / bytes_s + 2 * math.ceil(math.log2(n)) * step_s

    def _level_allreduce(self, nbytes, n: int, bytes_s: float, step_s: float):
        """All-reduce among n peers on links of `bytes_s` and `step_s` per step, by the configured algorithm (NCCL's
        inside one node: its ring)."""
        if self.algorithm in ("ring", "nccl"):
            return self._ring_allreduce(nbytes, n, bytes_s, step_s)
        if self.algorithm == "tree":
            return self._tree_allreduce(nbytes, n, bytes_s, step_s)
        return np.minimum(self._ring_allreduce(nbytes, n, bytes_s, step_s), self._tree_allreduce(nbytes, n, bytes_s, step_s))

    def allreduce_s(self, nbytes, n: int, stride: int = 1):
        """All-reduce time of `nbytes` (scalar or array) over n devices `stride` apart."""
        return self.group_allreduce_s(nbytes, n, self.spread(n, stride))

    def group_allreduce_s(self, nbytes, n: int, within):
        """All-reduce over a group of n devices of which `within` share each domain (an int: per node):
        a ring reduce-scatter and all-gather per inner level around the outermost level's all-reduce."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        t = np.zeros_like(nbytes)
        if n <= 1:
            return _out(t)
        spans = self._nccl_spans(n, within)
        if spans is not None:
            return _out(nccl.allreduce_s(nbytes, n, *spans, self.latency_s, self.inter_latency_s, self.launch_latency_s))
        levels = self._levels(n, within)
        total = nbytes
        for i, (c, rate, step_s) in enumerate(levels):
            level = self._level_allreduce if i == len(levels) - 1 else self._ring_allreduce
            t = t + level(nbytes, c, rate, step_s)
            nbytes = nbytes / c
        t = t + self.launch_latency_s
        if self.algorithm == "nccl" and self.nvls_bytes_s is not None:
            t = np.minimum(t, nccl.nvls_allreduce_s(total, n, self.nvls_bytes_s))
        return _out(t)

    def reduce_scatter_s(self, nbytes, n: int, stride: int = 1):
        """Ring reduce-scatter (or all-gather: same traffic) of `nbytes` over n devices: half a ring all-reduce."""
        return self.group_reduce_scatter_s(nbytes, n, self.spread(n, stride))

    def group_reduce_scatter_s(self, nbytes, n: int, within):
        """Ring reduce-scatter (or all-gather) of `nbytes` (the whole tensor) over n devices, `within` per domain."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        t = np.zeros_like(nbytes)
        if n <= 1:
            return _out(t)
        spans = self._nccl_spans(n, within)
        if spans is not None:
            return _out(nccl.ring_reduce_scatter_s(nbytes, n, *spans, self.latency_s, self.inter_latency_s, self.launch_latency_s))
        for c, rate, step_s in self._levels(n, within):
            t = t + (c - 1) / c * nbytes / rate + (c - 1) * step_s
            nbytes = nbytes / c
        return _out(t + self.launch_latency_s)

    all_gather_s = reduce_scatter_s
    group_all_gather_s = group_reduce_scatter_s

    def all_to_all_s(self, nbytes, n: int, stride: int = 1):
        """All-to-all of `nbytes` per device (what each sends, its own share included) over n devices `stride`
        apart: the share for the peers first met at each level crosses that level's links, all at once; each
        of the n - 1 exchanges pays its peer's level latency."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if n <= 1:
            return _out(np.zeros_like(nbytes))
        t, below, steps_s = np.zeros_like(nbytes), 1, 0.0
        for c, rate, step_s in self._levels(n, self.spread(n, stride)):
            t = np.maximum(t, (below * c - below) / n * nbytes / rate)
            steps_s += (below * c - below) * step_s
            below *= c
        return _out(t + steps_s + self.launch_latency_s)

    def p2p_s(self, nbytes, same_node: bool):
        """Send/receive of `nbytes` between two chips, inside a node or across nodes (on a torus: one link)."""
        bw, step_s = (self.intra_bytes_s, self.latency_s) if same_node else (self.inter_bytes_s, self.inter_latency_s)
        return _out(np.asarray(nbytes, dtype=np.float64) / bw + step_s + self.launch_latency_s)
