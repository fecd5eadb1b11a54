"""One DP kernel run: its inputs (model state, timeline arrays, weights as memory counts them), its Pareto fronts, and
the final round pricing the front points over the data-parallel degrees."""

from __future__ import annotations

import numpy as np

from phaze.placement import dp
from phaze.placement.chain import Chain, _part_s
from phaze.placement.inputs import PlacementInput
from phaze.placement.layouts import Layout, layouts
from phaze.placement.runs import Group
from phaze.placement.space import Config
from phaze.placement.stepcomm import timeline_arrays
from phaze.placement.timing import pipeline_in_one_node

FRONT_GROWTH = 4
"""A run whose front outgrew its capacity (phaze.placement.solve.FRONT_CAPACITY) is repeated with this many times more."""
NO_TIMELINE = np.zeros((len(dp.TL_FIELDS), 1, 1))
"""Placeholder timeline arrays for PHAZE's step model (never read)."""


def _any_layout(inp: PlacementInput) -> Layout:
    """The layout allowing every stage."""
    return layouts(inp.num_pre, inp.num_layers, inp.num_parts, "any")[0]


def _state(inp: PlacementInput, config: Config, group: Group) -> tuple[float, float]:
    """(weights+gradients+optimizer bytes per weight byte, transient part copies) of a run."""
    if inp.step_model == "phaze":
        return inp.state_mult(), 0.0
    d = group.replicas[0][0]
    cp = int(inp.cp_values[config.vi])
    return inp.state_mult(config.zero, d * cp), inp.transient_copies(config.zero)


def _timeline(inp: PlacementInput, config: Config, chain: Chain, group: Group) -> np.ndarray:
    if inp.step_model == "phaze":
        return NO_TIMELINE
    if not inp.reduces_gradients:
        return np.zeros((len(dp.TL_FIELDS), *chain.prm.shape))
    return timeline_arrays(
        chain.prm, chain.tp, inp.network, zero=config.zero, dp=group.replicas[0][0], cp=int(inp.cp_values[config.vi]),
        replicas=group.replicas_within, expert=chain.exp, ep=int(inp.ep_values[config.vi]), **inp.step_comm_options(),
    )


def _timeline_of(inp: PlacementInput, config: Config, chain: Chain, group: Group, timelines: dict | None) -> np.ndarray:
    """_timeline, kept in `timelines` (when given) for the later runs of the same call: recompute modes and p2p links share it."""
    key = (config.vi, config.zero, chain.tp_idx, group.replicas[0][0], group.replicas_within)
    tl = (timelines or {}).get(key)
    if tl is None:
        tl = _timeline(inp, config, chain, group)
        if timelines is not None:
            timelines[key] = tl
    return tl


def _tail_floors_s(inp: PlacementInput, config: Config, chain: Chain, tl: np.ndarray) -> tuple[float, float]:
    """Two floors on the stages' tails (timeline step; dp.extend_stage's flow shops): the least tail of the stage
    holding part 0 (its compute, serial extras and update, the step's gather before its first forward and its
    reduction after the backward, which ends with it), and the least sum of all stages' tails (each at least its
    parts' forwards, step gathers, updates and last-microbatch reductions, which run one after another)."""
    own = _part_s(chain, config.recompute, inp.per_layer_recompute)[:, 0]
    comm = tl[dp.TL_XH, :, 0] + tl[dp.TL_XBL, :, 0] + tl[dp.TL_OPT, :, 0] + tl[dp.TL_GH, :, 0] + tl[dp.TL_RBL, :, 0]
    per_part = chain.fwd + tl[dp.TL_XH] + tl[dp.TL_OPT] + tl[dp.TL_RBL]
    return float((own + comm).min()), float(per_part.min(axis=0).sum())


def _kernel_args(inp: PlacementInput, config: Config, chain: Chain, group: Group) -> tuple:
    """The chain's kernel arrays, its weights weighted for memory as the run's expert-data-parallel group shards them."""
    if inp.step_model == "phaze":
        return chain.args()
    d, cp, ep = group.replicas[0][0], int(inp.cp_values[config.vi]), int(inp.ep_values[config.vi])
    args = list(chain.args())
    args[2] = np.ascontiguousarray(inp.memory_param_bytes(chain.prm, chain.exp, config.zero, d * cp, ep))
    return tuple(args)


def least_state_bytes(inp: PlacementInput, config: Config, chain: Chain, group: Group) -> float:
    """Least weights, gradients and optimizer state a run's pipeline holds in all (bytes): each part on its cheapest
    width, state_mult bytes per weight byte on each of the stage's devices. Every stage device's memory (dp.stage_fits)
    is at least its parts' share of it, so a pipeline of k devices needs k HBMs of at least this much."""
    mult, _ = _state(inp, config, group)
    prm = _kernel_args(inp, config, chain, group)[2]
    return float(mult * (chain.widths[:, None] * prm).min(axis=0).sum())


def kernel_fronts(chain: Chain, inp, config: Config, group: Group, k_max, bound, front_cap, timelines: dict | None = None,
                  layout: Layout | None = None):
    """Run the kernel with devices counted in units of the widths' gcd (a single-width pipeline of
    q stages then has one k), growing the front capacity until no cell overflows. Returns the
    fronts (L, Z, count, unit: cell k holds k x unit devices) and the capacity that sufficed.
    `timelines` keeps the timeline arrays of earlier runs: recompute modes and p2p links share them;
    `layout` says which stages the plans may use (None: any)."""
    layout = layout or _any_layout(inp)
    unit = int(np.gcd.reduce(chain.widths))
    k_units = k_max // unit
    q_max = min(inp.num_parts, k_units // int(chain.widths.min() // unit), layout.max_stages)
    rep_k = np.array([r[2] // unit for r in group.replicas], np.int64)
    rep_m = np.array([r[1] for r in group.replicas], np.int64)
    mult, transient = _state(inp, config, group)
    tl = _timeline_of(inp, config, chain, group, timelines)
    while True:
        out_l, out_p, out_c, ok = dp.pareto_fronts(
            *_kernel_args(inp, config, chain, group), tl, chain.widths // unit, mult, transient, float(inp.hbm_bytes), config.recompute == "full",
            inp.per_layer_recompute, inp.timeline_mode(config.zero), int(group.cap), int(q_max), int(k_units), rep_k, rep_m,
            float(bound), int(front_cap), layout.allowed, layout.last_part,
        )
        if ok:
            break
        front_cap *= FRONT_GROWTH
    return (out_l, out_p, out_c, unit), front_cap


def final_round(inp, fronts, group: Group, link: bool | None, best: float,
                min_stages: int = 1) -> tuple[float, int, int, int, float, float] | None:
    """Best (time, d, q, k, L, Z) over the group's replica counts, pipelines of at least `min_stages` stages whose p2p
    link kind matches `link` (None: any) and the front points; None if nothing beats `best`."""
    loads, tails, counts, unit = fronts
    if not len(loads):
        return None
    qs, ks = np.nonzero(counts)
    per_cell = counts[qs, ks]
    qs, ks = np.repeat(qs, per_cell), np.repeat(ks, per_cell) * unit
    keep = qs >= min_stages
    if link is not None:
        keep &= pipeline_in_one_node(ks, inp.network.node_size) == link
    if group.pipeline_sizes:
        keep &= np.isin(ks, group.pipeline_sizes)
    qs, ks, loads, tails = qs[keep], ks[keep], loads[keep], tails[keep]
    found = None
    for d, m, k_d in group.replicas:
        sel = ks <= k_d
        if not sel.any():
            continue
        q, k, load, tail = qs[sel], ks[sel], loads[sel], tails[sel]
        if inp.step_model == "timeline":
            tpb = load * (m + q - 2).astype(np.float64) + np.maximum(load, tail)
        elif not inp.reduces_gradients:
            tpb = load * (m + q - 1).astype(np.float64)
        else:
            allreduce = np.empty(len(k))
            uniq, inverse = np.unique(k, return_inverse=True)
            by_spread: dict[tuple[int, ...], list[int]] = {}
            for i, kk in enumerate(uniq):
                by_spread.setdefault(inp.network.spread(d, int(kk)), []).append(i)
            for idx in by_spread.values():
                rows = np.isin(inverse, idx)
                allreduce[rows] = inp.network.allreduce_s(tail[rows], d, int(uniq[idx[0]]))
            tpb = load * (m + q - 1).astype(np.float64) + allreduce
        a = int(np.argmin(tpb))
        if tpb[a] < best:
            best = float(tpb[a])
            found = (best, d, int(q[a]), int(k[a]), float(load[a]), float(tail[a]))
    return found
