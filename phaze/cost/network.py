"""Collective and point-to-point times over a flat or two-level (node / cluster) network.

Ring algorithms (Patarasuk & Yuan 2009; NCCL's ring): an all-reduce of B bytes over n devices moves
2(n-1)/n * B per device in 2(n-1) steps; reduce-scatter and all-gather move (n-1)/n * B in n-1
steps. Tree (NCCL's double binary tree, Sanders et al. 2009): an all-reduce moves 2B per device in
2*ceil(log2 n) steps. On a hierarchy the all-reduce is a ring reduce-scatter inside the node, an
all-reduce of the 1/k shard across nodes (k parallel groups, one per local rank; ring or tree), then
a ring all-gather inside the node. Each step pays `link_latency_s`.
All-to-all (an MoE layer's dispatch and combine): each of the n devices sends 1/n of its B bytes to
every other member (Thakur, Rabenseifner & Gropp 2005, pairwise exchange, n - 1 steps). NCCL posts all
the sends at once (grouped ncclSend / ncclRecv), so the shares to peers in the node (over the node's
links) and to peers in other nodes (over the chip's inter-node link) move concurrently: the slower of
the two sets the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GB = 1e9
"""Bandwidths in the cluster config are in GB/s (10^9 bytes per second), per chip and direction."""

ALGORITHMS = ("ring", "tree", "best")


def _out(t):
    return t if np.ndim(t) else float(t)


@dataclass(frozen=True)
class Network:
    """The links of a cluster: `node_size` chips share fast links; slower links join the nodes."""

    devices: int
    node_size: int
    intra_bytes_s: float
    inter_bytes_s: float
    latency_s: float = 0.0
    algorithm: str = "ring"

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"cluster.collective_algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if min(self.intra_bytes_s, self.inter_bytes_s) <= 0 or self.latency_s < 0:
            raise ValueError("link bandwidths must be positive and the link latency non-negative")

    @classmethod
    def from_cfg(cls, cluster) -> "Network":
        """The cluster's links at their achievable rates (line rate x efficiency)."""
        if cluster.node_size <= 0 or cluster.devices <= 0:
            raise ValueError(
                f"cluster.devices and cluster.node_size must be positive, got {cluster.devices}, {cluster.node_size}"
            )
        return cls(
            devices=int(cluster.devices),
            node_size=int(min(cluster.node_size, cluster.devices)),
            intra_bytes_s=float(cluster.intra_node_gbps) * GB * float(cluster.get("intra_node_efficiency", 1.0)),
            inter_bytes_s=float(cluster.inter_node_gbps) * GB * float(cluster.get("inter_node_efficiency", 1.0)),
            latency_s=float(cluster.link_latency_s),
            algorithm=str(getattr(cluster, "collective_algorithm", "ring")),
        )

    def members_per_node(self, n: int, stride: int = 1) -> int:
        """How many of a group's n members share a node, for members `stride` devices apart."""
        return int(max(1, min(n, self.node_size // max(1, stride))))

    def _ring_allreduce(self, nbytes, n: int, bytes_s: float):
        return 2.0 * (n - 1) / n * nbytes / bytes_s + 2 * (n - 1) * self.latency_s

    def _tree_allreduce(self, nbytes, n: int, bytes_s: float):
        return 2.0 * nbytes / bytes_s + 2 * math.ceil(math.log2(n)) * self.latency_s

    def _level_allreduce(self, nbytes, n: int, bytes_s: float):
        """All-reduce among n peers on links of `bytes_s`, by the configured algorithm."""
        if n <= 1:
            return np.zeros_like(nbytes)
        if self.algorithm == "ring":
            return self._ring_allreduce(nbytes, n, bytes_s)
        if self.algorithm == "tree":
            return self._tree_allreduce(nbytes, n, bytes_s)
        return np.minimum(self._ring_allreduce(nbytes, n, bytes_s), self._tree_allreduce(nbytes, n, bytes_s))

    def allreduce_s(self, nbytes, n: int, stride: int = 1):
        """All-reduce time of `nbytes` (scalar or array) over n devices `stride` apart."""
        return self.group_allreduce_s(nbytes, n, self.members_per_node(n, stride))

    def group_allreduce_s(self, nbytes, n: int, per_node: int):
        """All-reduce over a group of n devices of which `per_node` share each node."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if n <= 1:
            return _out(np.zeros_like(nbytes))
        k = int(max(1, min(n, per_node)))
        nodes = math.ceil(n / k)
        if nodes == 1:
            return _out(self._level_allreduce(nbytes, k, self.intra_bytes_s))
        intra = self._ring_allreduce(nbytes, k, self.intra_bytes_s) if k > 1 else np.zeros_like(nbytes)
        return _out(intra + self._level_allreduce(nbytes / k, nodes, self.inter_bytes_s))

    def reduce_scatter_s(self, nbytes, n: int, stride: int = 1):
        """Ring reduce-scatter (or all-gather: same traffic) of `nbytes` over n devices: half a ring all-reduce."""
        return self.group_reduce_scatter_s(nbytes, n, self.members_per_node(n, stride))

    def group_reduce_scatter_s(self, nbytes, n: int, per_node: int):
        """Ring reduce-scatter (or all-gather) of `nbytes` (the whole tensor) over n devices, `per_node` per node."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if n <= 1:
            return _out(np.zeros_like(nbytes))
        k = int(max(1, min(n, per_node)))
        nodes = math.ceil(n / k)
        t = (k - 1) / k * nbytes / self.intra_bytes_s + (k - 1) * self.latency_s
        if nodes > 1:
            t = t + (nodes - 1) / nodes * (nbytes / k) / self.inter_bytes_s + (nodes - 1) * self.latency_s
        return _out(t)

    all_gather_s = reduce_scatter_s
    group_all_gather_s = group_reduce_scatter_s

    def all_to_all_s(self, nbytes, n: int, stride: int = 1):
        """All-to-all of `nbytes` per device (what each sends, its own share included) over n devices `stride` apart."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if n <= 1:
            return _out(np.zeros_like(nbytes))
        k = self.members_per_node(n, stride)
        intra = (k - 1) / n * nbytes / self.intra_bytes_s
        inter = (n - k) / n * nbytes / self.inter_bytes_s
        return _out(np.maximum(intra, inter) + (n - 1) * self.latency_s)

    def p2p_s(self, nbytes, same_node: bool):
        """Send/receive of `nbytes` between two chips, inside a node or across nodes."""
        bw = self.intra_bytes_s if same_node else self.inter_bytes_s
        return _out(np.asarray(nbytes, dtype=np.float64) / bw + self.latency_s)
