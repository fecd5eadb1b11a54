"""Numba kernels rebuilding the plan behind a DP front point: stages (first part, last part, width) meeting its caps.

They compile phaze.placement.dp's per-stage formulas, whose edits Numba's cache does not see here
(docs/dependencies.md §5); a stale rebuild cannot pass unseen: optimize re-costs the rebuilt plan and checks it."""

from __future__ import annotations

import numpy as np
from numba import njit

from phaze.placement.dp import extend_stage, inflight_microbatches, new_stage, stage_fits, stage_recomputes, stage_values


@njit(cache=True)
def _reachable(fwd, bwd, prm, sav, inb, recv, send, tl, widths, state_mult, transient_copies, hbm_bytes, recompute,
               per_layer, timeline, cap, q_star, k_star, load_cap, tail_cap, allowed, last_part):
    """reach[q, i, k]: parts i.. fit q allowed stages on k devices with every stage load <= load_cap and tail <= tail_cap."""
    n_w, n = fwd.shape
    reach = np.zeros((q_star + 1, n + 1, k_star + 1), np.bool_)
    reach[0, n, 0] = True
    for q in range(1, q_star + 1):
        inflight = inflight_microbatches(q, cap)
        rcs = stage_recomputes(recompute, q, per_layer)
        for i in range(n - q + 1):
            for wi in range(n_w):
                t = widths[wi]
                if t > k_star:
                    continue
                st = new_stage()
                for j in range(i, min(n - q, last_part[i]) + 1):
                    extend_stage(st, wi, j, fwd, bwd, prm, sav, inb, tl, rcs, per_layer, timeline)
                    if not stage_fits(st, inb[wi, i], inflight, rcs, per_layer, state_mult, transient_copies, hbm_bytes):
                        break
                    core, load, z = stage_values(st, wi, i, j, recv, send, rcs, per_layer, timeline)
                    if core > load_cap or _tail_core(st, z, wi, j, send, timeline) > tail_cap:
                        break
                    if not allowed[i, j] or load > load_cap or z > tail_cap:
                        continue
                    for k in range(t, k_star + 1):
                        if reach[q - 1, j + 1, k - t]:
                            reach[q, i, k] = True
    return reach


@njit(cache=True)
def _tail_core(st, z, wi, j, send, timeline):
    """The stage tail without the send (it only grows with j): PHAZE's tail (weights) has none."""
    return z - send[wi, j] if timeline else z


@njit(cache=True)
def reconstruct(fwd, bwd, prm, sav, inb, recv, send, tl, widths, state_mult, transient_copies, hbm_bytes, recompute,
                per_layer, timeline, cap, q_star, k_star, load_cap, tail_cap, allowed, last_part):
    """Stages (first_part, last_part, width index) of a q_star-stage, k_star-device plan of allowed stages meeting the
    caps; ok flag."""
    n_w, n = fwd.shape
    reach = _reachable(fwd, bwd, prm, sav, inb, recv, send, tl, widths, state_mult, transient_copies, hbm_bytes, recompute,
                       per_layer, timeline, cap, q_star, k_star, load_cap, tail_cap, allowed, last_part)
    stages = np.full((q_star, 3), -1, np.int64)
    if not reach[q_star, 0, k_star]:
        return stages, False
    i = 0
    k = k_star
    for q in range(q_star, 0, -1):
        inflight = inflight_microbatches(q, cap)
        rcs = stage_recomputes(recompute, q, per_layer)
        found = False
        for wi in range(n_w):
            t = widths[wi]
            if t > k or found:
                continue
            st = new_stage()
            for j in range(i, min(n - q, last_part[i]) + 1):
                extend_stage(st, wi, j, fwd, bwd, prm, sav, inb, tl, rcs, per_layer, timeline)
                if not stage_fits(st, inb[wi, i], inflight, rcs, per_layer, state_mult, transient_copies, hbm_bytes):
                    break
                core, load, z = stage_values(st, wi, i, j, recv, send, rcs, per_layer, timeline)
                if core > load_cap or _tail_core(st, z, wi, j, send, timeline) > tail_cap:
                    break
                if allowed[i, j] and load <= load_cap and z <= tail_cap and reach[q - 1, j + 1, k - t]:
                    stages[q_star - q, 0] = i
                    stages[q_star - q, 1] = j
                    stages[q_star - q, 2] = wi
                    i = j + 1
                    k -= t
                    found = True
                    break
        if not found:
            return stages, False
    return stages, i == n and k == 0
