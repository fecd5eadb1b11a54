"""Megatron's interleaved 1F1B schedules (vp > 1): their uniform splits, the bounds and memory floors that order and
skip their plans, and the search costing those plans from scratch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.placement import dp
from phaze.placement.candidate import Candidate
from phaze.placement.chain import Chain, _part_s, chain_arrays
from phaze.placement.fixed import megatron_stage_bounds
from phaze.placement.fronts import _timeline_of
from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import Plan, evaluate_plan, interleaved_chunk_inflight
from phaze.placement.runs import BOUND_RTOL, Group, _in_bound_order, replica_counts
from phaze.placement.space import Config, Space
from phaze.placement.stepcomm import replicas_within
from phaze.placement.timing import pipeline_in_one_node


@dataclass(frozen=True)
class Split:
    """Megatron's interleaved split of the chain: pp x vp uniform chunks, chunk c on pipeline rank c mod pp."""

    pp: int
    vp: int
    chunks: tuple[tuple[int, int], ...]
    first: np.ndarray
    last: np.ndarray
    rank: np.ndarray


def interleaved_splits(inp: PlacementInput, vps) -> list[Split]:
    """Every interleaved split with vp in `vps` (> 1) and pp >= 2 dividing the layers (Megatron-LM's rule)."""
    out = []
    for vp in (v for v in vps if v > 1):
        for pp in range(2, inp.num_layers // vp + 1):
            if inp.num_layers % (pp * vp) == 0:
                chunks = megatron_stage_bounds(inp, pp * vp)
                first, last = (np.array(side, dtype=np.int64) for side in zip(*chunks))
                out.append(Split(pp, vp, chunks, first, last, np.arange(pp * vp) % pp))
    return out


@dataclass(frozen=True)
class SplitArrays:
    """Per pipeline rank of one split on one chain: the least per-microbatch load (compute, recompute and pipeline
    sends, no data-parallel communication: evaluate_plan's load without its gathers) and the weights (bytes on one
    device); per chunk what its memory is made of (weights, expert weights, saved bytes, first part's input, sum of
    its parts' inputs, its largest per-layer rebuild and largest part's weights)."""

    load_s: np.ndarray
    param_bytes: np.ndarray
    recomputes: np.ndarray
    chunk: dict


def chain_sums(chain: Chain) -> dict[str, np.ndarray]:
    """Prefix sums over the parts of the chain's first width (a chunk's totals are two lookups)."""
    return {name: np.concatenate([[0.0], np.cumsum(getattr(chain, name)[0])]) for name in ("fwd", "bwd", "prm", "exp", "sav", "inb")}


def split_arrays(inp: PlacementInput, recompute: str, chain: Chain, sums: dict, split: Split) -> SplitArrays:
    """SplitArrays of the split on the chain's single width (`sums`: chain_sums(chain))."""
    pp = split.pp
    span = {name: sums[name][split.last + 1] - sums[name][split.first] for name in sums}
    recomputes = np.array([bool(dp.stage_recomputes(recompute == "full", pp - r, inp.per_layer_recompute)) for r in range(pp)])
    compute = span["fwd"] + span["bwd"] + np.where(recomputes[split.rank], span["fwd"], 0.0)
    load = np.bincount(split.rank, compute + chain.recv[0, split.first] + chain.send[0, split.last], minlength=pp)
    chunk = dict(prm=span["prm"], exp=span["exp"], sav=span["sav"], inb=span["inb"], first_inb=chain.inb[0, split.first],
                 rebuild=np.maximum.reduceat(chain.sav[0] - chain.inb[0], split.first), prm_max=np.maximum.reduceat(chain.prm[0], split.first))
    return SplitArrays(load, np.bincount(split.rank, span["prm"], minlength=pp), recomputes, chunk)


def interleaved_bounds_s(inp: PlacementInput, zero: int, arrays: SplitArrays, split: Split, m: np.ndarray, shards: np.ndarray) -> np.ndarray:
    """Lower bounds on the split's time per batch for each (m, shards): evaluate_plan's formula, L (m + (pp - 1) / vp
    - 1) + max(L, Z), on the ranks' least loads and tails of that load plus the rank's optimizer update (PHAZE's
    step: L (m + (pp - 1) / vp)); every gather, reduction and flow-shop wait it leaves out only adds time."""
    load = float(arrays.load_s.max())
    bubble = (split.pp - 1) / split.vp
    if inp.step_model != "timeline":
        return load * (m + bubble) * (1.0 - BOUND_RTOL)
    update_s = np.zeros(len(m))
    if inp.reduces_gradients and inp.hbm_bytes_s > 0:
        update_s = inp.update_bytes_per_param_byte / inp.hbm_bytes_s / (shards if zero >= 1 else np.ones(len(m)))
    tail = (arrays.load_s[None, :] + arrays.param_bytes[None, :] * update_s[:, None]).max(axis=1)
    return (load * (m + bubble - 1.0) + np.maximum(load, tail)) * (1.0 - BOUND_RTOL)


def least_memory_bytes(inp: PlacementInput, config: Config, arrays: SplitArrays, split: Split, m: int, d: int) -> np.ndarray:
    """Each rank's memory by evaluate_plan's terms (model state, each chunk's in-flight activations, the largest
    per-layer rebuild, ZeRO's unsharded buffers), the buffers at the largest part's weights before expert sharding."""
    cp, ep = int(inp.cp_values[config.vi]), int(inp.ep_values[config.vi])
    c = arrays.chunk
    mult = inp.state_mult(config.zero, d * cp)
    weights = c["prm"] + c["exp"] * (inp.state_mult(config.zero, d * cp // ep) / mult - 1.0) if ep > 1 else c["prm"]
    pp, vp = split.pp, split.vp
    inflight = interleaved_chunk_inflight(split.rank, np.arange(pp * vp) // pp, pp, vp, m)
    rcs = arrays.recomputes[split.rank]
    if inp.per_layer_recompute:
        activations = np.where(rcs, inflight * c["inb"], c["sav"] * inflight)
    else:
        activations = np.where(rcs, c["sav"] + (inflight - 1) * c["first_inb"], c["sav"] * inflight)
    memory = np.bincount(split.rank, weights * mult + activations, minlength=pp)
    rebuild, part_max = np.full(pp, -np.inf), np.full(pp, -np.inf)
    np.maximum.at(rebuild, split.rank, np.where(rcs & inp.per_layer_recompute, c["rebuild"], 0.0))
    np.maximum.at(part_max, split.rank, c["prm_max"])
    return memory + rebuild + inp.transient_copies(config.zero) * part_max


def stage_comm_floor_s(tl: np.ndarray, wi: int, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least data-parallel communication a stage of parts first..last (arrays) at width index wi adds to its load and to
    its tail, from dp.extend_stage's flow shops: its serial extras; the first part's gather before the first forward;
    the last part's gather before the backward, which starts with it; the first part's reduction after the backward,
    which ends with it; and, in the tail, the optimizer update."""
    sums = np.concatenate([np.zeros((len(dp.TL_FIELDS), 1)), np.cumsum(tl[:, wi], axis=1)], axis=1)
    span = sums[:, last + 1] - sums[:, first]
    at_first, at_last = tl[:, wi, first], tl[:, wi, last]
    load = span[dp.TL_XF] + span[dp.TL_XB] + at_first[dp.TL_GF] + at_last[dp.TL_GB] + at_first[dp.TL_RBM]
    tail = span[dp.TL_XH] + span[dp.TL_XBL] + span[dp.TL_OPT] + at_first[dp.TL_GH] + at_last[dp.TL_GB] + at_first[dp.TL_RBL]
    return load, tail


def interleaved_comm_bound_s(inp: PlacementInput, arrays: SplitArrays, split: Split, tl: np.ndarray, m: int) -> float:
    """A lower bound on an interleaved plan's time (timeline step) from each rank's least load plus its chunks'
    stage_comm_floor_s: the load's terms and, in the tail, the step's update and exposed reductions."""
    load_extra, tail_extra = stage_comm_floor_s(tl, 0, split.first, split.last)
    load = arrays.load_s + np.bincount(split.rank, load_extra, minlength=split.pp)
    tail = arrays.load_s + np.bincount(split.rank, tail_extra, minlength=split.pp)
    most = float(load.max())
    return (most * (m + (split.pp - 1) / split.vp - 1.0) + max(most, float(tail.max()))) * (1.0 - BOUND_RTOL)


def _split_replicas(inp: PlacementInput, splits: list[Split], mbs: int, width: int, ep: int) -> list[tuple[Split, np.ndarray, np.ndarray, int, bool]]:
    """Per split of stages `width` devices wide: its replica counts d and m (m a multiple of pp, the pipelines within
    the devices), the least m, and whether a pipeline stays in one node; splits that allow none left out."""
    replicas = np.array(replica_counts(inp, mbs, np.array([width]), ep), dtype=np.int64).reshape(-1, 3)
    out = []
    for split in splits:
        d, m = replicas[:, 0], replicas[:, 1]
        keep = (m % split.pp == 0) & (d * split.pp * width <= inp.devices)
        if keep.any():
            out.append((split, d[keep], m[keep], int(m[keep].min()), bool(pipeline_in_one_node(split.pp * width, inp.network.node_size))))
    return out


def _interleaved(inp: PlacementInput, space: Space, configs, available, best: Candidate | None,
                 cutoff_s: float = np.inf) -> Candidate | None:
    """Megatron's interleaved 1F1B (vp > 1): one TP width, pp x vp uniform chunks, m a multiple of pp. A split whose
    work spread over its ranks, (m + (pp - 1) / vp) sum / pp, cannot beat the best plan is skipped; the others' plans
    get a lower bound (interleaved_bounds_s, the ranks' loads shared by the ZeRO stages) and are costed from scratch
    in increasing bound order, those whose memory cannot fit skipped, until no bound beats the best plan."""
    splits = interleaved_splits(inp, space.vp)
    groups, bounds, chains, timelines, shapes = [], [], {}, {}, {}
    for config in configs:
        mbs, cp, ep = (int(values[config.vi]) for values in (inp.mbs_values, inp.cp_values, inp.ep_values))
        for ti in available(config.vi):
            t = int(inp.tp_values[ti])
            if (mbs, t, cp, ep) not in shapes:
                shapes[mbs, t, cp, ep] = _split_replicas(inp, splits, mbs, t * cp, ep)
            for split, d, m, m_min, same_node in shapes[mbs, t, cp, ep]:
                key = (config.vi, config.recompute, ti, same_node)
                if key not in chains:
                    chain = chain_arrays(inp, config.vi, config.recompute, (ti,), same_node)
                    chains[key] = (chain, chain_sums(chain), float(_part_s(chain, config.recompute, inp.per_layer_recompute)[0].sum()), {})
                chain, sums, total_s, per_split = chains[key]
                if total_s / split.pp * (m_min + (split.pp - 1) / split.vp) * (1.0 - BOUND_RTOL) >= (best.time_per_batch_s if best else cutoff_s):
                    continue
                if (split.pp, split.vp) not in per_split:
                    per_split[split.pp, split.vp] = split_arrays(inp, config.recompute, chain, sums, split)
                arrays = per_split[split.pp, split.vp]
                groups.append((config, ti, chain, arrays, split, d, m))
                bounds.append(interleaved_bounds_s(inp, config.zero, arrays, split, m, d * cp))
    for (config, ti, chain, arrays, split, ds, ms), j, lower in _in_bound_order(groups, bounds):
        bound = best.time_per_batch_s if best else cutoff_s
        if lower >= bound:
            break
        d, m = int(ds[j]), int(ms[j])
        if least_memory_bytes(inp, config, arrays, split, m, d).max() * (1.0 - BOUND_RTOL) > inp.hbm_bytes:
            continue
        if inp.step_model == "timeline":
            within = replicas_within(inp.network, d, split.pp * int(chain.widths[0]))
            tl = _timeline_of(inp, config, chain, Group(m, ((d, m, 0),), 0, replicas_within=within), timelines)
            if interleaved_comm_bound_s(inp, arrays, split, tl, m) >= bound:
                continue
        plan = Plan(stages=tuple((a, b, int(inp.tp_values[ti])) for a, b in split.chunks), dp=d, vp=split.vp, **config.plan_fields(inp))
        cost = evaluate_plan(inp, plan)
        if cost.feasible and cost.time_per_batch_s < bound:
            best = Candidate(cost.time_per_batch_s, config, (ti,), True, Group(m, ((d, m, 0),), 0), d,
                             split.pp, plan.devices_per_pipeline, 0.0, 0.0, plan)
    return best
