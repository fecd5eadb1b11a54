"""One scheduling problem: a layer DAG, each operator's unit and latencies, and the chip's core counts.

Everything the heuristic, the bounds, the ILP and the checker share is derived here once: each
operator's effective modes and durations, the resource it holds, reachability, and time windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching

UNITS = ("tc", "vc", "net", "none")
"""tc: tensor cores, vc: vector cores, net: the network (collectives), none: no resource."""

RESOURCES = ("tc", "vc", "net")
"""The units that hold a resource; an operator's `resource` index points into this tuple (-1: none)."""

TENSOR = RESOURCES.index("tc")
"""The tensor unit's index: the mode search branches on its operators' modes (their matmuls decide the layer) and
heuristic.best_with_modes list-schedules its assignments."""

NET_CAPACITY = 1
"""Collectives serialise on the network (issue 4 contract); they may overlap compute."""


def antichain_width(reach: np.ndarray) -> int:
    """Largest set of pairwise unreachable vertices of a transitively closed DAG (boolean matrix)."""
    if not len(reach):
        return 0
    matching = maximum_bipartite_matching(sp.csr_matrix(reach), perm_type="column")
    return int(len(reach) - np.count_nonzero(matching >= 0))


def _csr(row: np.ndarray, col: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, idx) of the edges grouped by `row`: row i's columns are idx[ptr[i]:ptr[i + 1]], in edge order."""
    order = np.argsort(row, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=ptr[1:])
    return ptr, np.ascontiguousarray(col[order], dtype=np.int64)


class InfeasibleLayerError(ValueError):
    """An operator has no finite latency on this chip, so the layer cannot run on it."""


def edges_of(graph) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) int arrays of an OpGraph's edges (or of a (src, dst) pair of arrays)."""
    if hasattr(graph, "edges"):
        frame = graph.edges
        return frame["src"].to_numpy(dtype=np.int64), frame["dst"].to_numpy(dtype=np.int64)
    src, dst = graph
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class LayerProblem:
    """Validated inputs of one problem; derived arrays are computed on first use."""

    src: np.ndarray
    dst: np.ndarray
    unit: np.ndarray
    single_s: np.ndarray
    parallel_s: np.ndarray
    n_tc: int
    n_vc: int

    @classmethod
    def build(cls, graph, unit, single_s, parallel_s, n_tc: int, n_vc: int) -> "LayerProblem":
        """Check and normalise the inputs: edges deduplicated, arrays as float64 / str."""
        unit = np.asarray(unit).astype(str)
        single = np.asarray(single_s, dtype=np.float64).reshape(-1)
        parallel = np.asarray(parallel_s, dtype=np.float64).reshape(-1)
        n = len(unit)
        if single.shape != (n,) or parallel.shape != (n,):
            raise ValueError(f"unit, single_s and parallel_s must have one entry per operator: {n}, {single.shape}, {parallel.shape}")
        bad_units = sorted(set(unit.tolist()) - set(UNITS))
        if bad_units:
            raise ValueError(f"unknown units {bad_units}; allowed: {UNITS}")
        if np.isnan(single).any() or np.isnan(parallel).any() or (single < 0).any() or (parallel < 0).any():
            raise ValueError("latencies must be non-negative numbers (inf marks a mode that cannot run)")
        both_inf = np.isinf(single) & np.isinf(parallel)
        if both_inf.any():
            raise InfeasibleLayerError(f"operators {np.flatnonzero(both_inf).tolist()} have no finite latency on this chip")
        if int(n_tc) < 1 or int(n_vc) < 1:
            raise ValueError(f"core counts must be positive, got n_tc={n_tc}, n_vc={n_vc}")
        no_mode = np.isin(unit, ("net", "none")) & ~np.isclose(single, parallel, rtol=1e-12, atol=0.0)
        if no_mode.any():
            raise ValueError(f"net/none operators {np.flatnonzero(no_mode).tolist()} must have single_s == parallel_s")
        src, dst = edges_of(graph)
        if len(src) and (src.min() < 0 or dst.max() >= n or (src >= dst).any()):
            raise ValueError("edges must join operators 0..n-1 with src < dst (operators in topological order)")
        pairs = np.unique(np.stack([src, dst], axis=1), axis=0) if len(src) else np.zeros((0, 2), dtype=np.int64)
        return cls(pairs[:, 0].copy(), pairs[:, 1].copy(), unit, single, parallel, int(n_tc), int(n_vc))

    @property
    def n(self) -> int:
        return len(self.unit)

    @cached_property
    def capacity(self) -> np.ndarray:
        """Cores (or network slots) of each resource in RESOURCES order."""
        return np.array([self.n_tc, self.n_vc, NET_CAPACITY], dtype=np.int64)

    @cached_property
    def resource(self) -> np.ndarray:
        """Index into RESOURCES of the resource each operator holds, -1 for `none`."""
        lookup = {name: k for k, name in enumerate(RESOURCES)}
        return np.array([lookup.get(u, -1) for u in self.unit], dtype=np.int64)

    @cached_property
    def op_capacity(self) -> np.ndarray:
        """Capacity of each operator's resource (0 for `none`)."""
        return np.where(self.resource >= 0, self.capacity[np.maximum(self.resource, 0)], 0)

    @cached_property
    def choice(self) -> np.ndarray:
        """True where the mode is a real decision: a multi-core unit and parallel strictly faster, both > 0."""
        multi = (self.resource >= 0) & (self.op_capacity > 1)
        return multi & (self.parallel_s < self.single_s) & (self.parallel_s > 0) & np.isfinite(self.single_s)

    @cached_property
    def fixed_parallel(self) -> np.ndarray:
        """Mode of operators without a choice: parallel where it is faster and costs no more cores.

        That is a 1-core unit (parallel holds the same single core), a zero parallel latency,
        or single mode cannot run at all. Network and `none` operators are single by definition.
        """
        compute = (self.resource >= 0) & (self.resource < 2)
        one_core = compute & (self.op_capacity == 1) & (self.parallel_s < self.single_s)
        free_parallel = compute & (self.parallel_s == 0) & (self.single_s > 0)
        return ~self.choice & (one_core | free_parallel | (compute & np.isinf(self.single_s)))

    @cached_property
    def fixed_exclusive(self) -> np.ndarray:
        """Choice-free operators that hold every core of a multi-core unit for a positive time."""
        return self.fixed_parallel & (self.op_capacity > 1) & (self.parallel_s > 0)

    @cached_property
    def dur_single(self) -> np.ndarray:
        """Duration (s) in single mode for choice operators, the fixed mode's duration otherwise."""
        fixed = np.where(self.fixed_parallel, self.parallel_s, self.single_s)
        return np.where(self.choice, self.single_s, fixed)

    @cached_property
    def dur_parallel(self) -> np.ndarray:
        """Duration (s) in parallel mode for choice operators, the fixed mode's duration otherwise."""
        return np.where(self.choice, self.parallel_s, self.dur_single)

    @cached_property
    def dur_min(self) -> np.ndarray:
        return np.minimum(self.dur_single, self.dur_parallel)

    @cached_property
    def holds(self) -> np.ndarray:
        """True where the operator occupies its resource for a positive time in every mode."""
        return (self.resource >= 0) & (self.dur_min > 0)

    def durations(self, parallel: np.ndarray) -> np.ndarray:
        """Duration of each operator in the given modes (a choice-free op ignores the flag)."""
        return np.where(self.choice & parallel, self.dur_parallel, self.dur_single)

    def modes(self, parallel: np.ndarray) -> np.ndarray:
        """The reported parallel flag: the decision for choice ops, the fixed mode otherwise."""
        return np.where(self.choice, parallel, self.fixed_parallel)

    @cached_property
    def preds(self) -> list[np.ndarray]:
        out = [[] for _ in range(self.n)]
        for s, d in zip(self.src.tolist(), self.dst.tolist()):
            out[d].append(s)
        return [np.array(p, dtype=np.int64) for p in out]

    @cached_property
    def pred_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Predecessors in compressed rows: those of operator i are idx[ptr[i]:ptr[i + 1]]."""
        return _csr(self.dst, self.src, self.n)

    @cached_property
    def succ_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Successors in compressed rows, as pred_csr."""
        return _csr(self.src, self.dst, self.n)

    @cached_property
    def reach(self) -> np.ndarray:
        """reach[i, j]: a path i -> j of length >= 1 exists."""
        r = np.zeros((self.n, self.n), dtype=bool)
        for j in range(self.n):
            for i in self.preds[j]:
                r[:, j] |= r[:, i]
                r[i, j] = True
        return r

    @cached_property
    def comparable(self) -> np.ndarray:
        return self.reach | self.reach.T

    @cached_property
    def reduced_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The transitive reduction of the DAG: edges i -> j with no other path from i to j."""
        r = self.reach
        keep = [not (r[s] & r[:, d]).any() for s, d in zip(self.src.tolist(), self.dst.tolist())]
        keep = np.array(keep, dtype=bool)
        return self.src[keep], self.dst[keep]

    @cached_property
    def sinks(self) -> np.ndarray:
        has_succ = np.zeros(self.n, dtype=bool)
        has_succ[self.src] = True
        return np.flatnonzero(~has_succ)

    @cached_property
    def head_s(self) -> np.ndarray:
        """Earliest start (s): longest path of fastest durations into the operator."""
        head = np.zeros(self.n)
        for j in range(self.n):
            p = self.preds[j]
            if len(p):
                head[j] = np.max(head[p] + self.dur_min[p])
        return head

    @cached_property
    def tail_s(self) -> np.ndarray:
        """Longest path of fastest durations after the operator finishes (s)."""
        tail = np.zeros(self.n)
        for j in range(self.n - 1, -1, -1):
            for i in self.preds[j]:
                tail[i] = max(tail[i], tail[j] + self.dur_min[j])
        return tail

    def reversed(self) -> "LayerProblem":
        """The same problem with every dependency reversed and operator ids mirrored (i -> n-1-i).

        A schedule of it read backwards from its makespan is a schedule of this problem.
        """
        last = self.n - 1
        return LayerProblem(
            last - self.dst, last - self.src, self.unit[::-1].copy(), self.single_s[::-1].copy(),
            self.parallel_s[::-1].copy(), self.n_tc, self.n_vc,
        )

    @cached_property
    def width(self) -> np.ndarray:
        """Per resource: the most operators holding it that no dependency orders (largest antichain,
        n minus a maximum matching of the reachability relation; Dilworth / Fulkerson 1956)."""
        out = np.zeros(len(RESOURCES), dtype=np.int64)
        for r in range(len(RESOURCES)):
            on = np.flatnonzero(self.holds & (self.resource == r))
            out[r] = antichain_width(self.reach[np.ix_(on, on)])
        return out

    @cached_property
    def critical_path_s(self) -> float:
        return float(np.max(self.head_s + self.dur_min + self.tail_s)) if self.n else 0.0
