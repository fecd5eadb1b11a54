"""cluster.*: the devices, their nodes or torus, the links and the collective algorithm."""

from __future__ import annotations

import math

from phaze.checks.values import choice, fraction, positive
from phaze.config_values import ConfigError, positive_ints
from phaze.cost.network import ALGORITHMS


def check_cluster(c) -> None:
    """Device count, node size, link bandwidths and the collective algorithm."""
    positive_ints(c.devices, "cluster.devices")
    positive_ints(c.node_size, "cluster.node_size")
    if c.node_size < c.devices and c.devices % c.node_size:
        raise ConfigError(f"cluster.devices={c.devices}: allowed values are multiples of cluster.node_size={c.node_size}")
    positive(c.intra_node_gbps, "cluster.intra_node_gbps")
    positive(c.inter_node_gbps, "cluster.inter_node_gbps")
    positive(c.link_latency_s, "cluster.link_latency_s", allow_zero=True)
    positive(c.collective_launch_s, "cluster.collective_launch_s", allow_zero=True)
    if c.inter_node_latency_s is not None:
        positive(c.inter_node_latency_s, "cluster.inter_node_latency_s", allow_zero=True)
    fraction(c.intra_node_efficiency, "cluster.intra_node_efficiency")
    fraction(c.inter_node_efficiency, "cluster.inter_node_efficiency")
    choice(c.collective_algorithm, "cluster.collective_algorithm", ALGORITHMS)
    if c.torus_dims:
        positive_ints(list(c.torus_dims), "cluster.torus_dims")
        if math.prod(c.torus_dims) != c.devices:
            raise ConfigError(f"cluster.torus_dims={list(c.torus_dims)}: allowed values have product cluster.devices={c.devices}")
        if c.intra_node_gbps != c.inter_node_gbps:
            raise ConfigError(f"cluster.inter_node_gbps={c.inter_node_gbps}: on a torus every link runs at one rate; allowed value "
                              f"cluster.intra_node_gbps={c.intra_node_gbps}")
