"""cluster=: the devices and the network between them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from omegaconf import MISSING


@dataclass
class ClusterCfg:
    """The devices and the network between them: flat (PHAZE), a two-level hierarchy or a torus."""

    name: str = MISSING
    devices: int = MISSING
    # Chips per node sharing the fast intra-node links; equal to `devices` for a flat network.
    node_size: int = MISSING
    intra_node_gbps: float = MISSING  # GB/s per chip, each direction
    inter_node_gbps: float = MISSING  # GB/s per chip, each direction
    # Achievable fraction of each link rate for large collectives (NCCL's bus bandwidth over the line rate), in (0, 1].
    intra_node_efficiency: float = 1.0
    inter_node_efficiency: float = 1.0
    # Latency per collective step inside a node (or on a torus), per step across nodes (null: the same), and per
    # collective or send/receive call (NCCL's cost model: a base latency per call plus one per ring step by link type).
    link_latency_s: float = 0.0
    inter_node_latency_s: Optional[float] = None
    collective_launch_s: float = 0.0
    # Collective algorithm: ring | tree (double binary tree) | best (the faster of the two per call).
    collective_algorithm: str = "ring"
    # A torus of these dimensions (x fastest, product = devices) instead of nodes; both link rates are then one link's.
    torus_dims: List[int] = field(default_factory=list)
    source: str = ""
