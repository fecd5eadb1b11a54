"""Placement bounds that bound other points: a point with no more of any MORE_IS_FASTER column than another, and the
same other cost columns, is bounded by the other's placement bound."""

from __future__ import annotations

import numpy as np
import pandas as pd

from phaze.cost.chip import COST_COLUMNS

MORE_IS_FASTER = ("n_vc", "glb_mib", "hbm_gbps", "hbm_gib")
"""Point columns in which a point only gains: more vector cores, a larger buffer (larger blocking tiles, fewer
HBM bytes), more HBM bandwidth (every memory-bound term and the optimizer update) and capacity (more plans fit).
Every operator latency (phaze.cost) and every lower bound on a layer is non-increasing in each, and the
placement DP's optimum never drops when latencies shrink or memory grows: so a point that equals another in
every other cost column and has no more of these is bounded by the other's placement bound."""

HBM_AXIS = MORE_IS_FASTER.index("hbm_gib")
TIE_BREAKS = ("hbm_gib", "glb_mib", "hbm_gbps")
"""Columns of MORE_IS_FASTER that break ties of the work bound, larger first (order_by_bound). Not n_vc: vector cores
add area, and where they change no latency the first of several equally fast points found should be the smaller chip
(the llama2 x phaze_grid optimum has 4 vector cores; 64 give the same throughput)."""


class DominatingBounds:
    """The placement bounds found so far on the points of a space, each kept with its point's MORE_IS_FASTER columns."""

    def __init__(self, points: pd.DataFrame):
        same = [c for c in COST_COLUMNS if c in points.columns and c not in MORE_IS_FASTER]
        self.group = points.groupby(same, sort=False, dropna=False).ngroup().to_numpy()
        """Per point, a code of its cost columns outside MORE_IS_FASTER: points of one code differ only in those."""
        self.more = points[list(MORE_IS_FASTER)].to_numpy(dtype=np.float64)
        """Per point, its MORE_IS_FASTER columns."""
        self._found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """By group code: (the bounded points' MORE_IS_FASTER columns, their bounds)."""

    def record(self, index: int, value: float) -> None:
        """A placement bound found on point `index`."""
        group = int(self.group[index])
        axes, values = self._found.get(group, (np.empty((0, len(MORE_IS_FASTER))), np.empty(0)))
        self._found[group] = (np.vstack([axes, self.more[index]]), np.append(values, value))

    def bounds(self, indices: np.ndarray) -> np.ndarray:
        """Per point, the least bound found so far on a point with at least its MORE_IS_FASTER columns and the same
        other cost columns (an upper bound on its own; inf where there is none). Read-only: a study's progress reads
        it from another thread."""
        bound = np.full(len(indices), np.inf)
        groups = self.group[indices]
        for group in set(groups.tolist()):
            found = self._found.get(group)
            if found is not None:
                rows = np.flatnonzero(groups == group)
                axes, values = found
                covers = (axes[None, :, :] >= self.more[indices[rows]][:, None, :]).all(axis=2)
                bound[rows] = np.where(covers, values[None, :], np.inf).min(axis=1, initial=np.inf)
        return bound


def undominated(more: np.ndarray, group: np.ndarray, candidates: np.ndarray) -> int:
    """How many of the rows `candidates` (a mask) no row of the same `group` strictly dominates (at least as much of
    every MORE_IS_FASTER column of `more`, more of one): each of them can only be bounded by a bound of its own."""
    count = 0
    for code in np.unique(group[candidates]).tolist():
        rows = group == code
        others, mine = more[rows], more[rows & candidates]
        at_least = (others[None, :, :] >= mine[:, None, :]).all(axis=2)
        above = (others[None, :, :] > mine[:, None, :]).any(axis=2)
        count += int((~(at_least & above).any(axis=1)).sum())
    return count
