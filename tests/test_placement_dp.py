"""The placement DP against brute-force enumeration on small random chains, and its invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from phaze.cost.network import Network
from phaze.placement import PartCosts, PlacementInput, dp, evaluate_fixed, optimize, reference, solve
from phaze.schema.choices import RecomputeGranularity
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.placement.plan import recompute_mode

NETWORK_DEVICES = 32
WIDTH_SETS = ([1], [1, 2], [1, 2, 4], [2, 4])
DEVICE_COUNTS = (2, 3, 4, 6, 8, 12, 16)


def random_network(draw) -> Network:
    """A flat network or nodes of 2 or 4 with slower links between them, with or without a per-step latency."""
    hier = draw(st.booleans())
    node = draw(st.sampled_from([2, 4])) if hier else NETWORK_DEVICES
    return Network(NETWORK_DEVICES, node, 20.0, 3.0 if hier else 20.0, draw(st.sampled_from([0.0, 0.01])))


@st.composite
def chains(draw, max_parts=6, granularity=None):
    """A random chain (parts not alike), cluster and batch; wider TP means less compute and memory per device.
    The recompute granularity is drawn unless given."""
    n = draw(st.integers(2, max_parts))
    widths = np.array(draw(st.sampled_from(WIDTH_SETS)))
    mbs = np.array(draw(st.sampled_from([[1], [1, 2], [2, 4]])))
    shape = (len(mbs), len(widths), n)
    unit = st.floats(0.05, 1.0, allow_nan=False)
    base = {name: draw(arrays(np.float64, (n,), elements=unit)) for name in ("fwd", "prm", "sav", "inb", "outb")}
    jitter = draw(arrays(np.float64, shape, elements=st.floats(0.8, 1.25)))
    scale = mbs[:, None, None] / widths[None, :, None]
    tp_comm = 0.02 * (widths[None, :, None] > 1) * mbs[:, None, None] * np.ones(shape)
    fwd = base["fwd"] * scale * jitter + tp_comm
    if len(widths) > 1 and draw(st.booleans()):  # knock out one (mbs, width): its costs are unknown
        fwd[draw(st.integers(0, len(mbs) - 1)), draw(st.integers(0, len(widths) - 1)), 0] = np.nan
    optimizer = draw(st.sampled_from(["sgd", "adam"]))
    # HBM from under half of what the whole chain needs on one device (many stages) to more than
    # all of it, and room for the largest part at width 1 with its activations.
    hbm_fraction = draw(st.sampled_from([0.45, 0.6, 0.8, 1.0, 1.5]))
    part_bytes = base["prm"] * 10 * state_bytes_per_param_byte(optimizer, 2) + base["sav"] * 5 * mbs.max()
    hbm_bytes = max(hbm_fraction * part_bytes.sum(), 1.1 * part_bytes.max())
    network = random_network(draw)
    return PlacementInput(
        mbs_values=mbs, tp_values=widths, fwd_s=fwd, bwd_s=2 * fwd * jitter, tp_comm_fwd_s=tp_comm, tp_comm_bwd_s=tp_comm,
        param_bytes=base["prm"] * 10 / widths[None, :, None] * np.ones(shape),
        saved_bytes=base["sav"] * 5 * mbs[:, None, None] / np.sqrt(widths)[None, :, None] * jitter,
        input_bytes=base["inb"] * mbs[:, None, None] * np.ones(shape), output_bytes=base["outb"] * mbs[:, None, None] * np.ones(shape),
        num_pre=0, num_layers=n, devices=draw(st.sampled_from(DEVICE_COUNTS)), global_batch=draw(st.sampled_from([4, 8, 16])),
        seq_len=32, hbm_bytes=hbm_bytes, network=network, optimizer=optimizer,
        recompute_granularity=granularity or draw(st.sampled_from(RecomputeGranularity.values())),
    )


def time_of(result) -> float:
    return float("inf") if result is None else result.time_per_batch_s


def solved_three_ways(inp, **options):
    """The Numba DP's result, once it and the plain-Python DP are checked against brute force on `inp`."""
    expected = time_of(reference.brute_force(inp, **options))
    fast = optimize(inp, **options)
    assert time_of(fast) == pytest.approx(expected, rel=1e-12)
    assert time_of(reference.optimize(inp, **options)) == pytest.approx(expected, rel=1e-12)
    return fast


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("granularity", RecomputeGranularity.values())
@SETTINGS
@given(data=st.data(), per_stage_tp=st.booleans())
def test_dp_equals_brute_force_numba_and_python(granularity, data, per_stage_tp):
    inp = data.draw(chains(granularity=granularity))
    fast = solved_three_ways(inp, per_stage_tp=per_stage_tp)
    event("nothing fits" if fast is None else f"{fast.strategy.pp} stages, TP {'per stage' if isinstance(fast.strategy.tp, tuple) else 'uniform'}")
    if fast is not None:
        assert fast.feasible and fast.memory_per_device_bytes <= inp.hbm_bytes
        assert fast.strategy.devices_used <= inp.devices
        if not per_stage_tp:
            assert isinstance(fast.strategy.tp, int)


@pytest.mark.parametrize("granularity", RecomputeGranularity.values())
@SETTINGS
@given(data=st.data(), recompute_options=st.sampled_from([(False,), (True,)]), mbs_options=st.sampled_from([(1,), (2,)]))
def test_dp_equals_brute_force_on_restricted_options(granularity, data, recompute_options, mbs_options):
    inp = data.draw(chains(granularity=granularity))
    best = reference.brute_force(inp, recompute_options, mbs_options)
    fast = optimize(inp, recompute_options, mbs_options)
    assert time_of(fast) == pytest.approx(time_of(best), rel=1e-12)
    if fast is not None:
        assert fast.strategy.recompute == recompute_mode(recompute_options[0]) and fast.strategy.mbs == mbs_options[0]


@settings(max_examples=40, deadline=None)
@given(chains(), st.floats(1.0, 4.0), st.integers(0, 16))
def test_more_hbm_or_devices_never_slower(inp, hbm_factor, extra_devices):
    base = time_of(optimize(inp))
    assert time_of(optimize(dataclasses.replace(inp, hbm_bytes=inp.hbm_bytes * hbm_factor))) <= base
    assert time_of(optimize(dataclasses.replace(inp, devices=inp.devices + extra_devices))) <= base


@settings(max_examples=40, deadline=None)
@given(chains())
def test_fixed_evaluation_of_the_optimum_reproduces_it(inp):
    result = optimize(inp)
    if result is None:
        return
    st_ = result.strategy
    fixed = evaluate_fixed(inp, st_.dp, st_.pp, st_.tp_per_stage, st_.mbs, st_.recompute, st_.stage_bounds)
    assert fixed.feasible
    assert fixed.time_per_batch_s == result.time_per_batch_s
    assert fixed.memory_per_stage_bytes == result.memory_per_stage_bytes
    assert fixed.breakdown == result.breakdown


def _splits(cuts: list[bool]) -> tuple[tuple[int, int], ...]:
    bounds, first = [], 0
    for j, cut in enumerate(cuts):
        if cut:
            bounds.append((first, j))
            first = j + 1
    return (*bounds, (first, len(cuts)))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_layer_checkpoints_never_exceed_no_recompute_nor_stage_checkpoints_of_one_microbatch(data):
    # With every part's input <= its saved bytes, per-layer checkpoints never need more than no
    # recompute, and no more than a stage-input checkpoint when a stage holds one microbatch or
    # one part (equal then). With several parts and microbatches they may need more (see
    # test_per_layer_checkpoints_cost_more_than_a_stage_input_with_many_microbatches_in_flight).
    inp = data.draw(chains())
    inp = dataclasses.replace(inp, input_bytes=np.minimum(inp.input_bytes, inp.saved_bytes))
    pairs = [(mi, ti) for mi in range(len(inp.mbs_values)) for ti in range(len(inp.tp_values)) if inp.available(mi, ti)]
    mi, ti = data.draw(st.sampled_from(pairs))
    mbs, width = int(inp.mbs_values[mi]), int(inp.tp_values[ti])
    bounds = _splits(data.draw(st.lists(st.booleans(), min_size=inp.num_parts - 1, max_size=inp.num_parts - 1)))
    per = inp.global_batch // mbs
    d = data.draw(st.sampled_from([d for d in range(1, per + 1) if per % d == 0]))
    m = per // d

    def memory(granularity, recompute):
        fixed = dataclasses.replace(inp, recompute_granularity=granularity)
        return evaluate_fixed(fixed, d, len(bounds), width, mbs, recompute, bounds).memory_per_stage_bytes

    layer, stage = memory("layer", True), memory("stage", True)
    no_rc = memory("layer", False)
    assert no_rc == memory("stage", False)
    for idx, (first, last) in enumerate(bounds):
        assert layer[idx] <= no_rc[idx] * (1 + 1e-12)
        if first == last:
            assert layer[idx] == pytest.approx(stage[idx], rel=1e-12)
        elif min(len(bounds) - idx, m) == 1:
            assert layer[idx] <= stage[idx] * (1 + 1e-12)


def test_tight_memory_is_never_exceeded_and_nothing_fits_gives_none():
    chain = _identical_chain(layers=6, hbm=1e9)
    roomy = optimize(chain)
    tight_hbm = 0.999 * roomy.memory_per_device_bytes
    tight = optimize(dataclasses.replace(chain, hbm_bytes=tight_hbm))
    assert tight.memory_per_device_bytes <= tight_hbm
    assert tight.time_per_batch_s >= roomy.time_per_batch_s
    assert optimize(dataclasses.replace(chain, hbm_bytes=1.0)) is None


def test_front_overflow_is_retried_with_more_room(monkeypatch):
    chain = _identical_chain(layers=8, hbm=60.0)
    expected = optimize(chain)
    kernel, oks = dp.pareto_fronts, []

    def recording(*args):
        out = kernel(*args)
        oks.append(out[3])
        return out

    monkeypatch.setattr(solve, "FRONT_CAPACITY", 1)
    monkeypatch.setattr(dp, "pareto_fronts", recording)
    assert optimize(chain).time_per_batch_s == expected.time_per_batch_s
    assert not all(oks)  # some cell did outgrow one point


def _identical_chain(layers: int, hbm: float) -> PlacementInput:
    """pre, `layers` identical layers, post; widths 1, 2, 4 with TP all-reduces on a two-level network."""
    widths = np.array([1, 2, 4])
    mbs = np.array([1, 2])
    grid = mbs[:, None] / widths[None, :]
    tp = 0.05 * (widths[None, :] > 1) * mbs[:, None]
    def part(fwd, prm, sav, out):
        return PartCosts(fwd_s=fwd * grid + tp, bwd_s=2 * fwd * grid + tp, tp_comm_fwd_s=tp, tp_comm_bwd_s=tp,
                         param_bytes=prm / widths[None, :] + 0 * grid, saved_bytes=sav * grid, input_bytes=0.5 * mbs[:, None] + 0 * grid,
                         output_bytes=out * mbs[:, None] + 0 * grid)

    return PlacementInput.from_parts(
        part(0.1, 8.0, 0.1, 0.5), part(1.0, 4.0, 2.0, 0.5), part(0.6, 8.0, 3.0, 0.01), layers,
        mbs_values=mbs, tp_values=widths, devices=64, global_batch=64, seq_len=128, hbm_bytes=hbm,
        network=Network(64, 8, 50.0, 5.0, 1e-3), optimizer="adam", model_flops_per_seq=1e3, peak_flops_s=1e3,
    )


EXPERT_PIPELINE_DEPTH = {"stage": 8, "layer": 5}
"""Expert depth at dp 2, TP 4 with recompute: at TP 4 a layer's input is all it saves, so the per-layer
checkpoints of the 8 microbatches an 8-deep pipeline's first stage holds do not fit in 40 B."""


@pytest.mark.parametrize("granularity", RecomputeGranularity.values())
def test_identical_layer_chain_numba_matches_python_reference(granularity):
    chain = dataclasses.replace(_identical_chain(layers=10, hbm=40.0), recompute_granularity=granularity)
    fast = optimize(chain)
    slow = reference.optimize(chain)
    assert fast.time_per_batch_s == slow.time_per_batch_s
    assert fast.strategy.devices_used <= 64
    uniform = optimize(chain, per_stage_tp=False)
    assert uniform.time_per_batch_s >= fast.time_per_batch_s
    assert uniform.time_per_batch_s == reference.optimize(chain, per_stage_tp=False).time_per_batch_s
    expert = evaluate_fixed(chain, dp=2, pp=EXPERT_PIPELINE_DEPTH[granularity], tp=4, mbs=1, recompute=True)
    assert expert.feasible and expert.time_per_batch_s >= fast.time_per_batch_s


def test_single_part_chain_is_pure_data_and_tensor_parallel():
    # One part: fwd 1 s at width 1, 0.6 s at width 2 (TP all-reduce included); 4 devices, batch 8.
    # Width 1 with d = 4: m = 2, 2 x 3 s + all-reduce 2 x 3/4 x 8 B at 1 B/s = 18 s; width 2 with
    # d = 2: m = 4, 4 x 1.8 s + 2 x 1/2 x 4 B = 11.2 s; width 2 with d = 1: 8 x 1.8 s = 14.4 s.
    ones = np.ones((1, 2, 1))
    inp = PlacementInput(
        mbs_values=[1], tp_values=[1, 2], fwd_s=np.array([[[1.0], [0.6]]]), bwd_s=np.array([[[2.0], [1.2]]]),
        tp_comm_fwd_s=0 * ones, tp_comm_bwd_s=0 * ones, param_bytes=np.array([[[8.0], [4.0]]]), saved_bytes=ones,
        input_bytes=ones, output_bytes=ones, num_pre=0, num_layers=1, devices=4, global_batch=8, seq_len=4,
        hbm_bytes=100.0, network=Network(4, 4, 1.0, 1.0),
    )
    result = optimize(inp)
    assert (result.strategy.dp, result.strategy.pp, result.strategy.tp) == (2, 1, 2)
    assert result.time_per_batch_s == pytest.approx(11.2)
    assert reference.brute_force(inp).time_per_batch_s == result.time_per_batch_s
