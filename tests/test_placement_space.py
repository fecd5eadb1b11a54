"""The placement DP over the enlarged space (layer variants with sequence and context parallelism and TP
overlap, none / selective / full recompute, ZeRO 0-3, interleaving, the timeline step with its
overlaps, ZeRO-3's collectives on one stream or two) against brute force on small random instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from phaze.placement import PlacementInput
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.placement import solve
from phaze.placement.plan import Plan, evaluate_plan
from phaze.placement.solve import Space
from phaze.placement.timing import pipeline_in_one_node
from tests.test_placement_dp import random_network, solved_three_ways


@st.composite
def modern_chains(draw, max_parts=4, parts=None):
    """A random chain with 1-3 layer variants and attention-core costs, timed by either step model
    (PHAZE's leaves ZeRO and context parallelism out of the space); `parts` (a list) fixes its possible lengths."""
    n = draw(st.sampled_from(parts) if parts else st.integers(2, max_parts))
    widths = np.array(draw(st.sampled_from([[1], [1, 2], [2, 4], [1, 2, 4]])))
    variants = draw(st.lists(st.tuples(st.sampled_from([1, 2]), st.booleans(), st.sampled_from([1, 2]), st.booleans(), st.sampled_from([1, 2])),
                             min_size=1, max_size=3, unique=True))
    mbs = np.array([v[0] for v in variants])
    sp = np.array([v[1] for v in variants])
    cp = np.array([v[2] for v in variants])
    overlap = np.array([v[3] for v in variants])
    ep = np.array([v[4] for v in variants])
    shape = (len(variants), len(widths), n)
    unit = st.floats(0.05, 1.0, allow_nan=False)
    base = {name: draw(arrays(np.float64, (n,), elements=unit)) for name in ("fwd", "prm", "sav", "inb", "outb", "core")}
    jitter = draw(arrays(np.float64, shape, elements=st.floats(0.8, 1.25)))
    scale = (mbs / cp)[:, None, None] / widths[None, :, None] * np.where(sp, 0.9, 1.0)[:, None, None]
    tp_comm = 0.02 * (widths[None, :, None] > 1) * mbs[:, None, None] * np.where(overlap, 0.5, 1.0)[:, None, None] * np.ones(shape)
    fwd = base["fwd"] * scale * jitter + tp_comm + 0.03 * (ep[:, None, None] > 1)
    param_bytes = base["prm"] * 10 / widths[None, :, None] * np.ones(shape)
    # A mixture of experts: most weights of its MoE blocks are experts, divided by ep; its dense blocks (DeepSeek's
    # first ones) and a dense model have none. Drawn per part, so chains mix dense and MoE blocks.
    expert_share = draw(arrays(np.float64, (n,), elements=st.sampled_from([0.0, 0.8])))
    param_bytes = param_bytes * ((1 - expert_share) + expert_share / ep[:, None, None])
    saved = base["sav"] * 5 * scale * jitter
    optimizer = draw(st.sampled_from(["sgd", "adam"]))
    hbm_fraction = draw(st.sampled_from([0.3, 0.6, 1.0, 1.5]))
    part_bytes = base["prm"] * 10 * state_bytes_per_param_byte(optimizer, 2) + base["sav"] * 5 * mbs.max()
    hbm_bytes = max(hbm_fraction * part_bytes.sum(), 0.5 * part_bytes.max())
    network = random_network(draw)
    return PlacementInput(
        mbs_values=mbs, sp_values=sp, cp_values=cp, overlap_values=overlap, ep_values=ep, tp_values=widths,
        fwd_s=fwd, bwd_s=2 * fwd * jitter, tp_comm_fwd_s=tp_comm, tp_comm_bwd_s=tp_comm,
        param_bytes=param_bytes, expert_param_bytes=param_bytes * expert_share / ((1 - expert_share) * ep[:, None, None] + expert_share),
        saved_bytes=saved, input_bytes=base["inb"] * (mbs / cp)[:, None, None] * np.ones(shape),
        output_bytes=base["outb"] * (mbs / cp)[:, None, None] * np.ones(shape),
        core_fwd_s=0.3 * base["core"] * scale, core_saved_bytes=saved * draw(st.sampled_from([0.0, 0.4])),
        num_pre=0, num_layers=n, devices=draw(st.sampled_from([4, 6, 8, 16])), global_batch=draw(st.sampled_from([4, 8])),
        seq_len=32, hbm_bytes=hbm_bytes, network=network, optimizer=optimizer,
        recompute_granularity=draw(st.sampled_from(["layer", "stage"])), step_model=draw(st.sampled_from(["timeline", "phaze"])),
        overlap_grad_reduce=draw(st.booleans()), overlap_param_gather=draw(st.booleans()),
        grad_bucket_min_params=draw(st.sampled_from([0, 40])), grad_bucket_params_per_rank=draw(st.sampled_from([0, 4])),
        serial_zero3_collectives=draw(st.booleans()), per_param_sharding=draw(st.booleans()),
        update_bytes_per_param_byte=draw(st.sampled_from([0.0, 14.0])), hbm_bytes_s=draw(st.sampled_from([50.0, 500.0])),
        p2p_scatter_gather=draw(st.booleans()),
    )


@st.composite
def spaces(draw):
    return Space(
        recompute=tuple(draw(st.lists(st.sampled_from(["none", "selective", "full"]), min_size=1, max_size=3, unique=True))),
        zero=tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=1, max_size=2, unique=True))),
        sp=(False, True), cp=(1, 2), tp_comm_overlap=(False, True), ep=tuple(draw(st.sampled_from([(1,), (1, 2), (2,)]))),
        vp=tuple(draw(st.sampled_from([(1,), (1, 2), (2,)]))),
        per_stage_tp=draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=modern_chains(), space=spaces())
def test_dp_equals_brute_force_over_the_enlarged_space(inp, space):
    fast = solved_three_ways(inp, space=space)
    if fast is not None:
        s = fast.strategy
        event(f"zero {s.zero}, vp {s.vp}, cp {s.cp}, ep {s.ep}, {s.recompute}")
        assert fast.feasible and fast.memory_per_device_bytes <= inp.hbm_bytes
        assert s.devices_used <= inp.devices
        assert s.zero in space.zero and s.vp in space.vp and s.recompute in space.recompute and s.ep in space.ep
        assert s.dp % s.ep == 0 and (s.ep == 1 or s.zero <= 1)
        assert sum(fast.breakdown.values()) == pytest.approx(fast.time_per_batch_s, rel=1e-9)


def _interleaved_cases(inp, space):
    """Every interleaved plan of the space (vp 2-4) with what the enumeration bounds it by."""
    for config in solve._configs(inp, space):
        fields = config.plan_fields(inp)
        for ti in (ti for ti in range(len(inp.tp_values)) if inp.available(config.vi, ti)):
            t = int(inp.tp_values[ti])
            for split in solve.interleaved_splits(inp, (2, 3, 4)):
                same_node = bool(pipeline_in_one_node(split.pp * t * fields["cp"], inp.network.node_size))
                chain = solve.chain_arrays(inp, config.vi, config.recompute, (ti,), same_node)
                split_arrays = solve.split_arrays(inp, config.recompute, chain, solve.chain_sums(chain), split)
                for d, m, _ in solve.replica_counts(inp, fields["mbs"], np.array([t * fields["cp"]]), fields["ep"]):
                    plan = Plan(stages=tuple((a, b, t) for a, b in split.chunks), dp=d, vp=split.vp, **fields)
                    yield config, chain, split, split_arrays, d, m, evaluate_plan(inp, plan)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=modern_chains(parts=[4, 6, 8]), space=spaces())
def test_interleaved_bounds_never_exceed_a_plans_cost(inp, space):
    """The interleaved enumeration dismisses a plan by its split's spread work, its lower bound or its memory: each is
    at most the plan's from-scratch time / memory (the memory equal to it without expert parallelism)."""
    plans = 0
    for config, chain, split, split_arrays, d, m, cost in _interleaved_cases(inp, space):
        if not np.isfinite(cost.time_per_batch_s):
            continue
        plans += 1
        cp = config.plan_fields(inp)["cp"]
        spread_s = solve._part_s(chain, config.recompute, inp.per_layer_recompute)[0].sum() / split.pp * (m + (split.pp - 1) / split.vp)
        assert spread_s * (1 - solve.BOUND_RTOL) <= cost.time_per_batch_s
        assert solve.interleaved_bounds_s(inp, config.zero, split_arrays, split, np.array([m]), np.array([d * cp]))[0] <= cost.time_per_batch_s
        memory = solve.least_memory_bytes(inp, config, split_arrays, split, m, d)
        if config.plan_fields(inp)["ep"] == 1:
            assert memory == pytest.approx(cost.stage_memory_bytes, rel=1e-9)
        else:
            assert np.all(memory <= np.array(cost.stage_memory_bytes) * (1 + 1e-9))
    event(f"{plans} interleaved plans")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=modern_chains(), space=spaces())
def test_each_kernel_runs_bound_is_below_its_best_plan(inp, space):
    """The 1F1B search visits kernel runs by a lower bound and stops at the first that cannot beat the best plan: the
    bound is at most the best plan the run finds with no cut-off, also with the timeline's flow-shop work, and a run
    skipped because its pipelines' HBMs cannot hold the least model state finds no plan."""
    runs = skipped = 0
    for config in solve._configs(inp, space):
        mbs, ep = int(inp.mbs_values[config.vi]), int(inp.ep_values[config.vi])
        widths = [ti for ti in range(len(inp.tp_values)) if inp.available(config.vi, ti)]
        for tp_idx in [(ti,) for ti in widths] + ([tuple(widths)] if len(widths) > 1 else []):
            for link in solve._links(inp):
                chain = solve.chain_arrays(inp, config.vi, config.recompute, tp_idx, bool(link) if link is not None else True)
                work = solve._run_work(chain, config.recompute, inp.per_layer_recompute)
                groups = (solve.timeline_groups(inp, mbs, chain.widths, link, ep) if inp.step_model == "timeline"
                          else solve.dp_groups(inp, mbs, chain.widths, ep))
                table = solve._runs(inp, groups, chain.widths, link)
                for run, bound in zip(table.runs, table.bounds_s(work)):
                    fronts, _ = solve.kernel_fronts(chain, inp, config, run.group, run.k_max, np.inf, solve.FRONT_CAPACITY)
                    found = solve.final_round(inp, fronts, run.group, link, np.inf)
                    assert bound == pytest.approx(run.bound_s(work), rel=1e-12)
                    if solve.least_state_bytes(inp, config, chain, run.group) * (1.0 - solve.BOUND_RTOL) > run.k_max * inp.hbm_bytes:
                        skipped += 1
                        assert found is None
                    if found is not None:
                        runs += 1
                        assert bound <= found[0]
                        if inp.step_model == "timeline":
                            tl = solve._timeline_of(inp, config, chain, run.group, None)
                            tails = solve._tail_floors_s(inp, config, chain, tl)
                            assert run.bound_s(work, tails) <= found[0]
                            flow_work = solve._timeline_work(chain, config.recompute, inp.per_layer_recompute, tl)
                            assert flow_work.work_s >= work.work_s * (1 - 1e-12) and flow_work.part_floor_s >= work.part_floor_s * (1 - 1e-12)
                            assert run.bound_s(flow_work, tails) <= found[0]
    event(f"{runs} runs, {skipped} skipped for memory")
