"""optimize(): the placement DP over microbatch size, recompute, data-parallel degree and TP widths.

For each (mbs, recompute) the Numba kernel builds Pareto fronts (max stage load, max stage weights)
of every pipeline shape (stages q, devices k); a final round over the data-parallel degrees d
(d divides B / mbs, d k <= D) prices each front point at L (m + q - 1) + all-reduce(P, d, k) and
keeps the minimum. Data-parallel degrees whose m = B / (d mbs) is below the deepest pipeline get
their own run, since a stage then holds min(q, m) microbatches. Single-width pipelines are solved
first (cheap: k = q t); their best time bounds the per-stage-width run, which prunes every partial
plan that cannot beat it. The optimum is rebuilt as a plan, re-costed from scratch and checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.placement import dp
from phaze.placement.check import PlacementCheckError, check_result
from phaze.placement.inputs import PlacementInput
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.placement.plan import Plan, evaluate_plan
from phaze.placement.result import PlacementResult, result_from_cost
from phaze.placement.timing import pipeline_in_one_node

FRONT_CAPACITY = 64
"""Pareto points a DP cell may hold while it is built; a run that outgrows it is repeated with
FRONT_GROWTH times more, and later runs of the same call start from the capacity that sufficed."""
FRONT_GROWTH = 4
MATCH_RTOL = 1e-9
"""Relative tolerance between the DP's time and the rebuilt plan's from-scratch time."""


@dataclass(frozen=True)
class Chain:
    """Kernel arrays [width, part] for one microbatch size, a set of widths and one p2p link kind."""

    fwd: np.ndarray
    bwd: np.ndarray
    prm: np.ndarray
    sav: np.ndarray
    inb: np.ndarray
    recv: np.ndarray
    send: np.ndarray
    widths: np.ndarray
    tp_idx: tuple[int, ...]

    def args(self) -> tuple:
        return (self.fwd, self.bwd, self.prm, self.sav, self.inb, self.recv, self.send, self.widths)


def chain_arrays(inp: PlacementInput, mi: int, tp_idx: tuple[int, ...], same_node: bool) -> Chain:
    """Contiguous arrays for the kernels; recv / send are the p2p times at stage boundaries."""
    idx = list(tp_idx)
    inb = np.ascontiguousarray(inp.input_bytes[mi, idx])
    recv = np.asarray(inp.network.p2p_s(inb, same_node), dtype=np.float64).reshape(inb.shape)
    recv[:, 0] = 0.0
    outb = inp.output_bytes[mi, idx]
    send = np.asarray(inp.network.p2p_s(outb, same_node), dtype=np.float64).reshape(outb.shape)
    send[:, -1] = 0.0
    return Chain(
        fwd=np.ascontiguousarray(inp.fwd_s[mi, idx]),
        bwd=np.ascontiguousarray(inp.bwd_s[mi, idx]),
        prm=np.ascontiguousarray(inp.param_bytes[mi, idx]),
        sav=np.ascontiguousarray(inp.saved_bytes[mi, idx]),
        inb=inb,
        recv=np.ascontiguousarray(recv),
        send=np.ascontiguousarray(send),
        widths=inp.tp_values[idx].astype(np.int64),
        tp_idx=tuple(tp_idx),
    )


@dataclass(frozen=True)
class Group:
    """Data-parallel degrees solved by one kernel run: (d, m, K_d) with K_d the pipeline device limit."""

    cap: int
    """In-flight microbatch cap min(q, cap): m for a lone d, beyond any depth for the shared run."""
    replicas: tuple[tuple[int, int, int], ...]
    k_max: int


def dp_groups(inp: PlacementInput, mbs: int, widths: np.ndarray) -> list[Group]:
    """Valid d (d | B / mbs, d <= D) grouped into one shared run plus one run per shallow-m d."""
    if inp.global_batch % mbs:
        return []
    per = inp.global_batch // mbs
    n = inp.num_parts
    t_min, t_max = int(widths.min()), int(widths.max())
    shared, groups = [], []
    for d in range(1, min(inp.devices, per) + 1):
        if per % d:
            continue
        m = per // d
        k_d = min(inp.devices // d, t_max * n)
        if k_d < t_min:
            continue
        if m >= min(n, k_d // t_min):
            shared.append((d, m, k_d))
        else:
            groups.append(Group(cap=m, replicas=((d, m, k_d),), k_max=k_d))
    if shared:
        groups.insert(0, Group(cap=n + 1, replicas=tuple(shared), k_max=max(r[2] for r in shared)))
    return groups


@dataclass(frozen=True)
class Candidate:
    """The best front point found so far and everything needed to rebuild its plan."""

    time_per_batch_s: float
    mi: int
    recompute: bool
    tp_idx: tuple[int, ...]
    same_node: bool
    cap: int
    dp: int
    stages: int
    devices_per_pipeline: int
    load_s: float
    param_bytes: float


def final_round(inp, fronts, group: Group, link: bool | None, best: float) -> tuple[float, int, int, int, float, float] | None:
    """Best (time, d, q, k, L, P) over the group's replica counts, pipelines whose p2p link kind
    matches `link` (None: any) and the front points; None if nothing beats `best`."""
    loads, params, counts, unit = fronts
    qs, ks = np.nonzero(counts)
    per_cell = counts[qs, ks]
    qs, ks = np.repeat(qs, per_cell), np.repeat(ks, per_cell) * unit
    if link is not None:
        keep = pipeline_in_one_node(ks, inp.network.node_size) == link
        qs, ks, loads, params = qs[keep], ks[keep], loads[keep], params[keep]
    found = None
    for d, m, k_d in group.replicas:
        sel = ks <= k_d
        if not sel.any():
            continue
        q, k, load, param = qs[sel], ks[sel], loads[sel], params[sel]
        allreduce = np.empty(len(k))
        uniq, inverse = np.unique(k, return_inverse=True)
        members = np.array([inp.network.members_per_node(d, int(kk)) for kk in uniq])[inverse]
        for u in np.unique(members):
            rows = members == u
            allreduce[rows] = inp.network.allreduce_s(param[rows], d, int(k[rows][0]))
        tpb = load * (m + q - 1).astype(np.float64) + allreduce
        a = int(np.argmin(tpb))
        if tpb[a] < best:
            best = float(tpb[a])
            found = (best, d, int(q[a]), int(k[a]), float(load[a]), float(param[a]))
    return found


def _fronts(chain: Chain, inp, recompute, group, k_max, bound, front_cap):
    """Run the kernel with devices counted in units of the widths' gcd (a single-width pipeline of
    q stages then has one k), growing the front capacity until no cell overflows. Returns the
    fronts (L, P, count, unit: cell k holds k x unit devices) and the capacity that sufficed."""
    unit = int(np.gcd.reduce(chain.widths))
    k_units = k_max // unit
    q_max = min(inp.num_parts, k_units // int(chain.widths.min() // unit))
    rep_k = np.array([r[2] // unit for r in group.replicas], np.int64)
    rep_m = np.array([r[1] for r in group.replicas], np.int64)
    mult = state_bytes_per_param_byte(inp.optimizer, inp.bytes_per_elem)
    while True:
        out_l, out_p, out_c, ok = dp.pareto_fronts(
            chain.fwd, chain.bwd, chain.prm, chain.sav, chain.inb, chain.recv, chain.send, chain.widths // unit,
            mult, float(inp.hbm_bytes), bool(recompute), inp.per_layer_recompute, int(group.cap), int(q_max), int(k_units),
            rep_k, rep_m, float(bound), int(front_cap),
        )
        if ok:
            break
        front_cap *= FRONT_GROWTH
    return (out_l, out_p, out_c, unit), front_cap


def _links(inp) -> tuple[bool | None, ...]:
    """p2p link kinds to solve: one table when intra- and inter-node links are alike."""
    net = inp.network
    return (None,) if net.intra_bytes_s == net.inter_bytes_s else (True, False)


def _search(inp, mis, recompute_options, width_sets, best: Candidate | None) -> Candidate | None:
    front_cap = FRONT_CAPACITY
    for mi in mis:
        mbs = int(inp.mbs_values[mi])
        for tp_idx in width_sets(mi):
            widths = inp.tp_values[list(tp_idx)]
            groups = dp_groups(inp, mbs, widths)
            for link in _links(inp):
                chain = chain_arrays(inp, mi, tp_idx, bool(link) if link is not None else True)
                for recompute in recompute_options:
                    for group in groups:
                        k_max = group.k_max if link is not True else min(group.k_max, inp.network.node_size)
                        if k_max < int(widths.min()):
                            continue
                        bound = best.time_per_batch_s if best else np.inf
                        fronts, front_cap = _fronts(chain, inp, recompute, group, k_max, bound, front_cap)
                        found = final_round(inp, fronts, group, link, bound)
                        if found:
                            tpb, d, q, k, load, param = found
                            same = bool(link) if link is not None else True
                            best = Candidate(tpb, mi, bool(recompute), tp_idx, same, group.cap, d, q, k, load, param)
    return best


def rebuild(inp: PlacementInput, best: Candidate) -> Plan:
    """The plan behind a front point: q stages on k devices meeting its (load, weights) caps."""
    chain = chain_arrays(inp, best.mi, best.tp_idx, best.same_node)
    mult = state_bytes_per_param_byte(inp.optimizer, inp.bytes_per_elem)
    stages, ok = dp.reconstruct(
        *chain.args(), mult, float(inp.hbm_bytes), best.recompute, inp.per_layer_recompute, int(best.cap), best.stages,
        best.devices_per_pipeline, best.load_s, best.param_bytes,
    )
    if not ok:
        raise PlacementCheckError(f"no plan rebuilt for DP point {best}")
    return Plan(
        mbs=int(inp.mbs_values[best.mi]),
        recompute=best.recompute,
        dp=best.dp,
        stages=tuple((int(a), int(b), int(chain.widths[w])) for a, b, w in stages),
    )


def usable_mbs(inp: PlacementInput, mbs_options) -> list[int]:
    """Indices of the microbatch sizes to search: requested, costed, and dividing the global batch."""
    wanted = inp.mbs_values.tolist() if mbs_options is None else list(mbs_options)
    out = []
    for mbs in wanted:
        mi = inp.mbs_index(int(mbs))
        if mi is not None and inp.global_batch % int(mbs) == 0:
            out.append(mi)
    return out


def optimize(inp: PlacementInput, recompute_options=(False, True), mbs_options=None, *, per_stage_tp: bool = True) -> PlacementResult | None:
    """The fastest placement of the chain (exact under the cost model of phaze.placement.plan), or None if none fits.

    per_stage_tp=False restricts every pipeline to one TP width (PHAZE's search space).
    """
    mis = usable_mbs(inp, mbs_options)

    def available(mi):
        return [ti for ti in range(len(inp.tp_values)) if inp.available(mi, ti)]

    best = _search(inp, mis, recompute_options, lambda mi: [(ti,) for ti in available(mi)], None)
    if per_stage_tp:
        best = _search(inp, mis, recompute_options, lambda mi: [tuple(available(mi))] if len(available(mi)) > 1 else [], best)
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
    """Compile (or load from the Numba cache) every kernel once, on a two-part chain."""
    from phaze.cost.network import Network

    ones = np.ones((1, 1, 2))
    inp = PlacementInput(
        mbs_values=[1], tp_values=[1], fwd_s=ones, bwd_s=ones, tp_comm_fwd_s=0 * ones, tp_comm_bwd_s=0 * ones,
        param_bytes=ones, saved_bytes=ones, input_bytes=ones, output_bytes=ones, num_pre=0, num_layers=2,
        devices=2, global_batch=2, seq_len=1, hbm_bytes=1e3, network=Network(2, 2, 1.0, 1.0),
    )
    optimize(inp)
