"""cluster=: the devices and the network between them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

from phaze.config_values import ConfigError, choice, fraction, positive, positive_ints
from phaze.schema.choices import CollectiveAlgorithm
from phaze.schema.fields import MISSING, complete


@dataclass
class ClusterCfg:
    """The devices and the network between them: flat (PHAZE), a two-level hierarchy or a torus."""

    name: str = MISSING
    devices: int = MISSING
    # Chips per node sharing the fast intra-node links; equal to `devices` for a flat network.
    node_size: int = MISSING
    intra_node_gbps: float = MISSING  # GB/s per chip, each direction
    inter_node_gbps: float = MISSING  # GB/s per NIC, each direction (one NIC per chip unless `rails` says fewer)
    # Achievable fraction of each link rate for large collectives (NCCL's bus bandwidth over the line rate), in (0, 1].
    intra_node_efficiency: float = 1.0
    inter_node_efficiency: float = 1.0
    # Latency per collective step inside a node (or on a torus), per step across nodes (null: the same), and per
    # collective or send/receive call (NCCL's cost model: a base latency per call plus one per ring step by link type).
    link_latency_s: float = 0.0
    inter_node_latency_s: Optional[float] = None
    collective_launch_s: float = 0.0
    # Collective algorithm: ring | tree (double binary tree) | best (the faster of the two per call), each level by level;
    # nccl: across nodes NCCL's flat ring or its tree, whichever its own model times faster (phaze.cost.nccl).
    collective_algorithm: str = "ring"
    # A torus of these dimensions (x fastest, product = devices) instead of nodes; both link rates are then one link's.
    torus_dims: List[int] = field(default_factory=list)
    # NVLink SHARP (NVLS): the all-reduce bus bandwidth (GB/s, nccl-tests' busbw) the node's NVSwitches reach reducing
    # in the switch, read under collective_algorithm=nccl only (NCCL's NVLS algorithm inside a node); null: none.
    nvls_bus_gbps: Optional[float] = None
    # A rail-optimised fat tree (NVIDIA DGX SuperPOD): `rails` NICs per node (null: one per chip), each on its own rail
    # of leaf switches, the node's chips sharing them evenly; `rail_group_nodes` nodes under one set of leaves (a
    # scalable unit; null: every node), the spine joining the groups at 1/`spine_oversubscription` of the leaves'
    # bandwidth (1: non-blocking).
    rails: Optional[int] = None
    rail_group_nodes: Optional[int] = None
    spine_oversubscription: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        """The cluster's own rules: device and node counts that fit, positive link rates, efficiencies in (0, 1], a known
        collective algorithm, and a torus whose sides multiply to the devices over links of one rate."""
        if not complete(self):
            return
        positive_ints(self.devices, "cluster.devices")
        positive_ints(self.node_size, "cluster.node_size")
        if self.node_size < self.devices and self.devices % self.node_size:
            raise ConfigError(f"cluster.devices={self.devices}: allowed values are multiples of cluster.node_size={self.node_size}")
        positive(self.intra_node_gbps, "cluster.intra_node_gbps")
        positive(self.inter_node_gbps, "cluster.inter_node_gbps")
        positive(self.link_latency_s, "cluster.link_latency_s", allow_zero=True)
        positive(self.collective_launch_s, "cluster.collective_launch_s", allow_zero=True)
        if self.inter_node_latency_s is not None:
            positive(self.inter_node_latency_s, "cluster.inter_node_latency_s", allow_zero=True)
        fraction(self.intra_node_efficiency, "cluster.intra_node_efficiency")
        fraction(self.inter_node_efficiency, "cluster.inter_node_efficiency")
        choice(self.collective_algorithm, "cluster.collective_algorithm", CollectiveAlgorithm.values())
        if self.nvls_bus_gbps is not None:
            positive(self.nvls_bus_gbps, "cluster.nvls_bus_gbps")
        self._check_fabric()
        if self.torus_dims:
            if self.collective_algorithm == "nccl":
                raise ConfigError("cluster.collective_algorithm=nccl: NCCL runs on nodes of GPUs; on a torus allowed values are "
                                  f"{[a for a in CollectiveAlgorithm.values() if a != 'nccl']}")
            positive_ints(list(self.torus_dims), "cluster.torus_dims")
            if math.prod(self.torus_dims) != self.devices:
                raise ConfigError(f"cluster.torus_dims={list(self.torus_dims)}: allowed values have product cluster.devices={self.devices}")
            if self.intra_node_gbps != self.inter_node_gbps:
                raise ConfigError(f"cluster.inter_node_gbps={self.inter_node_gbps}: on a torus every link runs at one rate; allowed value "
                                  f"cluster.intra_node_gbps={self.intra_node_gbps}")

    def _check_fabric(self) -> None:
        """Rails that divide a node's chips, a positive rail group, a spine at most as fast as the leaves."""
        divisors = [d for d in range(1, self.node_size + 1) if self.node_size % d == 0]
        if self.rails is not None and (isinstance(self.rails, bool) or self.rails not in divisors):
            raise ConfigError(f"cluster.rails={self.rails!r}: allowed values are the divisors of cluster.node_size={self.node_size} "
                              f"({', '.join(map(str, divisors))}), or null (one NIC per chip)")
        if self.rail_group_nodes is not None:
            positive_ints(self.rail_group_nodes, "cluster.rail_group_nodes")
        if isinstance(self.spine_oversubscription, bool) or not self.spine_oversubscription >= 1:
            raise ConfigError(f"cluster.spine_oversubscription={self.spine_oversubscription!r}: allowed values are numbers >= 1 "
                              "(1: a non-blocking spine)")
