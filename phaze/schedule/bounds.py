"""Lower bounds on a layer's makespan, vectorised over many accelerator points for search pruning.

A unit (tensor cores, vector cores, network) can at any instant run one operator in parallel mode,
or at most min(cores, width) in single mode, width being the most operators of the unit that no
dependency orders. So each operator needs a share of the unit's time: parallel_s in parallel mode,
single_s / min(cores, width) in single mode (for one problem, the width of the largest antichain
containing the operator), and the makespan is at least
* the critical path with every operator in its fastest mode, and
* per unit, the sum of the operators' smallest shares;
and, for one problem, the one-machine bound per unit: for any set S of its operators,
min head(S) + sum share(S) + min tail(S), with heads and tails from precedence-energetic reasoning
(an operator starts no earlier than any ancestor's head + duration + the shares, on the busiest
unit, of every operator between the two; tails alike), which close most forward layers' gaps.
"""

from __future__ import annotations

import hashlib

import numpy as np

from phaze.schedule.instance import NET_CAPACITY, RESOURCES, LayerProblem, antichain_width, edges_of


def _reach(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    r = np.zeros((n, n), dtype=bool)
    order = np.argsort(dst, kind="stable")
    for s, d in zip(src[order].tolist(), dst[order].tolist()):
        r[:, d] |= r[:, s]
        r[s, d] = True
    return r


def lower_bound_batch_s(graph, unit, single_s, parallel_s, n_tc, n_vc) -> np.ndarray:
    """Lower bound (s) per point: single_s, parallel_s are [n_ops, P]; n_tc, n_vc are [P] (or scalars)."""
    unit = np.asarray(unit).astype(str)
    single = np.asarray(single_s, dtype=np.float64)
    parallel = np.asarray(parallel_s, dtype=np.float64)
    if single.ndim == 1:
        single, parallel = single[:, None], parallel[:, None]
    n, p = single.shape
    cores = {
        "tc": np.broadcast_to(np.asarray(n_tc, dtype=np.float64), (p,)),
        "vc": np.broadcast_to(np.asarray(n_vc, dtype=np.float64), (p,)),
        "net": np.full(p, float(NET_CAPACITY)),
    }
    fastest = np.minimum(single, parallel)
    src, dst = edges_of(graph)
    preds = [[] for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist()):
        preds[d].append(s)
    finish = np.empty_like(fastest)
    for j in range(n):
        start = finish[preds[j]].max(axis=0) if preds[j] else 0.0
        finish[j] = start + fastest[j]
    bound = finish.max(axis=0) if n else np.zeros(p)
    reach = _reach(n, src, dst)
    for name in RESOURCES:
        on = np.flatnonzero(unit == name)
        if not len(on):
            continue
        concurrent = np.minimum(cores[name], antichain_width(reach[np.ix_(on, on)]))
        share = np.minimum(single[on] / concurrent[None, :], parallel[on]) if name != "net" else fastest[on] / NET_CAPACITY
        bound = np.maximum(bound, share.sum(axis=0))
    return bound


def lower_bound_s(graph, unit, single_s, parallel_s, n_tc: int, n_vc: int) -> float:
    """Lower bound (s) on the makespan of one problem; see lower_bound_batch_s."""
    return float(lower_bound_batch_s(graph, unit, single_s, parallel_s, n_tc, n_vc)[0])


def concurrency(problem: LayerProblem) -> np.ndarray:
    """Per operator: the most single-mode operators that can run at once while it runs, min(cores,
    largest antichain of its unit containing it); 1 where it holds no resource.

    Any set running at one instant is an antichain of one unit, so with k_i this number for each
    member, the sum over the set of 1 / k_i is at most 1: d1_i / k_i is a valid share of the unit's
    time, tighter than d1_i / min(cores, width of the unit) where most operators are ordered.
    """
    return np.minimum(problem.op_capacity, widths_beside(problem), out=np.ones(problem.n, dtype=np.int64), where=problem.holds)


WIDTHS_CACHED = 4096
"""Layer structures whose antichain widths are kept: a search meets the same few graphs on every point."""
_widths: dict[bytes, np.ndarray] = {}


def widths_beside(problem: LayerProblem) -> np.ndarray:
    """Per operator that holds a resource: 1 + the largest antichain of its unit's other operators that no
    dependency orders with it (the most single-mode operators running with it on unlimited cores; 1 elsewhere).
    It depends on the graph and the units only, so it is computed once per structure."""
    key = hashlib.blake2b(b"".join(np.ascontiguousarray(a).tobytes() for a in
                                   (np.int64(problem.n), problem.src, problem.dst, problem.resource, problem.holds))).digest()
    if key not in _widths:
        k = np.ones(problem.n, dtype=np.int64)
        for r in range(len(RESOURCES)):
            on = np.flatnonzero(problem.holds & (problem.resource == r))
            for i in on.tolist():
                others = on[~problem.comparable[i, on] & (on != i)]
                k[i] = 1 + antichain_width(problem.reach[np.ix_(others, others)])
        if len(_widths) >= WIDTHS_CACHED:
            del _widths[next(iter(_widths))]
        _widths[key] = k
    return _widths[key]


def shares_s(problem: LayerProblem) -> np.ndarray:
    """Each operator's smallest share (s) of its unit's time (0 for `none`)."""
    exclusive_share = np.where(problem.choice | problem.fixed_exclusive, problem.dur_parallel, np.inf)
    single_share = np.where(problem.fixed_exclusive, np.inf, problem.dur_single / concurrency(problem))
    return np.where(problem.holds, np.minimum(exclusive_share, single_share), 0.0)


def energetic_heads_tails_s(problem: LayerProblem, share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start and least time after the finish (s) of every operator in any schedule.

    Between an operator j and its descendant k every operator that descends from j and precedes k
    runs inside [end of j, start of k], so that gap is at least the largest per-unit sum of their
    shares (`share`, as shares_s); from time 0 to k, likewise for all of k's ancestors (tails: mirror image).
    """
    reach = problem.reach.astype(np.float64)
    between = np.zeros((problem.n, problem.n))
    before = np.zeros(problem.n)
    after = np.zeros(problem.n)
    for r in range(len(RESOURCES)):
        on_r = np.where(problem.resource == r, share, 0.0)
        between = np.maximum(between, (reach * on_r[None, :]) @ reach)
        before = np.maximum(before, on_r @ reach)
        after = np.maximum(after, reach @ on_r)
    dur = problem.dur_min
    head = np.maximum(before, problem.head_s)
    for k in range(problem.n):
        anc = np.flatnonzero(problem.reach[:, k])
        if len(anc):
            head[k] = max(head[k], float(np.max(head[anc] + dur[anc] + between[anc, k])))
    tail = np.maximum(after, problem.tail_s)
    for j in range(problem.n - 1, -1, -1):
        desc = np.flatnonzero(problem.reach[j])
        if len(desc):
            tail[j] = max(tail[j], float(np.max(tail[desc] + dur[desc] + between[j, desc])))
    return head, tail


def one_machine_bound_s(problem: LayerProblem) -> float:
    """max over operators of head + duration + tail, and over units and sets S = {head >= a, tail >= b}
    of min head + sum share + min tail (energetic heads and tails)."""
    share = shares_s(problem)
    heads, tails = energetic_heads_tails_s(problem, share)
    best = float(np.max(heads + problem.dur_min + tails)) if problem.n else 0.0
    for r in range(len(RESOURCES)):
        on = np.flatnonzero(problem.holds & (problem.resource == r))
        if not len(on):
            continue
        head, tail, sh = heads[on], tails[on], share[on]
        by_tail = np.argsort(-tail, kind="stable")
        head, tail, sh = head[by_tail], tail[by_tail], sh[by_tail]
        for a in np.unique(head):
            keep = head >= a
            # Operators sorted by decreasing tail: the first k have min tail tail[k-1].
            best = max(best, float(np.max(a + np.cumsum(sh[keep]) + tail[keep])))
    return best


def problem_lower_bound_s(problem: LayerProblem) -> float:
    """The strongest bound here for one problem: the batch bound and the one-machine bound."""
    batch = lower_bound_batch_s((problem.src, problem.dst), problem.unit, problem.single_s, problem.parallel_s, problem.n_tc, problem.n_vc)
    return max(float(batch[0]), one_machine_bound_s(problem))
