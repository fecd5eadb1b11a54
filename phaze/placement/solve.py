"""optimize(): the placement DP over every dimension of the plan (phaze.placement.plan.Plan).

A configuration is a layer variant (microbatch, sequence parallelism, context parallelism, TP
communication overlap, expert parallelism), a recompute mode and a ZeRO stage. For each, the Numba kernel builds Pareto
fronts (max stage load L, max stage tail Z) of every pipeline shape (stages q, devices k); a final
round over the data-parallel degrees d (d divides B / mbs, d k <= D) prices each front point and
keeps the minimum:
- PHAZE's step (train.step_model=phaze): Z is a stage's weights and the price is L (m + q - 1) +
  all-reduce(Z, d, k); one kernel run serves every d whose m covers the deepest pipeline, and each
  shallower d gets its own, since a stage then holds min(q, m) microbatches;
- the timeline step: Z depends on d (ZeRO shards, the reduction group) and on how many replicas share
  a node, so each d and each class of pipeline sizes with the same replicas per node and p2p link
  gets its own run, priced L (m + q - 2) + max(L, Z).
Kernel runs are visited by a lower bound on their time, L (m + q - 1) with the bottleneck load L at least
the least device-seconds of a microbatch spread over the pipeline's k devices and at least the slowest
part, and q >= k / widest stage, and skipped once it cannot beat the best plan. Single-width pipelines
are solved first (cheap: k = q t); their best time bounds the per-stage-width runs (a framework preset,
Space.per_stage_tp False, has only those). Under a framework's rule for layers per stage (Space.stage_layers,
phaze.placement.layouts) each run is solved once per layout, the kernel keeping only the stages it allows, until a
layout's least time (its middle stages' layers at the fastest layer's time) cannot beat the best plan. Interleaved
schedules (vp > 1) take Megatron's uniform chunks, so their plans are enumerated, in increasing order of
a bound from each rank's compute, sends and optimizer update, with a memory test before any is costed.
The optimum is rebuilt as a plan, re-costed from scratch and checked. The pieces: the space (phaze.placement.space),
the runs and their bounds (.runs), one run's fronts (.fronts), interleaved plans (.interleaved), the rebuild (.reconstruct).
"""

from __future__ import annotations

import numpy as np

from phaze.placement.candidate import Candidate
from phaze.placement.chain import Chain, _part_s, chain_arrays
from phaze.placement.check import PlacementCheckError, check_result
from phaze.placement.fronts import (
    _any_layout, _kernel_args, _state, _tail_floors_s, _timeline, _timeline_of, final_round, kernel_fronts, least_state_bytes,
)
from phaze.placement.inputs import PlacementInput
from phaze.placement.interleaved import _interleaved
from phaze.placement.layouts import Layout, layouts
from phaze.placement.plan import Plan, evaluate_plan
from phaze.placement.reconstruct import reconstruct
from phaze.placement.result import PlacementResult, result_from_cost
from phaze.placement.runs import BOUND_RTOL, _in_bound_order, _run_work, _timeline_work, run_table
from phaze.placement.space import Space, _configs

# Imported from here by phaze.placement.reference, tests and experiments:
from phaze.placement.interleaved import chain_sums, interleaved_bounds_s, interleaved_splits, least_memory_bytes, split_arrays
from phaze.placement.runs import Group, _runs, dp_groups, replica_counts, timeline_groups
from phaze.placement.space import Config

FRONT_CAPACITY = 64
"""Pareto points a DP cell may hold while it is built; a run that outgrows it is repeated with
FRONT_GROWTH (phaze.placement.fronts) times more, and later runs of the same call start from the capacity that sufficed."""
MATCH_RTOL = 1e-9
"""Relative tolerance between the DP's time and the rebuilt plan's from-scratch time."""


def _links(inp) -> tuple[bool | None, ...]:
    """p2p link kinds to solve: one table when intra- and inter-node links are alike."""
    net = inp.network
    return (None,) if net.intra_bytes_s == net.inter_bytes_s else (True, False)


def _least_layer_s(inp: PlacementInput, chain: Chain, recompute: str) -> float:
    """The least per-microbatch time of one transformer layer at any of the chain's widths: a stage of c layers has a
    load of at least c times it, so a layout's plans, each with a stage of its middle_layers layers, take at least
    middle_layers x this x (m + min_stages - 1) (the bottleneck's slots L (m + q - 2) + max(L, Z) >= L (m + q - 1))."""
    layers = slice(inp.num_pre, inp.num_pre + inp.num_layers)
    return float(_part_s(chain, recompute, inp.per_layer_recompute)[:, layers].min()) if inp.num_layers else 0.0


def _search(inp, configs, width_sets, best: Candidate | None, cutoff_s: float = np.inf,
            stage_layouts: tuple[Layout, ...] | None = None) -> Candidate | None:
    """Every kernel run of these configurations and width sets, cheapest lower bound first, until no run's bound
    beats the best plan (or, before one is found, `cutoff_s`); under the timeline step a run is also skipped when its
    bound with the stages' least tails (_tail_floors_s), or that bound on its flow-shop work (_timeline_work), cannot
    beat it, and any run whose pipelines cannot hold the least model state (least_state_bytes) is skipped. A run is
    solved once per layout of `stage_layouts` (None: any stage), each bounded by the best plan so far."""
    stage_layouts = stage_layouts or (_any_layout(inp),)
    front_cap = FRONT_CAPACITY
    blocks, bounds, chains, timelines, tails, works = [], [], {}, {}, {}, {}
    for config in configs:
        mbs = int(inp.mbs_values[config.vi])
        for tp_idx in width_sets(config.vi):
            for link in _links(inp):
                key = (config.vi, config.recompute, tp_idx, link)
                if key not in chains:
                    chain = chain_arrays(inp, config.vi, config.recompute, tp_idx, bool(link) if link is not None else True)
                    chains[key] = (chain, _run_work(chain, config.recompute, inp.per_layer_recompute))
                chain, work = chains[key]
                ep = int(inp.ep_values[config.vi])
                table = run_table(inp, mbs, chain.widths, link, ep)
                if table.runs:
                    blocks.append((config, chain, work, link, table.runs))
                    bounds.append(table.bounds_s(work))
    for (config, chain, work, link, runs), j, lower in _in_bound_order(blocks, bounds):
        bound = best.time_per_batch_s if best else cutoff_s
        if lower >= bound:
            break
        run = runs[j]
        group = run.group
        if inp.step_model == "timeline":
            key = (config.vi, config.zero, config.recompute, chain.tp_idx, group.replicas[0][0], group.replicas_within)
            if key not in tails:
                tails[key] = _tail_floors_s(inp, config, chain, _timeline_of(inp, config, chain, group, timelines))
            if run.bound_s(work, tails[key]) >= bound:
                continue
            if key not in works:
                works[key] = _timeline_work(chain, config.recompute, inp.per_layer_recompute, _timeline_of(inp, config, chain, group, timelines))
            if run.bound_s(works[key], tails[key]) >= bound:
                continue
        if least_state_bytes(inp, config, chain, group) * (1.0 - BOUND_RTOL) > run.k_max * inp.hbm_bytes:
            continue
        layer_s = _least_layer_s(inp, chain, config.recompute) if len(stage_layouts) > 1 else 0.0
        m_min = min(r[1] for r in group.replicas)
        for layout in stage_layouts:
            bound = best.time_per_batch_s if best else cutoff_s
            if layout.middle_layers * layer_s * (m_min + layout.min_stages - 1) * (1.0 - BOUND_RTOL) >= bound:
                break
            fronts, front_cap = kernel_fronts(chain, inp, config, group, run.k_max, bound, front_cap, timelines, layout)
            found = final_round(inp, fronts, group, link, bound, layout.min_stages)
            if found:
                tpb, d, q, k, load, tail = found
                same = bool(link) if link is not None else True
                best = Candidate(tpb, config, chain.tp_idx, same, group, d, q, k, load, tail, layout=layout)
    return best


def rebuild(inp: PlacementInput, best: Candidate) -> Plan:
    """The plan behind a front point: q stages on k devices meeting its (load, tail) caps."""
    if best.plan is not None:
        return best.plan
    config = best.config
    chain = chain_arrays(inp, config.vi, config.recompute, best.tp_idx, best.same_node)
    mult, transient = _state(inp, config, best.group)
    unit = int(np.gcd.reduce(chain.widths))
    layout = best.layout or _any_layout(inp)
    stages, ok = reconstruct(
        *_kernel_args(inp, config, chain, best.group), _timeline(inp, config, chain, best.group), chain.widths // unit, mult, transient,
        float(inp.hbm_bytes), config.recompute == "full", inp.per_layer_recompute, inp.timeline_mode(config.zero),
        int(best.group.cap), best.stages, best.devices_per_pipeline // unit, best.load_s, best.tail, layout.allowed, layout.last_part,
    )
    if not ok:
        raise PlacementCheckError(f"no plan rebuilt for DP point {best}")
    return Plan(stages=tuple((int(a), int(b), int(chain.tp[w])) for a, b, w in stages), dp=best.dp, **config.plan_fields(inp))


def optimize(inp: PlacementInput, recompute_options=(False, True), mbs_options=None, *, per_stage_tp: bool = True,
             space: Space | None = None, cutoff_s: float = np.inf) -> PlacementResult | None:
    """The fastest placement of the chain (exact under the cost model of phaze.placement.plan), or None if none fits
    or none is faster than `cutoff_s` per batch (a search that only needs plans beating a known one says so: the
    runs whose lower bound cannot beat it are skipped from the start).

    `space` gives every dimension's options; without it, PHAZE's space with `recompute_options`,
    `mbs_options` and `per_stage_tp` (False restricts every pipeline to one TP width).
    """
    space = space or Space(recompute=tuple(recompute_options), mbs=None if mbs_options is None else tuple(mbs_options),
                           per_stage_tp=per_stage_tp)
    configs = _configs(inp, space)

    def available(vi):
        return [ti for ti in range(len(inp.tp_values)) if inp.available(vi, ti)]

    best = None
    stage_layouts = layouts(inp.num_pre, inp.num_layers, inp.num_parts, space.stage_layers)
    if 1 in space.vp:
        best = _search(inp, configs, lambda vi: [(ti,) for ti in available(vi)], best, cutoff_s, stage_layouts)
        if space.per_stage_tp:
            best = _search(inp, configs, lambda vi: [tuple(available(vi))] if len(available(vi)) > 1 else [], best, cutoff_s, stage_layouts)
    if any(v > 1 for v in space.vp):
        best = _interleaved(inp, space, configs, available, best, cutoff_s)
    if best is None:
        return None
    cost = evaluate_plan(inp, rebuild(inp, best))
    if not cost.feasible or abs(cost.time_per_batch_s - best.time_per_batch_s) > MATCH_RTOL * best.time_per_batch_s:
        raise PlacementCheckError(
            f"DP time {best.time_per_batch_s} s but the rebuilt plan costs {cost.time_per_batch_s} s "
            f"(feasible={cost.feasible}, {cost.reason})"
        )
    result = result_from_cost(inp, cost)
    check_result(inp, result)
    return result


def warm_up() -> None:
    """Compile (or load from the Numba cache) every kernel once, on a two-part chain, in every step model (dp.TIMELINE_*)."""
    from phaze.cost.network import Network

    ones = np.ones((1, 1, 2))
    for step_model, zero in (("phaze", 0), ("timeline", 0), ("timeline", 3)):
        inp = PlacementInput(
            mbs_values=[1], tp_values=[1], fwd_s=ones, bwd_s=ones, tp_comm_fwd_s=0 * ones, tp_comm_bwd_s=0 * ones,
            param_bytes=ones, saved_bytes=ones, input_bytes=ones, output_bytes=ones, num_pre=0, num_layers=2,
            devices=2, global_batch=2, seq_len=1, hbm_bytes=1e3, network=Network(2, 2, 1.0, 1.0), step_model=step_model,
            overlap_param_gather=True, serial_zero3_collectives=True,
        )
        optimize(inp, space=Space(zero=(zero,)))
