"""The vectorised cost model against its plain-Python reference, the roofline, and the A100."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze.cost import Network, op_latencies, roofline_s
from phaze.cost.reference import op_latency
from phaze.hardware import Accelerator, enumerate_space
from phaze.workload.extract import extract_workload
from tests.conftest import compose_cfg
from tests.cost_cases import allreduce_op, matmul_op, ops_frame, vector_op, view_op

NET = Network.from_cfg(compose_cfg("cluster=dgx_a100").cluster)


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    """A spread of accelerators: 40 PHAZE grid points, the tiny grid, and the three presets."""
    grid = enumerate_space(compose_cfg().hw).sample(40, random_state=0)
    frames = [grid, enumerate_space(compose_cfg("hw=tiny_grid").hw)]
    frames += [enumerate_space(compose_cfg(f"hw={name}").hw) for name in ("tpuv4", "a100", "h100")]
    return pd.concat(frames, ignore_index=True)


dim = st.integers(1, 5000)
matmuls = st.builds(matmul_op, st.integers(1, 64), dim, dim, dim, st.sampled_from([2, 4]))
vectors = st.builds(
    vector_op, st.integers(1, 10**8), st.sampled_from(["add", "div", "silu", "_softmax", "exp"]),
    st.sampled_from(["elementwise", "softmax", "reduction", "norm"]), st.sampled_from([2, 4]), st.none() | st.integers(1, 10**8),
    st.integers(1, 3), st.booleans(),
)
collectives = st.integers(2, 2**30).map(allreduce_op)
ops_lists = st.lists(st.one_of(matmuls, vectors, collectives, st.just(view_op(10))), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(rows=ops_lists, tp=st.sampled_from([1, 2, 8, 16]))
def test_vectorised_equals_the_plain_python_reference(points, rows, tp):
    ops = ops_frame(rows)
    out = op_latencies(ops, points, NET, tp)
    for j in range(0, len(points), 7):
        acc = Accelerator.from_row(points.iloc[j])
        for i, op in enumerate(rows):
            unit, single, parallel = op_latency(op, acc, NET, tp)
            assert out.unit[i] == unit
            assert out.single_s[i, j] == pytest.approx(single, rel=1e-12, abs=0)
            assert out.parallel_s[i, j] == pytest.approx(parallel, rel=1e-12, abs=0)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.one_of(matmuls, vectors), min_size=1, max_size=8))
def test_no_operator_beats_its_roofline(points, rows):
    ops = ops_frame(rows)
    out = op_latencies(ops, points, NET, tp=1)
    bound = roofline_s(ops, points)
    assert (bound > 0).all()
    assert (out.parallel_s >= bound * (1 - 1e-12)).all()
    assert (out.single_s >= out.parallel_s * (1 - 1e-12)).all()


@pytest.fixture(scope="module")
def a100() -> pd.DataFrame:
    return enumerate_space(compose_cfg("hw=a100").hw)


def test_a100_large_bf16_matmul_reaches_85_percent_of_312_tflops(a100):
    op = matmul_op(1, 8192, 8192, 8192)
    seconds = op_latencies(ops_frame([op]), a100, NET, tp=1).parallel_s[0, 0]
    achieved = op["flops"] / seconds
    assert 0.85 * 312e12 <= achieved <= 312e12 * (1 + 1e-12)


def test_a100_large_elementwise_reaches_80_percent_of_hbm_bandwidth(a100):
    op = vector_op(2**28, target="add", n_inputs=2)
    seconds = op_latencies(ops_frame([op]), a100, NET, tp=1).parallel_s[0, 0]
    achieved = (op["bytes_read"] + op["bytes_written"]) / seconds
    assert 0.80 * 2039e9 <= achieved <= 2039e9 * (1 + 1e-12)


@pytest.mark.slow
def test_real_llama2_layer_matches_the_reference(points, workload_cache):
    workload = extract_workload(compose_cfg("model=llama2").model, mbs=1, tp_widths=(1, 2), cache_dir=workload_cache)
    for tp in workload.tp_widths:
        layer = workload.part(tp, "layer")
        for graph in (layer.fwd, layer.bwd):
            out = op_latencies(graph.ops, points, NET, tp)
            assert set(out.unit) == ({"tc", "vc", "net", "none"} if tp > 1 else {"tc", "vc", "none"})
            assert np.isfinite(out.single_s).all() and np.isfinite(out.parallel_s).all()
            bound = roofline_s(graph.ops, points)
            assert (out.parallel_s >= bound * (1 - 1e-12)).all()
            for j in range(0, len(points), 11):
                acc = Accelerator.from_row(points.iloc[j])
                for i, op in enumerate(graph.ops.to_dict("records")):
                    _, single, parallel = op_latency(op, acc, NET, tp)
                    assert out.single_s[i, j] == pytest.approx(single, rel=1e-12, abs=0)
                    assert out.parallel_s[i, j] == pytest.approx(parallel, rel=1e-12, abs=0)
