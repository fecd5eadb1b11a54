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
Configurations are visited by a lower bound on their time (the least device-seconds of a microbatch
spread over every device a pipeline may use, times m) and skipped once it cannot beat the best plan.
Single-width pipelines are solved first (cheap: k = q t); their best time bounds the per-stage-width
runs. Interleaved schedules (vp > 1) take Megatron's uniform chunks, so their plans are enumerated.
The optimum is rebuilt as a plan, re-costed from scratch and checked.
"""

from __future__ import annotations

import functools

import itertools
from dataclasses import dataclass, field

import numpy as np

from phaze.placement import dp
from phaze.placement.check import PlacementCheckError, check_result
from phaze.placement.fixed import megatron_stage_bounds
from phaze.placement.inputs import PlacementInput
from phaze.placement.memory import ZERO_TRANSIENT_PART_COPIES
from phaze.placement.plan import Plan, chain_arrays_of, evaluate_plan, recompute_mode
from phaze.placement.result import PlacementResult, result_from_cost
from phaze.placement.stepcomm import replicas_within, timeline_arrays
from phaze.placement.timing import pipeline_in_one_node

FRONT_CAPACITY = 64
"""Pareto points a DP cell may hold while it is built; a run that outgrows it is repeated with
FRONT_GROWTH times more, and later runs of the same call start from the capacity that sufficed."""
FRONT_GROWTH = 4
MATCH_RTOL = 1e-9
"""Relative tolerance between the DP's time and the rebuilt plan's from-scratch time."""
NO_TIMELINE = np.zeros((len(dp.TL_FIELDS), 1, 1))
"""Placeholder timeline arrays for PHAZE's step model (never read)."""


@dataclass(frozen=True)
class Space:
    """The values of each placement dimension the search may choose (phaze.placement.plan.Plan)."""

    recompute: tuple = ("none", "full")
    mbs: tuple | None = None
    """None: every costed microbatch size."""
    zero: tuple = (0,)
    sp: tuple = (False,)
    vp: tuple = (1,)
    cp: tuple = (1,)
    tp_comm_overlap: tuple = (False,)
    ep: tuple = (1,)
    per_stage_tp: bool = True
    """False restricts every pipeline to one TP width (PHAZE's search space)."""

    def __post_init__(self):
        object.__setattr__(self, "recompute", tuple(dict.fromkeys(recompute_mode(r) for r in self.recompute)))


@dataclass(frozen=True)
class Chain:
    """Kernel arrays [width, part] for one layer variant, recompute mode, set of widths and p2p link kind."""

    fwd: np.ndarray
    bwd: np.ndarray
    prm: np.ndarray
    sav: np.ndarray
    inb: np.ndarray
    recv: np.ndarray
    send: np.ndarray
    widths: np.ndarray
    """Devices of a stage at each width: TP width x context-parallel width."""
    tp: np.ndarray
    tp_idx: tuple[int, ...]
    exp: np.ndarray
    """Expert weights among prm (memory and reductions over the expert-data-parallel group)."""

    def args(self) -> tuple:
        return (self.fwd, self.bwd, self.prm, self.sav, self.inb, self.recv, self.send)


def chain_arrays(inp: PlacementInput, vi: int, recompute: str, tp_idx: tuple[int, ...], same_node: bool) -> Chain:
    """Contiguous arrays for the kernels; recv / send are the p2p times at stage boundaries."""
    idx = list(tp_idx)
    arrays = chain_arrays_of(inp, vi, recompute)
    inb = np.ascontiguousarray(arrays["inb"][idx])
    tp = inp.tp_values[idx].astype(np.int64)
    recv = inp.boundary_s(inb, vi, tp, same_node)
    recv[:, 0] = 0.0
    send = inp.boundary_s(arrays["outb"][idx], vi, tp, same_node)
    send[:, -1] = 0.0
    return Chain(
        fwd=np.ascontiguousarray(arrays["fwd"][idx]),
        bwd=np.ascontiguousarray(arrays["bwd"][idx]),
        prm=np.ascontiguousarray(arrays["prm"][idx]),
        sav=np.ascontiguousarray(arrays["sav"][idx]),
        inb=inb,
        recv=np.ascontiguousarray(recv),
        send=np.ascontiguousarray(send),
        widths=tp * int(inp.cp_values[vi]),
        tp=tp,
        tp_idx=tuple(tp_idx),
        exp=np.ascontiguousarray(arrays["exp"][idx]),
    )


@dataclass(frozen=True)
class Group:
    """Data-parallel degrees solved by one kernel run: (d, m, K_d) with K_d the pipeline device limit."""

    cap: int
    """In-flight microbatch cap min(q, cap): m for a lone d, beyond any depth for the shared run."""
    replicas: tuple[tuple[int, int, int], ...]
    k_max: int
    pipeline_sizes: tuple[int, ...] = ()
    """Timeline runs: the pipeline sizes k this run prices (one class of replicas per network domain and link)."""
    replicas_within: tuple[int, ...] = ()


def replica_counts(inp: PlacementInput, mbs: int, widths: np.ndarray, ep: int = 1) -> list[tuple[int, int, int]]:
    """Every valid (d, m, K_d): d divides B / mbs, d <= D, ep divides d (expert-parallel groups are formed
    from replicas), and a pipeline of K_d = D // d devices holds a stage."""
    return list(_replica_counts(int(inp.global_batch), int(inp.devices), int(inp.num_parts), int(mbs),
                                int(widths.min()), int(widths.max()), int(ep)))


@functools.lru_cache(maxsize=4096)
def _replica_counts(global_batch: int, devices: int, num_parts: int, mbs: int, t_min: int, t_max: int,
                    ep: int) -> tuple[tuple[int, int, int], ...]:
    """replica_counts on plain integers, memoised: the search asks for the same few sizes at every point."""
    if global_batch % mbs:
        return ()
    per = global_batch // mbs
    out = []
    for d in range(1, min(devices, per) + 1):
        if per % d or d % ep:
            continue
        k_d = min(devices // d, t_max * num_parts)
        if k_d >= t_min:
            out.append((d, per // d, k_d))
    return tuple(out)


def dp_groups(inp: PlacementInput, mbs: int, widths: np.ndarray, ep: int = 1) -> list[Group]:
    """PHAZE's step: valid d grouped into one shared run plus one run per shallow-m d."""
    n = inp.num_parts
    t_min = int(widths.min())
    shared, groups = [], []
    for d, m, k_d in replica_counts(inp, mbs, widths, ep):
        if m >= min(n, k_d // t_min):
            shared.append((d, m, k_d))
        else:
            groups.append(Group(cap=m, replicas=((d, m, k_d),), k_max=k_d))
    if shared:
        groups.insert(0, Group(cap=n + 1, replicas=tuple(shared), k_max=max(r[2] for r in shared)))
    return groups


def timeline_groups(inp: PlacementInput, mbs: int, widths: np.ndarray, link: bool | None, ep: int = 1) -> list[Group]:
    """The timeline step: one run per d and per class of pipeline sizes sharing replicas per network domain
    (and, when the links differ, the p2p link kind `link`)."""
    unit = int(np.gcd.reduce(widths))
    node = inp.network.node_size
    groups = []
    for d, m, k_d in replica_counts(inp, mbs, widths, ep):
        classes: dict[tuple[int, ...], list[int]] = {}
        for k in range(int(widths.min()), k_d + 1, unit):
            if link is not None and pipeline_in_one_node(k, node) != link:
                continue
            classes.setdefault(replicas_within(inp.network, d, k), []).append(k)
        for within, ks in classes.items():
            groups.append(Group(cap=m, replicas=((d, m, k_d),), k_max=max(ks), pipeline_sizes=tuple(ks), replicas_within=within))
    return groups


@dataclass(frozen=True)
class Config:
    """A layer variant, recompute mode and ZeRO stage: what one family of kernel runs shares."""

    vi: int
    recompute: str
    zero: int

    def plan_fields(self, inp: PlacementInput) -> dict:
        mbs, sp, cp, overlap, ep = inp.variant_list()[self.vi]
        return dict(mbs=mbs, sp=sp, cp=cp, tp_comm_overlap=overlap, ep=ep, recompute=self.recompute, zero=self.zero)


@dataclass(frozen=True)
class Candidate:
    """The best plan found so far: its time, the front point and everything needed to rebuild it."""

    time_per_batch_s: float
    config: Config
    tp_idx: tuple[int, ...]
    same_node: bool
    group: Group
    dp: int
    stages: int
    devices_per_pipeline: int
    load_s: float
    tail: float
    plan: Plan | None = field(default=None)
    """Set for enumerated (interleaved) plans."""


def _configs(inp: PlacementInput, space: Space) -> list[Config]:
    """Every configuration of the space whose layer variant is costed."""
    out = []
    wanted_mbs = inp.mbs_values.tolist() if space.mbs is None else list(space.mbs)
    for vi, (mbs, sp, cp, overlap, ep) in enumerate(inp.variant_list()):
        if mbs not in wanted_mbs or sp not in space.sp or cp not in space.cp or overlap not in space.tp_comm_overlap or ep not in space.ep:
            continue
        if inp.global_batch % mbs:
            continue
        if inp.step_model == "phaze" and (cp > 1 or ep > 1):
            continue
        for recompute, zero in itertools.product(space.recompute, space.zero):
            if (inp.step_model == "phaze" and zero) or (ep > 1 and zero > 1):
                continue
            out.append(Config(vi, recompute, int(zero)))
    return out


def _state(inp: PlacementInput, config: Config, group: Group) -> tuple[float, float]:
    """(weights+gradients+optimizer bytes per weight byte, transient part copies) of a run."""
    if inp.step_model == "phaze":
        return inp.state_mult(), 0.0
    d = group.replicas[0][0]
    cp = int(inp.cp_values[config.vi])
    return inp.state_mult(config.zero, d * cp), ZERO_TRANSIENT_PART_COPIES[config.zero]


def _timeline(inp: PlacementInput, config: Config, chain: Chain, group: Group) -> np.ndarray:
    if inp.step_model == "phaze":
        return NO_TIMELINE
    if not inp.reduces_gradients:
        return np.zeros((len(dp.TL_FIELDS), *chain.prm.shape))
    return timeline_arrays(
        chain.prm, chain.tp, inp.network, zero=config.zero, dp=group.replicas[0][0], cp=int(inp.cp_values[config.vi]),
        replicas=group.replicas_within, grad_bytes_per_param_byte=inp.grad_bytes_per_param_byte,
        overlap_grad_reduce=inp.overlap_grad_reduce,
        overlap_param_gather=inp.overlap_param_gather, update_bytes_per_param_byte=inp.update_bytes_per_param_byte,
        hbm_bytes_s=inp.hbm_bytes_s, expert=chain.exp, ep=int(inp.ep_values[config.vi]), overlap_slowdown=inp.overlap_slowdown,
    )


def _kernel_args(inp: PlacementInput, config: Config, chain: Chain, group: Group) -> tuple:
    """The chain's kernel arrays, its weights weighted for memory as the run's expert-data-parallel group shards them."""
    if inp.step_model == "phaze":
        return chain.args()
    d, cp, ep = group.replicas[0][0], int(inp.cp_values[config.vi]), int(inp.ep_values[config.vi])
    args = list(chain.args())
    args[2] = np.ascontiguousarray(inp.memory_param_bytes(chain.prm, chain.exp, config.zero, d * cp, ep))
    return tuple(args)


def kernel_fronts(chain: Chain, inp, config: Config, group: Group, k_max, bound, front_cap, timelines: dict | None = None):
    """Run the kernel with devices counted in units of the widths' gcd (a single-width pipeline of
    q stages then has one k), growing the front capacity until no cell overflows. Returns the
    fronts (L, Z, count, unit: cell k holds k x unit devices) and the capacity that sufficed.
    `timelines` keeps the timeline arrays of earlier runs: recompute modes and p2p links share them."""
    unit = int(np.gcd.reduce(chain.widths))
    k_units = k_max // unit
    q_max = min(inp.num_parts, k_units // int(chain.widths.min() // unit))
    rep_k = np.array([r[2] // unit for r in group.replicas], np.int64)
    rep_m = np.array([r[1] for r in group.replicas], np.int64)
    mult, transient = _state(inp, config, group)
    key = (config.vi, config.zero, chain.tp_idx, group.replicas[0][0], group.replicas_within)
    tl = (timelines or {}).get(key)
    if tl is None:
        tl = _timeline(inp, config, chain, group)
        if timelines is not None:
            timelines[key] = tl
    while True:
        out_l, out_p, out_c, ok = dp.pareto_fronts(
            *_kernel_args(inp, config, chain, group), tl, chain.widths // unit, mult, transient, float(inp.hbm_bytes), config.recompute == "full",
            inp.per_layer_recompute, inp.step_model == "timeline", int(group.cap), int(q_max), int(k_units), rep_k, rep_m,
            float(bound), int(front_cap),
        )
        if ok:
            break
        front_cap *= FRONT_GROWTH
    return (out_l, out_p, out_c, unit), front_cap


def final_round(inp, fronts, group: Group, link: bool | None, best: float) -> tuple[float, int, int, int, float, float] | None:
    """Best (time, d, q, k, L, Z) over the group's replica counts, pipelines whose p2p link kind
    matches `link` (None: any) and the front points; None if nothing beats `best`."""
    loads, tails, counts, unit = fronts
    qs, ks = np.nonzero(counts)
    per_cell = counts[qs, ks]
    qs, ks = np.repeat(qs, per_cell), np.repeat(ks, per_cell) * unit
    keep = np.ones(len(ks), dtype=bool)
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


def _links(inp) -> tuple[bool | None, ...]:
    """p2p link kinds to solve: one table when intra- and inter-node links are alike."""
    net = inp.network
    return (None,) if net.intra_bytes_s == net.inter_bytes_s else (True, False)


def _work_s(chain: Chain) -> np.ndarray:
    """Least device-seconds per microbatch of parts 0..n-1 (any width), without recompute: [n]."""
    return np.min(chain.widths[:, None] * (chain.fwd + chain.bwd), axis=0)


def _run_bound(work_s: float, group: Group) -> float:
    """No plan of the run beats m x (least device-seconds of a microbatch) / (devices of a pipeline)."""
    return min(m * work_s / k_d for _, m, k_d in group.replicas)


def _search(inp, configs, width_sets, best: Candidate | None, cutoff_s: float = np.inf) -> Candidate | None:
    """Every kernel run of these configurations and width sets, cheapest lower bound first, until
    no run's bound beats the best plan (or, before one is found, `cutoff_s`)."""
    front_cap = FRONT_CAPACITY
    runs, chains, groups, timelines = [], {}, {}, {}
    for config in configs:
        mbs = int(inp.mbs_values[config.vi])
        for tp_idx in width_sets(config.vi):
            for link in _links(inp):
                key = (config.vi, config.recompute, tp_idx, link)
                if key not in chains:
                    chain = chain_arrays(inp, config.vi, config.recompute, tp_idx, bool(link) if link is not None else True)
                    chains[key] = (chain, float(_work_s(chain).sum()))
                chain, work = chains[key]
                ep = int(inp.ep_values[config.vi])
                shape = (mbs, tuple(chain.widths.tolist()), link, ep)
                if shape not in groups:
                    groups[shape] = (timeline_groups(inp, mbs, chain.widths, link, ep) if inp.step_model == "timeline"
                                     else dp_groups(inp, mbs, chain.widths, ep))
                runs.extend((_run_bound(work, group), len(runs), config, chain, link, group) for group in groups[shape])
    runs.sort(key=lambda r: r[:2])
    for lower, _, config, chain, link, group in runs:
        bound = best.time_per_batch_s if best else cutoff_s
        if lower >= bound:
            break
        k_max = group.k_max if link is not True else min(group.k_max, inp.network.node_size)
        if k_max < int(chain.widths.min()):
            continue
        fronts, front_cap = kernel_fronts(chain, inp, config, group, k_max, bound, front_cap, timelines)
        found = final_round(inp, fronts, group, link, bound)
        if found:
            tpb, d, q, k, load, tail = found
            same = bool(link) if link is not None else True
            best = Candidate(tpb, config, chain.tp_idx, same, group, d, q, k, load, tail)
    return best


def _busiest_rank(per_part: np.ndarray, chunks, pp: int) -> float:
    """The largest sum of `per_part` over one pipeline rank's chunks (chunk c on rank c mod pp)."""
    csum = np.concatenate([[0.0], np.cumsum(per_part)])
    totals = np.zeros(pp)
    for c, (a, b) in enumerate(chunks):
        totals[c % pp] += csum[b + 1] - csum[a]
    return float(totals.max())


def _weights_overflow(inp: PlacementInput, config: Config, chain: Chain, chunks, pp: int, d: int) -> bool:
    """Whether the busiest rank's model state alone (weights, gradients, optimizer state) exceeds HBM."""
    cp, ep = int(inp.cp_values[config.vi]), int(inp.ep_values[config.vi])
    shards = d * cp
    weights = inp.memory_param_bytes(chain.prm[0], chain.exp[0], config.zero, shards, ep)
    return _busiest_rank(weights, chunks, pp) * inp.state_mult(config.zero, shards) > inp.hbm_bytes


def _interleaved(inp: PlacementInput, space: Space, configs, available, best: Candidate | None,
                 cutoff_s: float = np.inf) -> Candidate | None:
    """Megatron's interleaved 1F1B (vp > 1): one TP width, pp x vp uniform chunks (num_layers divisible by
    pp x vp), m a multiple of pp; each plan is costed from scratch once its lower bound could win (the busiest
    rank's compute over m slots plus the bubble, (m + (pp - 1) / vp) L <= the timeline's time) and its busiest
    rank's model state fits."""
    for config in configs:
        fields_ = config.plan_fields(inp)
        cp = fields_["cp"]
        for ti in available(config.vi):
            t = int(inp.tp_values[ti])
            chain = chain_arrays(inp, config.vi, config.recompute, (ti,), True)
            for vp in (v for v in space.vp if v > 1):
                for pp in range(2, inp.num_layers // vp + 1):
                    if inp.num_layers % (pp * vp):
                        continue
                    chunks = megatron_stage_bounds(inp, pp * vp)
                    rank_s = _busiest_rank(chain.fwd[0] + chain.bwd[0], chunks, pp)
                    for d, m, _ in replica_counts(inp, fields_["mbs"], chain.widths, fields_["ep"]):
                        if m % pp or d * pp * t * cp > inp.devices:
                            continue
                        bound = best.time_per_batch_s if best else cutoff_s
                        if (m + (pp - 1) / vp) * rank_s >= bound or _weights_overflow(inp, config, chain, chunks, pp, d):
                            continue
                        plan = Plan(stages=tuple((a, b, t) for a, b in chunks), dp=d, vp=vp, **fields_)
                        cost = evaluate_plan(inp, plan)
                        if cost.feasible and cost.time_per_batch_s < bound:
                            best = Candidate(cost.time_per_batch_s, config, (ti,), True, Group(m, ((d, m, 0),), 0), d,
                                             pp, plan.devices_per_pipeline, 0.0, 0.0, plan)
    return best


def rebuild(inp: PlacementInput, best: Candidate) -> Plan:
    """The plan behind a front point: q stages on k devices meeting its (load, tail) caps."""
    if best.plan is not None:
        return best.plan
    config = best.config
    chain = chain_arrays(inp, config.vi, config.recompute, best.tp_idx, best.same_node)
    mult, transient = _state(inp, config, best.group)
    unit = int(np.gcd.reduce(chain.widths))
    stages, ok = dp.reconstruct(
        *_kernel_args(inp, config, chain, best.group), _timeline(inp, config, chain, best.group), chain.widths // unit, mult, transient,
        float(inp.hbm_bytes), config.recompute == "full", inp.per_layer_recompute, inp.step_model == "timeline",
        int(best.group.cap), best.stages, best.devices_per_pipeline // unit, best.load_s, best.tail,
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
    if 1 in space.vp:
        best = _search(inp, configs, lambda vi: [(ti,) for ti in available(vi)], best, cutoff_s)
        if space.per_stage_tp:
            best = _search(inp, configs, lambda vi: [tuple(available(vi))] if len(available(vi)) > 1 else [], best, cutoff_s)
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
    """Compile (or load from the Numba cache) every kernel once, on a two-part chain, in both step models."""
    from phaze.cost.network import Network

    ones = np.ones((1, 1, 2))
    for step_model in ("phaze", "timeline"):
        inp = PlacementInput(
            mbs_values=[1], tp_values=[1], fwd_s=ones, bwd_s=ones, tp_comm_fwd_s=0 * ones, tp_comm_bwd_s=0 * ones,
            param_bytes=ones, saved_bytes=ones, input_bytes=ones, output_bytes=ones, num_pre=0, num_layers=2,
            devices=2, global_batch=2, seq_len=1, hbm_bytes=1e3, network=Network(2, 2, 1.0, 1.0), step_model=step_model,
        )
        optimize(inp)
