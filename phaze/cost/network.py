"""Collective and point-to-point times over a flat or two-level (node / cluster) network.

Ring algorithms (Patarasuk & Yuan 2009; NCCL's ring): an all-reduce of B bytes over n devices moves
2(n-1)/n * B per device; reduce-scatter and all-gather move (n-1)/n * B. On a hierarchy the
all-reduce is reduce-scatter inside the node, all-reduce of the 1/k shard across nodes (k parallel
rings, one per local rank), then all-gather inside the node. Each ring step pays `link_latency_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GB = 1e9
"""Bandwidths in the cluster config are in GB/s (10^9 bytes per second), per chip and direction."""


@dataclass(frozen=True)
class Network:
    """The links of a cluster: `node_size` chips share fast links; slower links join the nodes."""

    devices: int
    node_size: int
    intra_bytes_s: float
    inter_bytes_s: float
    latency_s: float = 0.0

    @classmethod
    def from_cfg(cls, cluster) -> "Network":
        if cluster.node_size <= 0 or cluster.devices <= 0:
            raise ValueError(f"cluster.devices and cluster.node_size must be positive, got {cluster.devices}, {cluster.node_size}")
        return cls(
            devices=int(cluster.devices),
            node_size=int(min(cluster.node_size, cluster.devices)),
            intra_bytes_s=float(cluster.intra_node_gbps) * GB,
            inter_bytes_s=float(cluster.inter_node_gbps) * GB,
            latency_s=float(cluster.link_latency_s),
        )

    def members_per_node(self, n: int, stride: int = 1) -> int:
        """How many of a group's n members share a node, for members `stride` devices apart."""
        return int(max(1, min(n, self.node_size // max(1, stride))))

    def allreduce_s(self, nbytes, n: int, stride: int = 1):
        """Ring all-reduce time of `nbytes` (scalar or array) over n devices `stride` apart."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if n <= 1:
            return np.zeros_like(nbytes) if nbytes.ndim else 0.0
        k = self.members_per_node(n, stride)
        nodes = n // k
        t = 2.0 * (k - 1) / k * nbytes / self.intra_bytes_s + 2 * (k - 1) * self.latency_s
        if nodes > 1:
            t = t + 2.0 * (nodes - 1) / nodes * (nbytes / k) / self.inter_bytes_s + 2 * (nodes - 1) * self.latency_s
        return t if t.ndim else float(t)

    def reduce_scatter_s(self, nbytes, n: int, stride: int = 1):
        """Ring reduce-scatter (or all-gather: same traffic) of `nbytes` over n devices: half an all-reduce."""
        t = self.allreduce_s(nbytes, n, stride)
        return t / 2.0

    all_gather_s = reduce_scatter_s

    def p2p_s(self, nbytes, same_node: bool):
        """Send/receive of `nbytes` between two chips, inside a node or across nodes."""
        bw = self.intra_bytes_s if same_node else self.inter_bytes_s
        t = np.asarray(nbytes, dtype=np.float64) / bw + self.latency_s
        return t if t.ndim else float(t)
