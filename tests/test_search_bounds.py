"""The search's lower-bound latencies, computed once per cost signature and per distinct graph, equal the bounds
computed point by point and variant by variant (to round-off: numpy sums over another number of points, and an
exposed time of 0 may come out as 1e-21 s); points differing only in HBM capacity share them."""

import numpy as np
import pytest

from phaze.pipeline import LATENCY_FIELDS, load_workloads, tp_values_of, variant_graph, variants_of
from phaze.schedule.streams import StreamOptions
from phaze.search.bounds import direction_lower_bounds, lower_bound_latencies, work_bound_throughput
from phaze.search.evaluator import point_table
from phaze.workload.graph import PARTS
from phaze.config import model_job
from tests.conftest import compose_cfg
from tests.test_moe import TINY_MOE

pytestmark = pytest.mark.slow

OVERRIDES = [*TINY_MOE, "train=megatron", "train.mbs=[1,2]", "train.tp_widths=[1,2]", "train.cp=[1]", "train.ep=[1,2]", "hw=tiny_grid",
             "cluster.devices=16", "train.global_batch=64"]


def point_by_point(workloads, points, network, inter_op_parallel, variants, overlap_slowdown):
    """The bounds of each point alone, every variant's graphs costed afresh: [variants, tp, points] per part and field."""
    tp_values = tp_values_of(workloads)
    out = {p: {f: np.full((len(variants), len(tp_values), len(points)), np.nan) for f in LATENCY_FIELDS} for p in PARTS}
    for i in range(len(points)):
        point = points.iloc[[i]].reset_index(drop=True)
        for vi, variant in enumerate(variants):
            opts = StreamOptions(True, variant.tp_comm_overlap, overlap_slowdown=overlap_slowdown)
            for ti, t in enumerate(tp_values):
                for part in PARTS:
                    g = variant_graph(workloads, variant, t, part)
                    if g is None:
                        continue
                    f = out[part]
                    (f["fwd_s"][vi, ti, i],), (f["tp_comm_fwd_s"][vi, ti, i],), (f["core_fwd_s"][vi, ti, i],) = direction_lower_bounds(
                        g.fwd, point, network, t, inter_op_parallel, opts)
                    (f["bwd_s"][vi, ti, i],), (f["tp_comm_bwd_s"][vi, ti, i],), _ = direction_lower_bounds(
                        g.bwd, point, network, t, inter_op_parallel, opts)
    return out


@pytest.mark.parametrize("inter_op_parallel", [True, False])
def test_bounds_per_signature_equal_the_bounds_point_by_point(workload_cache, inter_op_parallel):
    cfg = compose_cfg(*OVERRIDES, f"hw.inter_op_parallel={str(inter_op_parallel).lower()}", f"cache_dir={workload_cache}")
    points = point_table(cfg.hw)
    points = points[points.n_tc == points.n_tc.max()].reset_index(drop=True)  # a few chips, each with both HBM capacities
    network, workloads, variants = model_job(cfg).network, load_workloads(model_job(cfg)), variants_of(model_job(cfg))
    bounds = lower_bound_latencies(workloads, points, network, inter_op_parallel, variants, True, 0.1)
    assert len(np.unique(bounds.signature_of)) == len(points) // 2  # the two HBM capacities share one column
    expected = point_by_point(workloads, points, network, inter_op_parallel, variants, 0.1)
    for i in range(len(points)):
        at = bounds.at(i)
        for part in PARTS:
            for field in LATENCY_FIELDS:
                np.testing.assert_allclose(at[part][field], expected[part][field][..., i], rtol=1e-12, atol=1e-18,
                                           err_msg=f"point {i} {part} {field}")
    work = work_bound_throughput(bounds, workloads, int(cfg.cluster.devices), variants)
    assert work.shape == (len(points),) and np.all(work > 0)
    np.testing.assert_array_equal(work, work[np.unique(bounds.signature_of, return_index=True)[1]][bounds.signature_of])


def test_bounds_on_several_threads_equal_the_bounds_on_one(workload_cache):
    """The distinct graphs bounded on threads at once: every array bit for bit what one thread computes."""
    cfg = compose_cfg(*OVERRIDES, f"cache_dir={workload_cache}")
    points, network, workloads, variants = point_table(cfg.hw), model_job(cfg).network, load_workloads(model_job(cfg)), variants_of(model_job(cfg))
    one, three = (lower_bound_latencies(workloads, points, network, True, variants, True, 0.1, threads=n) for n in (1, 3))
    np.testing.assert_array_equal(one.signature_of, three.signature_of)
    for part in PARTS:
        for field in LATENCY_FIELDS:
            assert np.any(np.isfinite(one.values[part][field])), (part, field)
            np.testing.assert_array_equal(one.values[part][field], three.values[part][field], err_msg=f"{part} {field}")
