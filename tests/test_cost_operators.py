"""Operator latency: hand-computed matmul and vector cases, units, collectives, views."""

from __future__ import annotations

import math

import numpy as np
import pytest

from phaze.cost import Network, op_latencies
from tests.cost_cases import allreduce_op, chip_frame, matmul_op, ops_frame, vector_op, view_op

NET = Network(devices=1024, node_size=1024, intra_bytes_s=4e9, inter_bytes_s=4e9)


def latency(op, **chip):
    out = op_latencies(ops_frame([op]), chip_frame(**chip), NET, tp=1)
    return float(out.single_s[0, 0]), float(out.parallel_s[0, 0])


def test_4096_cubed_on_128x128_at_1ghz_is_compute_bound():
    single, _ = latency(matmul_op(1, 4096, 4096, 4096))
    assert single == pytest.approx(2 * 4096**3 / (2 * 128**2 * 1e9), rel=1e-12)


def test_a_dimension_of_129_pays_for_two_tiles():
    single, _ = latency(matmul_op(1, 129, 129, 129))
    assert single == pytest.approx(2 * 2 * 129 * 1e-9, rel=1e-12)  # 2x2 tiles, 129 rows streamed each
    assert latency(matmul_op(1, 128, 128, 128))[0] == pytest.approx(128e-9, rel=1e-12)


def test_the_mapper_streams_the_awkward_dimension():
    # (m, k, n) = (4096, 128, 129): laying m and k on the array and streaming n costs 32*1*129 cycles;
    # putting n=129 on the array would cost 2 column tiles (8192 cycles).
    assert latency(matmul_op(1, 4096, 128, 129))[0] == pytest.approx(32 * 129e-9, rel=1e-12)


def test_output_tiles_split_over_cores():
    op = matmul_op(1, 512, 128, 512)
    single, parallel = latency(op, n_tc=16)
    assert single == pytest.approx(2048e-9, rel=1e-12)
    assert parallel == pytest.approx(128e-9, rel=1e-12)  # 16 output tiles, one per array
    # 3 arrays: 16 output tiles -> 6 rounds of a 128-deep reduction (768 cycles) beats the other dataflows.
    assert latency(op, n_tc=3)[1] == pytest.approx(768e-9, rel=1e-12)


def test_the_reduction_dimension_is_never_split():
    # One 128-wide output row: a single output tile, k = 4096 over 32 row tiles; 8 arrays cannot help.
    single, parallel = latency(matmul_op(1, 1, 4096, 128), n_tc=8)
    assert single == parallel == pytest.approx(32e-9, rel=1e-12)


def test_bandwidth_bound_matmul_moves_its_compulsory_bytes():
    op = matmul_op(1, 4096, 4096, 4096)
    single, parallel = latency(op, hbm_gbps=10.0)
    assert single == parallel == pytest.approx(3 * 4096**2 * 2 / 10e9, rel=1e-12)


def test_a_small_global_buffer_forces_rereads():
    tile = math.floor(math.sqrt(2 * 2**20 / (3 * 2)))
    assert (tile, math.ceil(4096 / tile)) == (591, 7)
    single, _ = latency(matmul_op(1, 4096, 4096, 4096), glb_mib=2, hbm_gbps=10.0)
    assert single == pytest.approx(2 * 4096**2 * (7 + 7 + 1) / 10e9, rel=1e-12)


def test_per_core_port_bounds_one_core_and_the_glb_bounds_all():
    # 128x128 array, 16 B per MAC -> 256 KiB core buffer -> tiles of 209 -> A and B re-read 20 times.
    port_bytes = 2 * 4096**2 * (20 + 20 + 1)
    single, parallel = latency(matmul_op(1, 4096, 4096, 4096), n_tc=8, core_bytes_per_cycle=64)
    assert single == pytest.approx(port_bytes / 64e9, rel=1e-12)
    assert parallel == pytest.approx(port_bytes / (8 * 64e9), rel=1e-12)
    _, parallel_glb = latency(matmul_op(1, 4096, 4096, 4096), n_tc=8, core_bytes_per_cycle=64, glb_gbps=100.0)
    assert parallel_glb == pytest.approx(port_bytes / 100e9, rel=1e-12)


def test_elementwise_on_a_bandwidth_bound_chip_reads_and_writes_each_element():
    n = 2**24
    single, parallel = latency(vector_op(n), n_vc=4, hbm_gbps=100.0)
    assert single == parallel == pytest.approx(2 * 2 * n / 100e9, rel=1e-12)


def test_vector_ops_are_elements_over_lanes_times_cycles_per_element():
    n = 10**6 + 1
    single, parallel = latency(vector_op(n), n_vc=4, vc_width=128)
    assert single == pytest.approx(math.ceil(n / 128) * 1e-9, rel=1e-12)
    assert parallel == pytest.approx(math.ceil(n / 512) * 1e-9, rel=1e-12)
    single_div, _ = latency(vector_op(n, target="div", n_inputs=2), n_vc=4, vc_width=128)
    assert single_div == pytest.approx(10 * math.ceil(n / 128) * 1e-9, rel=1e-12)


def test_a_reduction_streams_its_input_and_a_gather_its_output():
    single, _ = latency(vector_op(1, target="sum", kind="reduction", in_numel=2**20), vc_width=128)
    assert single == pytest.approx(2**20 / 128 * 1e-9, rel=1e-12)
    single, _ = latency(vector_op(2**10, target="gather", kind="elementwise", in_numel=2**20), vc_width=128)
    assert single == pytest.approx(2**10 / 128 * 1e-9, rel=1e-12)


def test_units_collectives_and_views():
    ops = ops_frame([matmul_op(2, 64, 64, 64), vector_op(1000), allreduce_op(2**26), view_op(1000),
                     vector_op(1000, target="_softmax", kind="softmax")])
    points = chip_frame()
    out = op_latencies(ops, points, NET, tp=8)
    assert out.unit.tolist() == ["tc", "vc", "net", "none", "vc"]
    assert out.single_s.shape == out.parallel_s.shape == (5, 1)
    assert out.single_s[2, 0] == out.parallel_s[2, 0] == pytest.approx(2 * 7 / 8 * 2**26 / 4e9, rel=1e-12)
    assert out.single_s[3, 0] == out.parallel_s[3, 0] == 0.0
    assert op_latencies(ops, points, NET, tp=1).single_s[2, 0] == 0.0


def test_unknown_collective_is_rejected():
    op = dict(allreduce_op(1024), target="phaze.broadcast")
    with pytest.raises(ValueError, match="unknown collective"):
        op_latencies(ops_frame([op]), chip_frame(), NET, tp=2)


def test_points_missing_columns_are_rejected():
    with pytest.raises(KeyError, match="enumerate_space"):
        op_latencies(ops_frame([vector_op(10)]), chip_frame().drop(columns=["tc_buffer_kib"]), NET, tp=1)


def test_repeated_points_and_ops_get_identical_rows():
    points = chip_frame().loc[[0, 0, 0]].reset_index(drop=True)
    points.loc[1, "hbm_gib"] = 80  # HBM capacity does not change latency
    ops = ops_frame([matmul_op(1, 300, 200, 100), matmul_op(1, 300, 200, 100), vector_op(77)])
    out = op_latencies(ops, points, NET, tp=1)
    assert np.array_equal(out.single_s[0], out.single_s[1])
    assert (out.parallel_s == out.parallel_s[:, :1]).all()
