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
from phaze.placement.kept import Kept
from phaze.placement.layouts import Layout, layouts
from phaze.placement.plan import Plan, chain_arrays_of, evaluate_plan, interleaved_chunk_inflight, recompute_mode
from phaze.placement.result import PlacementResult, result_from_cost
from phaze.placement.stepcomm import replicas_within, timeline_arrays
from phaze.placement.timing import pipeline_in_one_node

FRONT_CAPACITY = 64
"""Pareto points a DP cell may hold while it is built; a run that outgrows it is repeated with
FRONT_GROWTH times more, and later runs of the same call start from the capacity that sufficed."""
FRONT_GROWTH = 4
MATCH_RTOL = 1e-9
"""Relative tolerance between the DP's time and the rebuilt plan's from-scratch time."""
BOUND_RTOL = 1e-12
"""Lower bounds on a run's or a plan's time are lowered by this fraction: summed in another order than the plan
evaluator's, a bound that is exact could otherwise exceed the plan's time by rounding and dismiss it."""
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
    """False restricts every pipeline to one TP width (what Megatron-LM, FSDP, DeepSpeed and MaxText run)."""
    stage_layers: str = "any"
    """Which layers per stage the framework runs (phaze.placement.layouts: any | even_middle | even)."""

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
    layout: Layout | None = field(default=None)
    """The stages the kernel run allowed (None: any)."""


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


def _links(inp) -> tuple[bool | None, ...]:
    """p2p link kinds to solve: one table when intra- and inter-node links are alike."""
    net = inp.network
    return (None,) if net.intra_bytes_s == net.inter_bytes_s else (True, False)


def _part_s(chain: Chain, recompute: str, per_layer: bool) -> np.ndarray:
    """Per-microbatch time of each part at each width [width, part], its forward counted again when every stage
    recomputes (full recompute with per-layer checkpoints)."""
    if recompute == "full" and per_layer:
        return chain.fwd + chain.bwd + chain.fwd
    return chain.fwd + chain.bwd


@dataclass(frozen=True)
class RunWork:
    """What bounds every pipeline of a chain: its least device-seconds per microbatch (each part at its cheapest
    width) and the least time of its slowest part (no stage's load is below it: a part is never split)."""

    work_s: float
    part_floor_s: float


def _least_work(widths: np.ndarray, per: np.ndarray) -> RunWork:
    """RunWork from per-microbatch part times per[measure, width, part], each measure one that every stage's load
    covers: the largest measure's device-seconds with each part at its cheapest width, and the slowest part at its
    fastest width of its largest measure."""
    return RunWork(float((widths[:, None] * per).min(axis=1).sum(axis=1).max()), float(per.max(axis=0).min(axis=0).max()))


def _run_work(chain: Chain, recompute: str, per_layer: bool) -> RunWork:
    """RunWork of the chain under the recompute mode."""
    return _least_work(chain.widths, _part_s(chain, recompute, per_layer)[None])


def _timeline_work(chain: Chain, recompute: str, per_layer: bool, tl: np.ndarray) -> RunWork:
    """RunWork of the chain under the timeline step's flow shops (dp.extend_stage): a stage's load is at least one of its
    forward streams (gathers, or compute with its serial extras) plus one of its backward streams (gathers, compute
    with its serial extras, or per-microbatch reductions), each summed over its parts; any fixed pairing of one forward
    and one backward stream is therefore a per-part work that every stage's load covers."""
    recomputed = chain.fwd if (recompute == "full" and per_layer) else 0.0
    forward = (tl[dp.TL_GF], chain.fwd + tl[dp.TL_XF])
    backward = (tl[dp.TL_GB], chain.bwd + recomputed + tl[dp.TL_XB], tl[dp.TL_RBM])
    return _least_work(chain.widths, np.array([f + b for f in forward for b in backward]))


@dataclass(frozen=True)
class Run:
    """One kernel run's group of data-parallel degrees on one width set and link kind, with what bounds its plans:
    each pipeline size k it may use, the slots m + q - 1 of its shallowest pipeline (q >= k / widest stage) and its
    deepest pipeline's stages (q <= k / narrowest stage, q <= parts)."""

    group: Group
    k_max: int
    sizes: np.ndarray
    slots: np.ndarray
    stages_max: np.ndarray

    def bound_s(self, work: RunWork, tails: tuple[float, float] = (0.0, 0.0)) -> float:
        """No plan of the run beats L (m + q - 2) + max(L, Z) (both step models' time is at least that with Z = 0), with
        the bottleneck load L at least the work spread over the k devices and at least the slowest part, and the
        largest tail Z at least the first stage's floor and the tails' floor sum over the most stages (_tail_floors_s)."""
        load = np.maximum(work.work_s / self.sizes, work.part_floor_s)
        tail = np.maximum(tails[0], tails[1] / self.stages_max)
        return float((load * (self.slots - 1.0) + np.maximum(load, tail)).min()) * (1.0 - BOUND_RTOL)


@dataclass(frozen=True)
class RunTable:
    """The runs of one layer-variant shape (microbatch, widths, link, expert parallelism), with their pipeline sizes
    and slots laid end to end so that every run's Run.bound_s for one chain is one vectorised pass."""

    runs: tuple[Run, ...]
    sizes: np.ndarray
    slots: np.ndarray
    starts: np.ndarray

    def bounds_s(self, work: RunWork) -> np.ndarray:
        """Run.bound_s(work) of every run (no tail floor)."""
        if not self.runs:
            return np.zeros(0)
        load = np.maximum(work.work_s / self.sizes, work.part_floor_s)
        return np.minimum.reduceat(load * self.slots, self.starts) * (1.0 - BOUND_RTOL)


def _runs(inp: PlacementInput, group_list: list[Group], widths: np.ndarray, link: bool | None) -> RunTable:
    """The runs of these groups that can hold a stage (a run inside a node when `link` is True)."""
    w_min, w_max, unit = int(widths.min()), int(widths.max()), int(np.gcd.reduce(widths))
    runs = []
    for group in group_list:
        k_max = group.k_max if link is not True else min(group.k_max, inp.network.node_size)
        if k_max < w_min:
            continue
        sizes, slots, deepest = [], [], []
        for _, m, k_d in group.replicas:
            k = np.asarray(group.pipeline_sizes, dtype=np.int64) if group.pipeline_sizes else np.arange(w_min, k_d + 1, unit)
            k = k[k <= min(k_d, k_max)]
            sizes.append(k)
            slots.append(m + -(-k // w_max) - 1)
            deepest.append(np.minimum(k // w_min, inp.num_parts))
        if sum(len(k) for k in sizes):
            runs.append(Run(group, k_max, *(np.concatenate(a).astype(np.float64) for a in (sizes, slots, deepest))))
    lengths = [len(run.sizes) for run in runs]
    return RunTable(tuple(runs), np.concatenate([run.sizes for run in runs]) if runs else np.zeros(0),
                    np.concatenate([run.slots for run in runs]) if runs else np.zeros(0), np.cumsum([0] + lengths[:-1]).astype(np.int64))


RUN_TABLES_KEPT = 4096
"""Run tables kept (least recently used dropped): they depend on the batch, the devices, the network and a layer
variant's shape, not on the latencies, so every placement DP of a search asks for the same few."""
_run_tables = Kept(RUN_TABLES_KEPT)


def run_table(inp: PlacementInput, mbs: int, widths: np.ndarray, link: bool | None, ep: int) -> RunTable:
    """The kernel runs of a layer-variant shape (microbatch, stage widths, p2p link kind, expert parallelism), remembered
    across calls; the caller must not write to it."""
    key = (inp.network, int(inp.global_batch), int(inp.devices), inp.num_parts, inp.step_model, mbs, tuple(widths.tolist()), link, ep)

    def make() -> RunTable:
        groups = timeline_groups(inp, mbs, widths, link, ep) if inp.step_model == "timeline" else dp_groups(inp, mbs, widths, ep)
        return _runs(inp, groups, widths, link)

    return _run_tables.get(key, make)


def _in_bound_order(blocks: list, bounds: list[np.ndarray]):
    """(block, index within it, bound) for every entry of `bounds` (one array per block), in increasing bound order
    (ties in the order given)."""
    if not bounds:
        return
    block_of = np.repeat(np.arange(len(blocks)), [len(b) for b in bounds])
    index_in = np.concatenate([np.arange(len(b)) for b in bounds])
    flat = np.concatenate(bounds)
    for i in np.argsort(flat, kind="stable"):
        yield blocks[block_of[i]], int(index_in[i]), float(flat[i])


def _least_layer_s(inp: PlacementInput, chain: Chain, recompute: str) -> float:
    """The least per-microbatch time of one transformer layer at any of the chain's widths: a stage of c layers has a
    load of at least c times it, so a layout's plans, each with a stage of its middle_layers layers, take at least
    middle_layers x this x (m + min_stages - 1) (the bottleneck's slots L (m + q - 2) + max(L, Z) >= L (m + q - 1))."""
    layers = slice(inp.num_pre, inp.num_pre + inp.num_layers)
    return float(_part_s(chain, recompute, inp.per_layer_recompute)[:, layers].min()) if inp.num_layers else 0.0


def _any_layout(inp: PlacementInput) -> Layout:
    """The layout allowing every stage."""
    return layouts(inp.num_pre, inp.num_layers, inp.num_parts, "any")[0]


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


def rebuild(inp: PlacementInput, best: Candidate) -> Plan:
    """The plan behind a front point: q stages on k devices meeting its (load, tail) caps."""
    if best.plan is not None:
        return best.plan
    config = best.config
    chain = chain_arrays(inp, config.vi, config.recompute, best.tp_idx, best.same_node)
    mult, transient = _state(inp, config, best.group)
    unit = int(np.gcd.reduce(chain.widths))
    layout = best.layout or _any_layout(inp)
    stages, ok = dp.reconstruct(
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
