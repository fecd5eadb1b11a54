"""Collective times: ring, tree and hierarchical formulas against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from phaze.cost import Network
from tests.conftest import compose_cfg

GIB = 1024**3


def flat(n=1024, gbps=4.0, latency_s=0.0, algorithm="ring"):
    return Network(devices=n, node_size=n, intra_bytes_s=gbps * 1e9, inter_bytes_s=gbps * 1e9,
                   latency_s=latency_s, algorithm=algorithm)


@pytest.mark.parametrize("n", [2, 4, 8, 1024])
def test_ring_allreduce_moves_2_n_minus_1_over_n_of_the_data(n):
    nbytes, b = 3.0 * GIB, 4e9
    assert flat(gbps=4.0).allreduce_s(nbytes, n) == pytest.approx(2 * (n - 1) / n * nbytes / b, rel=1e-12)


def test_phaze_cluster_is_one_4_gib_s_link_per_chip():
    net = Network.from_cfg(compose_cfg("cluster=phaze_1024").cluster)
    assert net.intra_bytes_s == net.inter_bytes_s == 4 * GIB
    assert net.allreduce_s(1e9, 8) == pytest.approx(2 * 7 / 8 * 1e9 / (4 * GIB), rel=1e-12)
    assert net.allreduce_s(1e9, 1) == 0.0


def test_reduce_scatter_and_all_gather_are_half_a_ring_allreduce():
    net = flat(latency_s=1e-6)
    assert net.reduce_scatter_s(1e8, 16) == pytest.approx(15 / 16 * 1e8 / 4e9 + 15e-6, rel=1e-12)
    assert net.all_gather_s(1e8, 16) == pytest.approx(net.allreduce_s(1e8, 16) / 2, rel=1e-12)


def test_latency_term_counts_ring_steps():
    assert flat(latency_s=2e-6).allreduce_s(0.0, 8) == pytest.approx(2 * 7 * 2e-6)


def test_tree_and_best_algorithms():
    nbytes = 1e6
    tree = flat(latency_s=1e-5, algorithm="tree").allreduce_s(nbytes, 64)
    assert tree == pytest.approx(2 * nbytes / 4e9 + 2 * 6 * 1e-5, rel=1e-12)
    ring = flat(latency_s=1e-5).allreduce_s(nbytes, 64)
    assert ring == pytest.approx(2 * 63 / 64 * nbytes / 4e9 + 2 * 63 * 1e-5, rel=1e-12)
    assert flat(latency_s=1e-5, algorithm="best").allreduce_s(nbytes, 64) == min(tree, ring)
    with pytest.raises(ValueError):
        flat(algorithm="butterfly")


NCCL_CALL_S, NVLINK_STEP_S, NET_STEP_S = 8.4e-6, 3.4e-6, 14e-6
"""NCCL's latency model for large ring collectives (src/graph/tuning.cc: baseLat and hwLat, Simple protocol), as the
DGX and NVL72 presets carry it."""


def test_hierarchical_allreduce_by_hand():
    """The levels one after another (cluster.collective_algorithm=ring; the presets' nccl: tests/test_cost_nccl.py)."""
    net = Network.from_cfg(compose_cfg("cluster=dgx_a100", "cluster.collective_algorithm=ring").cluster)
    nvlink, ib = 300e9 * 0.767, 25e9 * 0.96  # line rates at NCCL's bus-bandwidth efficiency (conf/cluster/dgx_a100.yaml)
    assert (net.node_size, net.intra_bytes_s, net.inter_bytes_s) == (8, pytest.approx(nvlink), pytest.approx(ib))
    nbytes = 8e9
    # 32 GPUs = 4 nodes of 8: intra ring reduce-scatter and all-gather (2 x 7 NVLink steps, 2*7/8*B), and between them
    # the B/8 shard all-reduced across 4 nodes over IB (2 x 3 network steps); one call.
    expected = 2 * 7 / 8 * nbytes / nvlink + 2 * 3 / 4 * (nbytes / 8) / ib + 14 * NVLINK_STEP_S + 6 * NET_STEP_S + NCCL_CALL_S
    assert net.allreduce_s(nbytes, 32) == pytest.approx(expected, rel=1e-12)
    # Inside one node only NVLink is used.
    assert net.allreduce_s(nbytes, 8) == pytest.approx(2 * 7 / 8 * nbytes / nvlink + 14 * NVLINK_STEP_S + NCCL_CALL_S, rel=1e-12)
    # Members 8 apart sit on different nodes: a flat ring over InfiniBand.
    assert net.allreduce_s(nbytes, 4, stride=8) == pytest.approx(2 * 3 / 4 * nbytes / ib + 6 * NET_STEP_S + NCCL_CALL_S, rel=1e-12)
    # The hierarchical reduce-scatter is half of it, steps and all, in one call.
    assert net.reduce_scatter_s(nbytes, 32) == pytest.approx((expected - NCCL_CALL_S) / 2 + NCCL_CALL_S, rel=1e-12)


def test_nccl_latency_dominates_small_collectives():
    """A 64 KiB TP all-reduce inside a DGX H100 is latency: 8.4 us + 14 NVLink steps of 3.4 us = 56 us, not the
    0.3 us its bytes take; at 1 GiB the latency is under 2% of the time (NCCL's ring; the preset's NVLink SHARP:
    tests/test_cost_nccl.py)."""
    net = Network.from_cfg(compose_cfg("cluster=dgx_h100", "cluster.collective_algorithm=ring").cluster)
    nvlink4 = 450e9 * 0.822
    small = net.allreduce_s(65536.0, 8)
    assert small == pytest.approx(2 * 7 / 8 * 65536 / nvlink4 + 14 * NVLINK_STEP_S + NCCL_CALL_S, rel=1e-12)
    assert small > 100 * 2 * 7 / 8 * 65536 / nvlink4
    big = net.allreduce_s(2.0**30, 8)
    assert (14 * NVLINK_STEP_S + NCCL_CALL_S) / big < 0.02
    # An all-to-all over 16 GPUs of 2 nodes: 7 peers in the node (NVLink steps) and 8 in the other (network steps).
    assert net.all_to_all_s(0.0, 16) == pytest.approx(7 * NVLINK_STEP_S + 8 * NET_STEP_S + NCCL_CALL_S, rel=1e-12)
    # PHAZE's flat 4 GiB/s network has none of it.
    phaze = Network.from_cfg(compose_cfg("cluster=phaze_1024").cluster)
    assert phaze.allreduce_s(0.0, 1024) == 0.0 and phaze.p2p_s(0.0, same_node=False) == 0.0


def test_dgx_h100_rates_and_p2p():
    net = Network.from_cfg(compose_cfg("cluster=dgx_h100").cluster)
    # NCCL's 370 GB/s of the 450 GB/s NVLink line rate, 47 of NDR's 50 GB/s, plus a call and a step of its link
    assert net.p2p_s(9e9, same_node=True) == pytest.approx(9e9 / (450e9 * 0.822) + NVLINK_STEP_S + NCCL_CALL_S)
    assert net.p2p_s(9e9, same_node=False) == pytest.approx(9e9 / (50e9 * 0.94) + NET_STEP_S + NCCL_CALL_S)


def test_arrays_broadcast():
    times = flat().allreduce_s(np.array([1e6, 2e6]), 4)
    assert times.shape == (2,) and times[1] == pytest.approx(2 * times[0])


def _pod():
    return Network.from_cfg(compose_cfg("cluster=tpuv4_pod").cluster)


def test_torus_allreduce_is_a_ring_per_dimension_by_hand():
    net = _pod()
    link = 50e9 * 0.895  # one ICI link per direction at Google's all-reduce efficiency (conf/cluster/tpuv4_pod.yaml)
    assert (net.torus_dims, net.domains, net.node_size) == ((8, 8, 16), (8, 64), 1024)
    nbytes = 6e9
    # The whole 8x8x16 slice: x, y and z rings close through their wraparound and run both ways (2 links),
    # each on the data left by the dimensions before it.
    whole = 2 * 7 / 8 * nbytes / (2 * link) + 2 * 7 / 8 * (nbytes / 8) / (2 * link) + 2 * 15 / 16 * (nbytes / 64) / (2 * link)
    assert net.allreduce_s(nbytes, 1024) == pytest.approx(whole, rel=1e-12)
    # Four neighbours along x are a line without wraparound: one link's rate.
    assert net.allreduce_s(nbytes, 4) == pytest.approx(2 * 3 / 4 * nbytes / link, rel=1e-12)
    # 128 members 8 apart (one per pipeline of 8 chips): whole y rings, then whole z rings on 1/8 of the data.
    assert net.spread(128, 8) == (1, 8)
    strided = 2 * 7 / 8 * nbytes / (2 * link) + 2 * 15 / 16 * (nbytes / 8) / (2 * link)
    assert net.allreduce_s(nbytes, 128, stride=8) == pytest.approx(strided, rel=1e-12)
    assert net.reduce_scatter_s(nbytes, 128, stride=8) == pytest.approx(strided / 2, rel=1e-12)
    # Neighbouring chips exchange over one link.
    assert net.p2p_s(1e9, same_node=True) == net.p2p_s(1e9, same_node=False) == pytest.approx(1e9 / link)


def test_tensor_parallel_group_inside_and_across_an_nvlink_domain():
    nbytes = 1e9
    h100 = Network.from_cfg(compose_cfg("cluster=dgx_h100", "cluster.collective_algorithm=ring").cluster)
    nvlink4, ndr = 450e9 * 0.822, 50e9 * 0.94
    assert h100.allreduce_s(nbytes, 8) == pytest.approx(2 * 7 / 8 * nbytes / nvlink4 + 14 * NVLINK_STEP_S + NCCL_CALL_S, rel=1e-12)
    # TP 16 spans two DGX nodes: NVLink ring, then the 1/8 shard across the 2 nodes over InfiniBand.
    assert h100.allreduce_s(nbytes, 16) == pytest.approx(2 * 7 / 8 * nbytes / nvlink4 + 2 * 1 / 2 * (nbytes / 8) / ndr
                                                         + 14 * NVLINK_STEP_S + 2 * NET_STEP_S + NCCL_CALL_S, rel=1e-12)
    nvl72 = Network.from_cfg(compose_cfg("cluster=gb200_nvl72").cluster)
    nvlink5 = 900e9 * 0.927
    assert (nvl72.devices, nvl72.node_size, nvl72.domains) == (1152, 72, (72,))
    # The same TP 16 stays inside one NVL72 rack: one NVLink ring.
    assert nvl72.allreduce_s(nbytes, 16) == pytest.approx(2 * 15 / 16 * nbytes / nvlink5 + 30 * NVLINK_STEP_S + NCCL_CALL_S, rel=1e-12)
    assert nvl72.allreduce_s(nbytes, 16) < h100.allreduce_s(nbytes, 16) / 3


def test_all_to_all_per_level_on_a_torus():
    net = _pod()
    link = 50e9 * 0.895
    # 16 members along x then y (8 x 2): 7/16 of the data to x peers on a whole x ring, 8/16 to the other y row on a line.
    assert net.all_to_all_s(1e9, 16) == pytest.approx(max(7 / 16 * 1e9 / (2 * link), 8 / 16 * 1e9 / link), rel=1e-12)


def test_a_rail_optimised_fat_tree_all_reduces_at_two_scales():
    """8-GPU nodes of 50 GB/s NICs, 32 nodes under one set of rail switches, a spine at half their bandwidth (levels one
    after another, cluster.collective_algorithm=ring): 1 GiB over 256 GPUs (32 nodes) reduce-scatters and all-gathers
    inside each node (2 x 7/8 GiB at 450 GB/s) around a 32-node ring of its eighth at 50 GB/s; over 512 GPUs (64 nodes)
    that ring crosses the spine at 25 GB/s. 4 NICs shared by a node's 8 GPUs give each 25 GB/s inside one group."""
    fabric = ["cluster=dgx_h100", "cluster.devices=1024", "cluster.collective_algorithm=ring", "cluster.intra_node_efficiency=1",
              "cluster.inter_node_efficiency=1", "cluster.link_latency_s=0", "cluster.inter_node_latency_s=0",
              "cluster.collective_launch_s=0", "cluster.rail_group_nodes=32", "cluster.spine_oversubscription=2"]
    net = Network.from_cfg(compose_cfg(*fabric).cluster)
    inside_s = 2 * 7 / 8 * GIB / 450e9
    assert net.allreduce_s(GIB, 256) == pytest.approx(inside_s + 2 * 31 / 32 * GIB / 8 / 50e9, rel=1e-12)  # 9.38 ms
    assert net.allreduce_s(GIB, 512) == pytest.approx(inside_s + 2 * 63 / 64 * GIB / 8 / 25e9, rel=1e-12)  # 14.7 ms
    assert Network.from_cfg(compose_cfg(*fabric[:-1]).cluster).allreduce_s(GIB, 512) == pytest.approx(
        inside_s + 2 * 63 / 64 * GIB / 8 / 50e9, rel=1e-12)  # the preset's non-blocking spine
    shared = Network.from_cfg(compose_cfg(*fabric, "cluster.rails=4").cluster)
    assert shared.allreduce_s(GIB, 256) == pytest.approx(inside_s + 2 * 31 / 32 * GIB / 8 / 25e9, rel=1e-12)
    # NCCL's model: the node's 8 NICs (8 x 25 GB/s across the spine) now below NVLink's 450 GB/s bus bandwidth
    nccl = Network.from_cfg(compose_cfg(*fabric[:2], "cluster.rail_group_nodes=32", "cluster.spine_oversubscription=2").cluster)
    plain = Network.from_cfg(compose_cfg(*fabric[:2]).cluster)
    assert nccl.allreduce_s(8 * GIB, 256) == pytest.approx(plain.allreduce_s(8 * GIB, 256), rel=1e-12)
    assert nccl.allreduce_s(8 * GIB, 512) > 1.9 * plain.allreduce_s(8 * GIB, 512)


@pytest.mark.parametrize("preset, chips_per_unit", [("dgx_h100", 256), ("dgx_b200", 256), ("gb200_nvl72", 576)])
def test_the_superpod_presets_join_their_published_scalable_units_by_the_spine(preset, chips_per_unit):
    """NVIDIA's DGX SuperPOD reference architectures: scalable units of 32 DGX H100 or B200 nodes (256 GPUs) and of 8
    GB200 NVL72 racks (576 GPUs) under their rail leaves, a non-blocking spine between units. Tapering the spine 2:1
    (the one override) leaves an all-reduce inside one unit as fast and makes one over two units slower, by the time
    its inter-node ring loses: half of its bandwidth on the NICs (levels one after another, no latencies)."""
    flat = [f"cluster={preset}", "cluster.devices=1152" if preset == "gb200_nvl72" else "cluster.devices=1024",
            "cluster.collective_algorithm=ring", "cluster.link_latency_s=0", "cluster.inter_node_latency_s=0",
            "cluster.collective_launch_s=0"]
    cluster = compose_cfg(*flat).cluster
    blocking = Network.from_cfg(compose_cfg(*flat, "cluster.spine_oversubscription=2").cluster)
    plain = Network.from_cfg(cluster)
    assert blocking.allreduce_s(GIB, chips_per_unit) == pytest.approx(plain.allreduce_s(GIB, chips_per_unit), rel=1e-12)
    nodes = 2 * chips_per_unit // cluster.node_size
    ring_s = 2 * (nodes - 1) / nodes * GIB / cluster.node_size / (cluster.inter_node_gbps * 1e9 * cluster.inter_node_efficiency)
    assert blocking.allreduce_s(GIB, 2 * chips_per_unit) - plain.allreduce_s(GIB, 2 * chips_per_unit) == pytest.approx(
        ring_s, rel=1e-9)
