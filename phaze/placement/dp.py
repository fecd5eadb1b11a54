"""Numba kernels of the placement DP (all @njit(cache=True) on numpy arrays): Pareto fronts over
(max stage load, max stage tail), and the per-stage formulas they and the plan evaluator share.

State (q, i, k): parts i..n-1 split into exactly q stages on exactly k devices (one TP width per
stage); the stage that starts at i is the q-th from the pipeline end, so under 1F1B it holds
min(q, cap) microbatches. A cell keeps every Pareto-optimal pair (L, Z): L the largest stage load
(the 1F1B bottleneck), Z the largest stage "tail". Both are maxima, so a cell's front is built from
its children's fronts. Two step models set what Z is:
- PHAZE's (`timeline` False): Z is the stage's weights on one device, which size the data-parallel
  all-reduce run after the pipeline flush; time = L (m + q - 1) + all-reduce(Z).
- the timeline (`timeline` True): Z is the stage's last slot of the step: its last microbatch with
  the step's parameter gathers before it and its gradient reductions and optimizer update after it,
  each overlapped with compute or not as the framework does (flow shops over the stage's parts, below);
  time = L (m + q - 2) + max(L, Z). Every term only grows with any latency, so the time does too.

Per-(width, part) arrays: fwd, bwd, prm, sav, inb (part input: a checkpoint under recompute),
recv (receive time of a stage starting at part i; 0 at i = 0), send (send time of a stage ending
at part j; 0 at the last part), and for the timeline `tl[TL_*]` (see below). Parts are summed left
to right, as the plan evaluator does.

Overlapped communication is a flow shop over the stage's parts: a stream of gathers feeding the
compute stream (forward, parts in order), or gathers -> compute -> reductions (backward, parts in
reverse). Their makespans are extended one part at a time (a forward part appended, a backward
part prepended), so the DP grows a stage i..j exactly as it grows its sums. Communication the
framework does not overlap is added to the compute of its part (the `x*` arrays).

Memory is a feasibility test on each candidate stage, not a front coordinate: growing a stage
i..j one part at a time accumulates its weights, saved bytes, inputs and largest per-part
rebuild (saved - input), and the memory of every checkpoint model only grows with j.

The per-stage formulas live here with the kernels: Numba's cache only tracks the file of each
compiled function (docs/dependencies.md §5), so helpers in another file could go stale. The one
exception, the rebuild of a front point's plan (phaze.placement.reconstruct), is checked from scratch.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TL_FIELDS = ("gf", "xf", "gh", "xh", "gb", "xb", "rbm", "xbl", "rbl", "opt")
"""Timeline arrays [width, part], stacked in this order in `tl`:
gf / xf: per-microbatch forward parameter gathers (ZeRO-3), overlapped with compute / added to it;
gh / xh: the same for the step's first forward (ZeRO-1/2's post-update gathers, or ZeRO-3's);
gb / xb / rbm: per-microbatch backward gathers (ZeRO-3), serial extras, gradient reduce-scatters (ZeRO-2/3);
xbl / rbl: the last microbatch's serial extras and gradient reductions (ZeRO-0/1's all-reduce or reduce-scatter, ZeRO-2/3's);
opt: the optimizer update of the part's (shard of) weights."""
(TL_GF, TL_XF, TL_GH, TL_XH, TL_GB, TL_XB, TL_RBM, TL_XBL, TL_RBL, TL_OPT) = range(len(TL_FIELDS))

# Stage accumulator: sums and flow-shop makespans of a stage i..j, extended one part at a time.
(S_F, S_B, S_P, S_S, S_SI, S_RB, S_PMAX, S_FSM, S_GM, S_FSH, S_GH, S_H2M, S_M3M, S_RM, S_H2L, S_M3L, S_RL,
 S_OPT, S_GPM, S_GPL) = range(20)
STATE_SIZE = 20

TIMELINE_OFF, TIMELINE_FLOW_SHOP, TIMELINE_ONE_STREAM = 0, 1, 2
"""The kernels' step model: PHAZE's (no timeline); the timeline with the backward's gathers and reductions each on a
stream of its own (a three-machine flow shop); or with both on one stream, in the order PyTorch FSDP issues them
(`_one_stream_backward`)."""


@njit(cache=True)
def stage_compute_s(fwd_s, bwd_s, recompute):
    """Per-microbatch compute of a stage (TP all-reduces included): fwd + bwd, plus fwd again when recomputing."""
    if recompute:
        return fwd_s + bwd_s + fwd_s
    return fwd_s + bwd_s


@njit(cache=True)
def stage_recomputes(recompute, stages_to_end, per_layer):
    """Which stages recompute. Stage checkpoints (PHAZE §6.4): all but the last, which runs backward
    right after forward and would hold the same bytes. Per-layer checkpoints (Megatron-LM full
    recompute): every stage, the last included, since it then holds one layer's activations, not all."""
    return recompute and (per_layer or stages_to_end > 1)


@njit(cache=True)
def inflight_microbatches(stages_to_end, microbatches):
    """Microbatches a stage holds under 1F1B: its distance to the pipeline end (last stage: 1), at most m."""
    return min(stages_to_end, microbatches)


@njit(cache=True)
def stage_memory_bytes(param_bytes, saved_bytes, first_input_bytes, input_sum_bytes, rebuild_max_bytes,
                       inflight, recompute, per_layer, state_mult):
    """Peak bytes on a stage device holding `inflight` microbatches under 1F1B: weights, gradients
    and optimizer state (`state_mult` x weights) plus activations (`saved_bytes` of the stage
    includes its parts' inputs). Without recompute every in-flight microbatch keeps its saved
    activations. With stage checkpoints (PHAZE) all but the microbatch in backward keep only the
    stage input (`first_input_bytes`); with per-layer checkpoints (Megatron-LM, Korthikanti et al.
    2022 §4) every in-flight microbatch keeps each part's input (`input_sum_bytes`) and the one in
    backward rebuilds one part at a time (`rebuild_max_bytes`: the largest saved - input)."""
    if not recompute:
        activations = saved_bytes * inflight
    elif per_layer:
        activations = inflight * input_sum_bytes + rebuild_max_bytes
    else:
        activations = saved_bytes + (inflight - 1) * first_input_bytes
    return param_bytes * state_mult + activations


@njit(cache=True)
def new_stage():
    """The accumulator of an empty stage."""
    st = np.zeros(STATE_SIZE)
    st[S_RB] = -np.inf
    return st


@njit(cache=True)
def extend_stage(st, wi, j, fwd, bwd, prm, sav, inb, tl, rcs, per_layer, timeline):
    """Add part j (at width index wi) to the end of the stage in `st` (in place)."""
    f = fwd[wi, j]
    b = bwd[wi, j]
    st[S_F] += f
    st[S_B] += b
    st[S_P] += prm[wi, j]
    st[S_S] += sav[wi, j]
    st[S_SI] += inb[wi, j]
    st[S_RB] = max(st[S_RB], sav[wi, j] - inb[wi, j])
    st[S_PMAX] = max(st[S_PMAX], prm[wi, j])
    if not timeline:
        return
    # forward: gathers -> compute, the new part last (two-machine flow shop, appended)
    st[S_FSM] = max(st[S_FSM], st[S_GM] + tl[TL_GF, wi, j]) + f + tl[TL_XF, wi, j]
    st[S_GM] += tl[TL_GF, wi, j]
    st[S_FSH] = max(st[S_FSH], st[S_GH] + tl[TL_GH, wi, j]) + f + tl[TL_XH, wi, j]
    st[S_GH] += tl[TL_GH, wi, j]
    # backward: gathers -> compute -> reductions, the new part first (prepended)
    rec = f if (rcs and per_layer) else 0.0
    if timeline == TIMELINE_ONE_STREAM:
        _one_stream_backward(st, S_RM, S_H2M, S_GPM, S_M3M, tl[TL_RBM, wi, j], b + rec + tl[TL_XB, wi, j], tl[TL_GB, wi, j])
        _one_stream_backward(st, S_RL, S_H2L, S_GPL, S_M3L, tl[TL_RBL, wi, j], b + rec + tl[TL_XBL, wi, j], tl[TL_GB, wi, j])
    else:  # three-machine flow shop
        st[S_H2M] = b + rec + tl[TL_XB, wi, j] + max(tl[TL_RBM, wi, j] + st[S_RM], st[S_H2M])
        st[S_M3M] = tl[TL_GB, wi, j] + max(st[S_M3M], st[S_H2M])
        st[S_RM] += tl[TL_RBM, wi, j]
        st[S_H2L] = b + rec + tl[TL_XBL, wi, j] + max(tl[TL_RBL, wi, j] + st[S_RL], st[S_H2L])
        st[S_M3L] = tl[TL_GB, wi, j] + max(st[S_M3L], st[S_H2L])
        st[S_RL] += tl[TL_RBL, wi, j]
    st[S_OPT] += tl[TL_OPT, wi, j]


@njit(cache=True)
def _one_stream_backward(st, comm, compute, pending, span, reduce_s, compute_s, gather_s):
    """Prepend a part to a stage's backward whose gathers and reductions share one stream (one NCCL communicator runs
    one collective at a time: PyTorch FSDP and Megatron-FSDP by default). FSDP's order on that stream, over the parts
    n..1 of the backward: G(n), G(n-1), R(n), G(n-2), R(n-1), ..., G(1), R(2), R(1), the gather of a part prefetched
    as the backward of the one after it starts, its reduction issued when its backward ends; a part's backward waits
    for its gather and for the part after it. Seen backwards in time (the same makespan), the new part k comes last:
    its reduction R(k) and then the previous part's gather G(k+1) join the stream, its compute follows R(k) and the
    previous compute, and its own gather waits (`pending`) for the next part's reduction. `comm` / `compute` hold the
    stream's and the compute's finishing times, `span` the stage's backward makespan."""
    after_reduce = st[comm] + reduce_s
    st[comm] = max(after_reduce, st[compute]) + st[pending]
    st[compute] = max(st[compute], after_reduce) + compute_s
    st[pending] = gather_s
    st[span] = max(st[comm], st[compute]) + gather_s


@njit(cache=True)
def stage_core_s(st, recv_s, rcs, per_layer, timeline):
    """(per-microbatch load, tail) of the stage without its send: the parts' compute and overlapped
    communication plus the receive. PHAZE's model: the tail is the stage's weights (bytes)."""
    if not timeline:
        return stage_compute_s(st[S_F], st[S_B], rcs) + recv_s, st[S_P]
    block = st[S_F] if (rcs and not per_layer) else 0.0
    load = st[S_FSM] + block + st[S_M3M] + recv_s
    tail = st[S_FSH] + block + st[S_M3L] + st[S_OPT] + recv_s
    return load, tail


@njit(cache=True)
def stage_fits(st, first_input_bytes, inflight, rcs, per_layer, state_mult, transient_copies, hbm_bytes):
    """Whether the stage's peak memory fits: stage_memory_bytes plus ZeRO's unsharded per-part buffers."""
    mem = stage_memory_bytes(st[S_P], st[S_S], first_input_bytes, st[S_SI], st[S_RB], inflight, rcs, per_layer, state_mult)
    if transient_copies > 0.0:
        mem += transient_copies * st[S_PMAX]
    return mem <= hbm_bytes


@njit(cache=True)
def _insert(row_l, row_p, row_c, k, load, param):
    """Add (load, param) to the front of cell k unless dominated; drop the points it dominates.
    False when the cell already holds row_l.shape[1] points."""
    c = row_c[k]
    for e in range(c):
        if row_l[k, e] <= load and row_p[k, e] <= param:
            return True
    w = 0
    for e in range(c):
        le = row_l[k, e]
        pe = row_p[k, e]
        if not (load <= le and param <= pe):
            row_l[k, w] = le
            row_p[k, w] = pe
            w += 1
    if w >= row_l.shape[1]:
        return False
    row_l[k, w] = load
    row_p[k, w] = param
    row_c[k] = w + 1
    return True


@njit(cache=True)
def _grown(pool, needed):
    """`pool` with room for at least `needed` values (doubling), contents kept."""
    if needed <= pool.shape[0]:
        return pool
    out = np.empty(max(needed, 2 * pool.shape[0]))
    out[: pool.shape[0]] = pool
    return out


@njit(cache=True)
def _bounds(fwd, bwd, widths, k_max, rep_k, rep_m):
    """m_lb[k]: fewest microbatches of a replica count allowing k devices; prefix_a[i, k] + q
    prefix_b[i, k]: least batch time forced by parts 0..i-1 on the devices a (q, i, k) cell leaves."""
    n_w, n = fwd.shape
    m_lb = np.full(k_max + 1, np.inf)
    for r in range(rep_k.shape[0]):
        for k in range(min(rep_k[r], k_max) + 1):
            m_lb[k] = min(m_lb[k], rep_m[r])
    work = np.zeros(n + 1)
    for part in range(n):
        least = np.inf
        for wi in range(n_w):
            least = min(least, widths[wi] * (fwd[wi, part] + bwd[wi, part]))
        work[part + 1] = work[part] + least
    prefix_a = np.full((n + 1, k_max + 1), np.inf)
    prefix_b = np.full((n + 1, k_max + 1), np.inf)
    for i in range(n + 1):
        for k in range(k_max + 1):
            for r in range(rep_k.shape[0]):
                if i == 0 and k <= rep_k[r]:
                    prefix_a[i, k] = 0.0
                    prefix_b[i, k] = 0.0
                elif i > 0 and k < rep_k[r]:
                    x = work[i] / (rep_k[r] - k)
                    prefix_a[i, k] = min(prefix_a[i, k], x * rep_m[r])
                    prefix_b[i, k] = min(prefix_b[i, k], x)
    return m_lb, prefix_a, prefix_b


@njit(cache=True)
def stage_values(st, wi, i, j, recv, send, rcs, per_layer, timeline):
    """(core, load, tail) of stage i..j: core is the load without the send (it only grows with j)."""
    core, tail = stage_core_s(st, recv[wi, i], rcs, per_layer, timeline)
    if timeline:
        tail = tail + send[wi, j]
    return core, core + send[wi, j], tail


@njit(cache=True)
def pareto_fronts(fwd, bwd, prm, sav, inb, recv, send, tl, widths, state_mult, transient_copies, hbm_bytes, recompute,
                  per_layer, timeline, cap, q_max, k_max, rep_k, rep_m, bound, front_cap, allowed, last_part):
    """Fronts of the cells (q, 0, k) for q <= q_max, k <= k_max (k in units of `widths`), of plans whose every
    stage i..j is `allowed[i, j]` (j <= last_part[i]: phaze.placement.layouts).

    A layer q is kept as a pool of points with start/count per cell (i, k); the cells of one i
    are built in a row buffer of `front_cap` points each, then appended to the pool.
    The run serves replica counts d with pipelines of at most rep_k[r] devices and rep_m[r]
    microbatches. Pruning against `bound` (a batch time already reached) drops what cannot beat it:
    a partial plan (q, i, k) with max load L ends at >= L (m + q - 1) for the fewest m of any d
    allowing k devices; and its prefix (parts before i, one stage at least) must run on the other
    K_d - k devices, so some stage's load is >= W_i / (K_d - k), W_i the prefix's least
    device-seconds, giving >= W_i / (K_d - k) (m_d + q).
    Returns (L, Z, count, ok): the points of the cells (q, 0, k) in (q, k) order, their count
    per cell, and ok = False when a cell outgrew `front_cap`.
    """
    n_w, n = fwd.shape
    t_min = widths.min()
    t_max = widths.max()
    m_lb, prefix_a, prefix_b = _bounds(fwd, bwd, widths, k_max, rep_k, rep_m)
    prev_start = np.zeros((n + 1, k_max + 1), np.int64)
    prev_cnt = np.zeros((n + 1, k_max + 1), np.int64)
    cur_start = np.zeros((n + 1, k_max + 1), np.int64)
    cur_cnt = np.zeros((n + 1, k_max + 1), np.int64)
    prev_l = np.zeros(1)  # the empty suffix: no stage, L = Z = 0
    prev_p = np.zeros(1)
    prev_cnt[n, 0] = 1
    row_l = np.empty((k_max + 1, front_cap))
    row_p = np.empty((k_max + 1, front_cap))
    row_c = np.zeros(k_max + 1, np.int64)
    out_l = np.empty(1024)
    out_p = np.empty(1024)
    out_cnt = np.zeros((q_max + 1, k_max + 1), np.int64)
    out_used = 0
    prev_lo, prev_hi, cur_lo, cur_hi = 0, 0, 0, k_max  # k range each buffer last held
    for q in range(1, q_max + 1):
        cur_cnt[:, cur_lo : cur_hi + 1] = 0
        cur_lo, cur_hi = q * t_min, min(k_max, q * t_max)
        cur_l = np.empty(max(1024, prev_l.shape[0]))
        cur_p = np.empty(cur_l.shape[0])
        used = 0
        inflight = inflight_microbatches(q, cap)
        rcs = stage_recomputes(recompute, q, per_layer)
        slots = m_lb + (q - 1)
        for i in range(n - q + 1):
            row_c[cur_lo : cur_hi + 1] = 0
            for wi in range(n_w):
                t = widths[wi]
                k_lo = t + (q - 1) * t_min
                if k_lo > k_max:
                    continue
                k_hi = min(k_max, t + (q - 1) * t_max)
                st = new_stage()
                for j in range(i, min(n - q, last_part[i]) + 1):
                    extend_stage(st, wi, j, fwd, bwd, prm, sav, inb, tl, rcs, per_layer, timeline)
                    if not stage_fits(st, inb[wi, i], inflight, rcs, per_layer, state_mult, transient_copies, hbm_bytes):
                        break
                    core, load, z = stage_values(st, wi, i, j, recv, send, rcs, per_layer, timeline)
                    if core * slots[k_lo] > bound:
                        break
                    if not allowed[i, j]:
                        continue
                    for k in range(k_lo, k_hi + 1):
                        if load * slots[k] > bound:
                            break
                        if prefix_a[i, k] + q * prefix_b[i, k] > bound:
                            continue
                        kc = k - t
                        first = prev_start[j + 1, kc]
                        for e in range(first, first + prev_cnt[j + 1, kc]):
                            a = max(load, prev_l[e])
                            if a * slots[k] > bound:
                                continue
                            if not _insert(row_l, row_p, row_c, k, a, max(z, prev_p[e])):
                                return out_l[:out_used], out_p[:out_used], out_cnt, False
            cur_l = _grown(cur_l, used + row_c[cur_lo : cur_hi + 1].sum())
            cur_p = _grown(cur_p, cur_l.shape[0])
            for k in range(cur_lo, cur_hi + 1):
                cur_start[i, k] = used
                cur_cnt[i, k] = row_c[k]
                for e in range(row_c[k]):
                    cur_l[used] = row_l[k, e]
                    cur_p[used] = row_p[k, e]
                    used += 1
        out_l = _grown(out_l, out_used + used)
        out_p = _grown(out_p, out_l.shape[0])
        for k in range(cur_lo, cur_hi + 1):
            out_cnt[q, k] = cur_cnt[0, k]
            first = cur_start[0, k]
            for e in range(first, first + cur_cnt[0, k]):
                out_l[out_used] = cur_l[e]
                out_p[out_used] = cur_p[e]
                out_used += 1
        prev_l, prev_p = cur_l, cur_p
        prev_start, cur_start = cur_start, prev_start
        prev_cnt, cur_cnt = cur_cnt, prev_cnt
        prev_lo, prev_hi, cur_lo, cur_hi = cur_lo, cur_hi, prev_lo, prev_hi
    return out_l[:out_used], out_p[:out_used], out_cnt, True
