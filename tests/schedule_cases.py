"""Shared by the schedule tests: random layer problems (hypothesis) and an exhaustive optimum.

The brute force is independent of phaze.schedule: it enumerates every precedence-feasible
operator order and every mode, placing each operator at its earliest start that respects its
dependencies and the cores already in use (serial schedule generation with insertion). The
schedules so generated are the active schedules, which contain an optimal one for the makespan
(Sprecher, Kolisch & Drexl, EJOR 1995), so the minimum over all of them is the optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from hypothesis import strategies as st

from phaze.workload.graph import EDGE_COLUMNS, OP_COLUMNS, OpGraph


@dataclass
class Case:
    edges: list[tuple[int, int]]
    unit: list[str]
    single_s: np.ndarray
    parallel_s: np.ndarray
    n_tc: int
    n_vc: int

    @property
    def n(self) -> int:
        return len(self.unit)

    def graph(self) -> OpGraph:
        """A view-free OpGraph carrying these edges (only op_id and kind matter to the scheduler)."""
        kinds = {"tc": "matmul", "vc": "elementwise", "net": "collective", "none": "embedding"}
        ops = pd.DataFrame({c: [0] * self.n for c in OP_COLUMNS})
        ops["op_id"] = np.arange(self.n)
        ops["kind"] = [kinds[u] for u in self.unit]
        ops["name"] = [f"op{i}" for i in range(self.n)]
        edges = pd.DataFrame([(s, d, 0.0) for s, d in self.edges], columns=list(EDGE_COLUMNS))
        return OpGraph(ops, edges)

    def args(self):
        return (self.graph(), np.array(self.unit), self.single_s, self.parallel_s, self.n_tc, self.n_vc)


@st.composite
def cases(draw, max_ops: int = 7, max_cores: int = 3, scale_s: float = 1e-3, units=("tc", "tc", "vc", "vc", "net", "none"), sparse: bool = False) -> Case:
    """Random DAGs of 1..max_ops operators with random units, latencies (integer multiples of
    scale_s / 4, so ties are common) and core counts. Each forward pair is an edge with probability
    1/4 (1/16 when `sparse`: wide graphs that stress the core capacity)."""
    n = draw(st.integers(1, max_ops))
    draws = 4 if sparse else 2
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if all(draw(st.booleans()) for _ in range(draws))]
    unit = [draw(st.sampled_from(list(units))) for _ in range(n)]
    single = np.array([draw(st.integers(1, 40)) for _ in range(n)], dtype=float) * scale_s / 4
    parallel = np.array([draw(st.integers(1, 40)) for _ in range(n)], dtype=float) * scale_s / 4
    for i, u in enumerate(unit):
        if u == "net":
            parallel[i] = single[i]
        elif u == "none":
            single[i] = parallel[i] = 0.0
    n_tc = draw(st.integers(1, max_cores))
    n_vc = draw(st.integers(1, max_cores))
    return Case(edges, unit, single, parallel, n_tc, n_vc)


def brute_force_makespan(case: Case) -> float:
    """The optimal makespan by enumerating every operator order and every mode (see module doc)."""
    n = case.n
    preds = [[s for s, d in case.edges if d == j] for j in range(n)]
    capacity = {"tc": case.n_tc, "vc": case.n_vc, "net": 1}
    modes = []
    for i, u in enumerate(case.unit):
        if u in ("tc", "vc"):
            opts = [(case.single_s[i], 1), (case.parallel_s[i], capacity[u])]
            modes.append([o for o in opts if math.isfinite(o[0])])
        else:
            modes.append([(case.single_s[i], 1 if u == "net" else 0)])
    busy: dict[str, list[tuple[float, float, int]]] = {"tc": [], "vc": [], "net": []}
    finish = [0.0] * n
    best = [math.inf]
    # Pruning only (never changes the optimum): fastest durations, least core-time per operator.
    fastest = [min(d for d, _ in m) for m in modes]
    least_work = [min(d * k for d, k in m) for m in modes]
    succs = [[d for s, d in case.edges if s == i] for i in range(n)]
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        tail[i] = max((fastest[j] + tail[j] for j in succs[i]), default=0.0)

    def bound(done, span):
        est = [0.0] * n
        lb = span
        for i in range(n):
            if i in done:
                continue
            est[i] = max((finish[p] if p in done else est[p] + fastest[p] for p in preds[i]), default=0.0)
            lb = max(lb, est[i] + fastest[i] + tail[i])
        for u, cap in capacity.items():
            used = sum((e - s_) * k for s_, e, k in busy[u])
            rest = sum(least_work[i] for i in range(n) if i not in done and case.unit[i] == u)
            lb = max(lb, (used + rest) / cap)
        return lb

    def usage_ok(intervals, t, dur, demand, cap):
        points = [t] + [s for s, _, _ in intervals if t < s < t + dur]
        return all(sum(k for s, e, k in intervals if s <= p < e) + demand <= cap for p in points)

    def earliest(i, dur, demand, est):
        u = case.unit[i]
        if dur == 0 or demand == 0 or u == "none":
            return est
        intervals = busy[u]
        for t in sorted({est} | {e for _, e, _ in intervals if e > est}):
            if usage_ok(intervals, t, dur, demand, capacity[u]):
                return t
        raise AssertionError("unreachable: after every interval ends the resource is free")

    def dfs(done: frozenset, span: float):
        if bound(done, span) >= best[0]:
            return
        if len(done) == n:
            best[0] = span
            return
        for i in range(n):
            if i in done or any(p not in done for p in preds[i]):
                continue
            est = max((finish[p] for p in preds[i]), default=0.0)
            for dur, demand in modes[i]:
                t = earliest(i, dur, demand, est)
                finish[i] = t + dur
                u = case.unit[i]
                holds = u != "none" and dur > 0 and demand > 0
                if holds:
                    busy[u].append((t, t + dur, demand))
                dfs(done | {i}, max(span, t + dur))
                if holds:
                    busy[u].pop()

    dfs(frozenset(), 0.0)
    return best[0]
