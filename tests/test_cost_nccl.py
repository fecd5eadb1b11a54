"""NCCL's own model of collectives across nodes (cluster.collective_algorithm=nccl, phaze.cost.nccl) against
hand-computed values: its flat ring and its tree on a rail-optimised fabric at two scales, and its switch between them
by message size and by the group's span."""

from __future__ import annotations

import pytest

from phaze.config_values import ConfigError
from phaze.cost import Network
from phaze.schema.cluster import ClusterCfg
from tests.conftest import compose_cfg

MIB, GIB = 2**20, 2**30
NVLINK4_S, NDR_S = 450e9 * 0.822, 50e9 * 0.94
"""DGX H100's NVLink and NDR rates at NCCL's bus-bandwidth efficiency (conf/cluster/dgx_h100.yaml)."""
CALL_S, NVLINK_STEP_S, NET_STEP_S = 8.4e-6, 3.4e-6, 14e-6
"""NCCL's base latency and its ring's per-step latencies, Simple protocol (conf/cluster/dgx_h100.yaml)."""
TREE_NVLINK_STEP_S, TREE_NET_STEP_S = 4.0e-6, 14e-6
TREE_ALGO_BYTES_S = 0.92 * 0.5 * NVLINK4_S
"""The tree's algorithm bandwidth on 8-GPU nodes: 0.92 of the bus bandwidth (the NVLink rate, below 8 NICs of 47 GB/s),
half of it as every byte goes up and down."""


def h100(devices: int = 2048, algorithm: str = "nccl") -> Network:
    return Network.from_cfg(compose_cfg("cluster=dgx_h100", f"cluster.devices={devices}",
                                        f"cluster.collective_algorithm={algorithm}").cluster)


def test_four_nodes_large_allreduce_is_the_flat_ring():
    """32 GPUs on 4 nodes, 8 GiB: the ring's 62 steps (6 over the network) at NCCL's 1.4 plateau, and its bytes at the
    bus bandwidth (NVLink 369.9 GB/s, below the node's 8 NICs): 45.39 ms, against the tree's 50.60 ms."""
    net, nbytes = h100(), 8 * GIB
    ring_s = 1.4 * (CALL_S + 56 * NVLINK_STEP_S + 6 * NET_STEP_S) + 2 * 31 / 32 * nbytes / NVLINK4_S
    tree_s = CALL_S + 2 * (7 * TREE_NVLINK_STEP_S + 2 * TREE_NET_STEP_S) + nbytes / TREE_ALGO_BYTES_S
    assert ring_s == pytest.approx(45.389e-3, rel=1e-4) and tree_s == pytest.approx(50.604e-3, rel=1e-4)
    assert net.allreduce_s(nbytes, 32) == pytest.approx(ring_s, rel=1e-12)
    # nccl-tests' bus bandwidth of it, 366.7 GB/s; the levels one after another (cluster.collective_algorithm=ring) 222.
    assert 2 * 31 / 32 * nbytes / net.allreduce_s(nbytes, 32) / 1e9 == pytest.approx(366.7, abs=0.1)
    assert 2 * 31 / 32 * nbytes / h100(algorithm="ring").allreduce_s(nbytes, 32) / 1e9 == pytest.approx(221.8, abs=0.1)


def test_248_nodes_allreduce_is_the_tree():
    """1,984 GPUs on 248 nodes, 512 MiB: the ring's 3,966 steps take 26.2 ms of latency alone; the tree's
    2 x (7 NVLink + floor(log2 248) = 7 network steps) take 260.4 us, and its bytes 3.155 ms: 3.416 ms in all."""
    net, nbytes = h100(devices=1984), 512 * MIB
    tree_s = CALL_S + 2 * (7 * TREE_NVLINK_STEP_S + 7 * TREE_NET_STEP_S) + nbytes / TREE_ALGO_BYTES_S
    ring_s = 1.4 * (CALL_S + (3966 - 494) * NVLINK_STEP_S + 494 * NET_STEP_S) + 2 * 1983 / 1984 * nbytes / NVLINK4_S
    assert tree_s == pytest.approx(3.4156e-3, rel=1e-4) and ring_s == pytest.approx(29.12e-3, rel=1e-3)
    assert net.allreduce_s(nbytes, 1984) == pytest.approx(tree_s, rel=1e-12)


def test_the_switch_follows_size_and_span():
    """At 4 nodes the tree wins at 64 MiB (its correction there is 0.8: 613.4 us against the ring's 747.4 us) and the
    ring at 1 GiB; at 248 nodes the tree wins at 1 GiB too, the ring's steps being 4,000."""
    net = h100()
    small = 64 * MIB
    tree_s = CALL_S + 2 * (7 * TREE_NVLINK_STEP_S + 2 * TREE_NET_STEP_S) + small / (TREE_ALGO_BYTES_S * 0.8)
    ring_s = 1.4 * (CALL_S + 56 * NVLINK_STEP_S + 6 * NET_STEP_S) + 2 * 31 / 32 * small / NVLINK4_S
    assert tree_s == pytest.approx(613.4e-6, rel=1e-3) and ring_s == pytest.approx(747.4e-6, rel=1e-3)
    assert net.allreduce_s(small, 32) == pytest.approx(tree_s, rel=1e-12)
    big = float(GIB)
    assert net.allreduce_s(big, 32) == pytest.approx(1.4 * (CALL_S + 56 * NVLINK_STEP_S + 6 * NET_STEP_S)
                                                      + 2 * 31 / 32 * big / NVLINK4_S, rel=1e-12)
    wide = h100(devices=1984)
    assert wide.allreduce_s(big, 1984) == pytest.approx(CALL_S + 2 * (7 * TREE_NVLINK_STEP_S + 7 * TREE_NET_STEP_S)
                                                         + big / TREE_ALGO_BYTES_S, rel=1e-12)


def test_one_rank_per_node_runs_on_its_own_nic():
    """A data-parallel group 8 apart (TP 8) has one member per node: its bus bandwidth is one NIC's 47 GB/s, and its
    tree has no NVLink steps."""
    net, nbytes = h100(), 2 * GIB
    tree_s = CALL_S + 2 * 8 * TREE_NET_STEP_S + nbytes / (0.92 * 0.5 * NDR_S)
    ring_s = 1.4 * (CALL_S + 2 * 255 * NET_STEP_S) + 2 * 255 / 256 * nbytes / NDR_S
    assert net.allreduce_s(nbytes, 256, stride=8) == pytest.approx(min(tree_s, ring_s), rel=1e-12)


def test_reduce_scatter_is_the_flat_ring():
    """NCCL has no tree for a reduce-scatter or an all-gather: 31 ring steps, 3 over the network, for 32 GPUs on 4 nodes,
    and 31/32 of the tensor at the bus bandwidth: 2.958 ms for 1 GiB."""
    net, nbytes = h100(), float(GIB)
    expected = CALL_S + 28 * NVLINK_STEP_S + 3 * NET_STEP_S + 31 / 32 * nbytes / NVLINK4_S
    assert expected == pytest.approx(2.9577e-3, rel=1e-4)
    assert net.reduce_scatter_s(nbytes, 32) == pytest.approx(expected, rel=1e-12)
    assert net.all_gather_s(nbytes, 32) == pytest.approx(expected, rel=1e-12)


def test_inside_one_node_nccl_reduces_in_the_switch():
    """Inside a DGX H100 node an all-reduce runs NVLink SHARP: 25 us, then 2 x 7/8 of the bytes at the 476 GB/s
    nccl-tests measure (64 KiB: 25.2 us against the ring's 56.6 us; 1 GiB: 3.97 ms against 5.14 ms); a reduce-scatter
    stays NCCL's ring, as does every collective on DGX A100 nodes, which have no NVLS."""
    nvls_s = 476e9
    for nbytes in (64 * 1024, float(GIB)):
        ring_s = h100(algorithm="ring").allreduce_s(nbytes, 8)
        expected = 25e-6 + 2 * 7 / 8 * nbytes / nvls_s
        assert expected < ring_s
        assert h100().allreduce_s(nbytes, 8) == pytest.approx(expected, rel=1e-12)
        assert h100().reduce_scatter_s(nbytes, 8) == pytest.approx(h100(algorithm="ring").reduce_scatter_s(nbytes, 8), rel=1e-12)
    assert h100().allreduce_s(64 * 1024, 8) == pytest.approx(25.24e-6, rel=1e-3)
    assert h100().allreduce_s(float(GIB), 8) == pytest.approx(3.972e-3, rel=1e-3)
    assert h100(algorithm="ring").allreduce_s(float(GIB), 8) == pytest.approx(5.136e-3, rel=1e-3)
    a100 = Network.from_cfg(compose_cfg("cluster=dgx_a100").cluster)
    ring = Network.from_cfg(compose_cfg("cluster=dgx_a100", "cluster.collective_algorithm=ring").cluster)
    assert a100.allreduce_s(float(GIB), 8) == pytest.approx(ring.allreduce_s(float(GIB), 8), rel=1e-12)


def test_nccl_on_a_torus_is_refused():
    with pytest.raises(ConfigError, match=r"cluster.collective_algorithm=nccl.*allowed values are \['ring', 'tree', 'best'\]"):
        ClusterCfg(name="pod", devices=64, node_size=64, intra_node_gbps=45.0, inter_node_gbps=45.0, torus_dims=[4, 4, 4],
                   collective_algorithm="nccl")
