"""The DP kernel runs of a layer-variant shape (the data-parallel degrees and pipeline sizes each run prices) and the
lower bounds on their time that order and skip them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from phaze.placement import dp
from phaze.placement.chain import Chain, _part_s
from phaze.placement.inputs import PlacementInput
from phaze.placement.kept import Kept
from phaze.placement.stepcomm import replicas_within
from phaze.placement.timing import pipeline_in_one_node

BOUND_RTOL = 1e-12
"""Lower bounds on a run's or a plan's time are lowered by this fraction: summed in another order than the plan
evaluator's, a bound that is exact could otherwise exceed the plan's time by rounding and dismiss it."""


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
