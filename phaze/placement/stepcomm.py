"""What the data-parallel group adds to a stage: per-part parameter gathers, gradient reductions and
optimizer updates, as the timeline arrays of `phaze.placement.dp` (TL_FIELDS).

The gradient-reduction group of a stage is its data-parallel replicas times its context-parallel
ranks (Megatron-Core reduces gradients over dp x cp). Devices are numbered tensor-parallel
innermost, then context-parallel, then pipeline stages, then replicas, so a group member's
neighbours are the stage's cp ranks (tp apart) and the other replicas (a whole pipeline apart).

Per ZeRO stage (Rajbhandari et al. 2020 §5; docs/parallelism.md, "How each is modelled"), with B a part's weights:
- 0: gradients all-reduced (B) after the last microbatch's backward;
- 1 (distributed optimizer): gradients reduce-scattered (B) after the last microbatch, updated weights
  all-gathered (B) before the next step's first forward;
- 2: gradients reduce-scattered after every microbatch's backward, weights all-gathered once per step;
- 3 (FSDP full shard): weights all-gathered before every microbatch's forward and again before its
  backward, gradients reduce-scattered after it.
A reduction overlaps the rest of the backward bucket by bucket (one bucket per part) when the
framework overlaps gradient reduction; a gather is prefetched under the previous part's compute when
it overlaps parameter gathers; otherwise each is added to its part's compute. Where the framework's buckets are
larger than a part (Megatron-Core: max(40M, 1M x dp x cp) parameters, train.grad_bucket_*), the part moves its own
bytes but pays only its share of the bucket's collective latency (ZeRO 0-2; ZeRO-3 gathers and reduces layer by layer). An overlapped collective
still slows the compute it hides under (its kernels hold cores and memory bandwidth): with
hw.overlap_slowdown s, its part's compute grows by s / (1 + s) of its time (phaze.schedule.streams).
The optimizer update of a part's (sharded) weights streams its state through HBM.
Under FSDP2's per-parameter sharding (`per_param_sharding`) a ZeRO-3 gather first copies the device's shard into the
gather's input on its own stream, and the compute stream then copies the gathered buffer out into the parameters
(reads and writes the gathered bytes: PyTorch's FSDPParamGroup.wait_for_unshard, "FSDP::all_gather_copy_out", which
"overlaps the current copy-out with the next all-gather"); a reduction first copies the part's gradients, as the
backward left them in the weights' precision, into one buffer in the reduce precision on the compute stream
(foreach_reduce's foreach_reduce_scatter_copy_in, before reduce_scatter_stream.wait_stream(current_stream)).
In a mixture of experts with expert parallelism ep, the expert weights are reduced (and sharded) over
their own expert-data-parallel group, dp x cp / ep ranks (Megatron-Core's expert data parallelism),
the rest over dp x cp.
"""

from __future__ import annotations

import numpy as np

from phaze.cost.network import Network
from phaze.placement.dp import TL_FIELDS, TL_GB, TL_GF, TL_GH, TL_OPT, TL_RBL, TL_RBM, TL_XB, TL_XBL, TL_XF, TL_XH
from phaze.placement.kept import Kept

CONTENDED = {TL_GF: TL_XF, TL_GH: TL_XH, TL_GB: TL_XB, TL_RBM: TL_XB, TL_RBL: TL_XBL}
"""Each overlapped collective (gathers under the forward, the step's gather, gathers and reductions under the
backward, the last reduction) and the compute it slows: its part's matching term."""


def replicas_within(network: Network, dp: int, devices_per_pipeline: int) -> tuple[int, ...]:
    """Data-parallel replicas sharing each of the network's domains (a node: node // k pipelines of k devices
    lie side by side in it)."""
    return network.spread(dp, devices_per_pipeline)


def group_within(network: Network, width: int, cp: int, replicas: tuple[int, ...]) -> tuple[int, ...]:
    """Members of a stage's dp x cp reduction group sharing each domain: its cp ranks there times the replicas there."""
    return tuple(int(max(1, min(cp, d // max(1, width)))) * r for d, r in zip(network.domains, replicas))


TIMELINE_CACHE_ENTRIES = 4096
"""Timeline arrays kept (least recently used dropped): they depend on the model's weights and the plan's data-parallel
group, not on the layer latencies, so every placement DP of a point, and of the points after it, asks for the same few."""
_timelines = Kept(TIMELINE_CACHE_ENTRIES)


def timeline_arrays(prm: np.ndarray, widths: np.ndarray, network: Network, **kw) -> np.ndarray:
    """tl[TL_*, width, part] (`step_arrays`), remembered across calls; the caller must not write to it."""
    key = (prm.shape, prm.tobytes(), np.asarray(widths).tobytes(), network,
           *(v.tobytes() if isinstance(v, np.ndarray) else v for v in (kw[k] for k in sorted(kw))), tuple(sorted(kw)))
    return _timelines.get(key, lambda: step_arrays(prm, widths, network, **kw))


def _bucketed_s(collective_s, nbytes: np.ndarray, shards: int, within, share: np.ndarray) -> np.ndarray:
    """A part's time in a collective of its bucket: its bytes at the links' rate, and `share` of the bucket's latency
    (the collective's time for no bytes: its launch and ring steps)."""
    full = np.asarray(collective_s(nbytes, shards, within), dtype=np.float64)
    latency = float(collective_s(0.0, shards, within))
    return full - (1.0 - share) * latency


def step_arrays(prm: np.ndarray, widths: np.ndarray, network: Network, *, zero: int, dp: int, cp: int,
                    replicas: tuple[int, ...], grad_bytes_per_param_byte: float, overlap_grad_reduce: bool, overlap_param_gather: bool,
                    update_bytes_per_param_byte: float, hbm_bytes_s: float, expert: np.ndarray | None = None, ep: int = 1,
                    overlap_slowdown: float = 0.0, gather_bytes_per_param_byte: float = 1.0, bucket_min_bytes: float = 0.0,
                    bucket_bytes_per_rank: float = 0.0, per_param_sharding: bool = False) -> np.ndarray:
    """tl[TL_*, width, part] for weights `prm` [width, part] (bytes on one device, before sharding), of which
    `expert` are expert weights under expert parallelism `ep`; `replicas` of the dp share each network domain
    (`replicas_within`); gradients are `grad_bytes_per_param_byte`
    times their size (fp32 gradients of bf16 weights: 2), gathered weights `gather_bytes_per_param_byte` (FP8 weights: 0.5);
    buckets of max(`bucket_min_bytes`, `bucket_bytes_per_rank` x dp x cp) bytes of weights (0: one per part);
    `per_param_sharding`: FSDP2's copies around each ZeRO-3 collective (module docstring), at `hbm_bytes_s`."""
    if ep > 1 and expert is not None and np.any(expert):
        common = dict(zero=zero, cp=cp, grad_bytes_per_param_byte=grad_bytes_per_param_byte, overlap_grad_reduce=overlap_grad_reduce,
                      overlap_param_gather=overlap_param_gather, update_bytes_per_param_byte=update_bytes_per_param_byte,
                      hbm_bytes_s=hbm_bytes_s, overlap_slowdown=overlap_slowdown, gather_bytes_per_param_byte=gather_bytes_per_param_byte,
                      bucket_min_bytes=bucket_min_bytes, bucket_bytes_per_rank=bucket_bytes_per_rank, per_param_sharding=per_param_sharding)
        return (step_arrays(prm - expert, widths, network, dp=dp, replicas=replicas, **common)
                + step_arrays(expert, widths, network, dp=dp // ep, replicas=tuple(max(1, r // ep) for r in replicas), **common))
    n_w, n = prm.shape
    tl = np.zeros((len(TL_FIELDS), n_w, n))
    shards = dp * cp
    bucket_bytes = max(bucket_min_bytes, bucket_bytes_per_rank * shards)
    for wi in range(n_w):
        within = group_within(network, int(widths[wi]), cp, replicas)
        grads = prm[wi] * grad_bytes_per_param_byte
        share = np.minimum(1.0, prm[wi] / bucket_bytes) if bucket_bytes > 0 and zero < 3 else np.ones(n)
        allreduce = _bucketed_s(network.group_allreduce_s, grads, shards, within, share)
        scatter = _bucketed_s(network.group_reduce_scatter_s, grads, shards, within, share)
        gathered = prm[wi] * gather_bytes_per_param_byte
        gather = _bucketed_s(network.group_all_gather_s, gathered, shards, within, share)
        step_gather = (TL_GH if overlap_param_gather else TL_XH, gather)
        last_reduce = TL_RBL if overlap_grad_reduce else TL_XBL
        each_reduce = TL_RBM if overlap_grad_reduce else TL_XB
        if zero == 0:
            terms = [(last_reduce, allreduce)]
        elif zero == 1:
            terms = [(last_reduce, scatter), step_gather]
        elif zero == 2:
            terms = [(each_reduce, scatter), (last_reduce, scatter), step_gather]
        else:
            copies = per_param_sharding and hbm_bytes_s > 0
            if copies:
                gather = gather + 2.0 * gathered / shards / hbm_bytes_s  # the shard's copy into the gather's input
            fwd_gather = TL_GF if overlap_param_gather else TL_XF
            bwd_gather = TL_GB if overlap_param_gather else TL_XB
            terms = [(fwd_gather, gather), (TL_GH if overlap_param_gather else TL_XH, gather), (bwd_gather, gather),
                     (each_reduce, scatter), (last_reduce, scatter)]
            if copies:
                copy_out = 2.0 * gathered / hbm_bytes_s
                copy_out_and_in = copy_out + (prm[wi] + grads) / hbm_bytes_s
                terms += [(TL_XF, copy_out), (TL_XH, copy_out), (TL_XB, copy_out_and_in), (TL_XBL, copy_out_and_in)]
            if not overlap_param_gather:
                terms.append((TL_XBL, gather))  # the last microbatch's backward gathers too
        for field, values in terms:
            tl[field, wi] += values
            if field in CONTENDED:
                tl[CONTENDED[field], wi] += overlap_slowdown / (1.0 + overlap_slowdown) * values
        if hbm_bytes_s > 0:
            tl[TL_OPT, wi] = prm[wi] * update_bytes_per_param_byte / (shards if zero >= 1 else 1) / hbm_bytes_s
    return tl
