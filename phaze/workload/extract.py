"""Extract a model's training step into per-part operator graphs for every TP width, cached on disk.

Only one block is traced (the blocks of these models are identical; tests trace two and compare),
plus the pre-layers and post-layers once each, so the LM head and loss are counted exactly once.
Torch and transformers are imported only to trace (`extract_uncached`): a process that reads cached workloads, such
as a search's worker, starts without them (about 2.5 s of imports).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import pickle
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, fields, is_dataclass, replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from phaze.atomic_file import write_atomic
from phaze.cores import usable_cores
from phaze.schema.choices import SelectivePolicy
from phaze.spawn import spawn_context
from phaze.workload.graph import DENSE, LayerGraph, Shard, Workload
from phaze.workload.model_rules import block_parts, valid_ep

if TYPE_CHECKING:
    from phaze.workload.families import PartSpec

log = logging.getLogger(__name__)

EXTRACTOR_VERSION = 10
"""Bump when the extracted tables change meaning, so stale caches are not reused."""

ARCH_FIELDS = (
    "family", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size", "vocab_size",
    "seq_len", "max_position_embeddings", "word_embed_proj_dim", "tie_word_embeddings", "pre_norm",
    "attention", "activation", "dropout", "fused_kernels", "selective_policy",
    "num_experts", "experts_per_token", "expert_ffn_hidden_size", "num_shared_experts", "capacity_factor", "moe_imbalance",
    "first_dense_layers", "moe_layer_freq", "kv_lora_rank", "q_lora_rank", "rope_head_dim", "v_head_dim",
)
"""The model fields that change the extracted graphs (name, source and expert placement do not)."""

EXPERT_FREE_PARTS = ("pre", "post", DENSE)
"""Parts that expert parallelism leaves unchanged (the experts live in the MoE blocks): a shard with ep > 1 shares
them with its ep = 1 shard (the same objects, traced once; shards are traced in increasing ep)."""

DTYPES = {2: "bfloat16", 4: "float32"}
"""Training precision by bytes per element (torch dtype names): bf16 mixed precision (PHAZE: fp16, 2 bytes) or fp32."""


def _as_dict(model_cfg) -> dict:
    """The model's fields (a ModelCfg, or a mapping)."""
    return asdict(model_cfg) if is_dataclass(model_cfg) else dict(model_cfg)


def valid_tp_widths(model_cfg, tp_widths) -> list[int]:
    """The requested TP widths that divide the heads (and KV heads) and are at most model.max_tp."""
    return [
        t for t in sorted(set(tp_widths))
        if t <= model_cfg.max_tp and model_cfg.num_heads % t == 0 and model_cfg.num_kv_heads % t == 0
    ]


def shards_of(model_cfg, tp_widths, sp_values=(False,), cp_values=(1,), ep_values=(1,)) -> list[Shard]:
    """The distinct shards to trace: every valid TP width x sequence parallelism x context-parallel width x
    expert-parallel width (sequence parallelism only where a TP group exists, ep only dividing the experts)."""
    widths = valid_tp_widths(model_cfg, tp_widths)
    eps = valid_ep(model_cfg, ep_values)
    return sorted({Shard(t, bool(sp), int(cp), ep).canonical() for t in widths for sp in sp_values for cp in cp_values for ep in eps},
                  key=lambda s: (s.ep, s.cp, s.sp, s.tp))


def cache_key(model_cfg, mbs: int, bytes_per_elem: int, tp_widths, sp_values=(False,), cp_values=(1,), ep_values=(1,)) -> str:
    arch = {k: _as_dict(model_cfg).get(k) for k in ARCH_FIELDS}
    shards = [(s.tp, s.sp, s.cp, s.ep) for s in shards_of(model_cfg, tp_widths, sp_values, cp_values, ep_values)]
    blob = json.dumps(
        {"arch": arch, "mbs": mbs, "bytes": bytes_per_elem, "shards": shards, "v": EXTRACTOR_VERSION,
         "torch": version("torch"), "transformers": version("transformers")},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _traced(part: str, spec: PartSpec, tp: int, mbs: int, seq_len: int, fused: bool, selective_policy: str) -> LayerGraph:
    """One part's graphs; with fused kernels, its norms, rotary embeddings and gated activations as one kernel each
    (phaze.workload.fused_ops) and its saved tensors as a fusing compiler keeps them; selective recompute by
    `selective_policy` (model.selective_policy)."""
    from phaze.workload.experts import expert_param_bytes
    from phaze.workload.fused_ops import fused_kernels
    from phaze.workload.trace import part_graph

    with fused_kernels(spec.module) if fused else contextlib.nullcontext():
        return part_graph(part, spec, tp, mbs, seq_len, fused, expert_param_bytes(spec.module), selective_policy)


def extract_uncached(model_cfg, mbs: int, bytes_per_elem: int = 2, tp_widths=(1, 2, 4, 8), sp_values=(False,), cp_values=(1,),
                     ep_values=(1,)) -> Workload:
    """Build and trace the model for each valid shard: pre, layer and post graphs both ways (the microbatch, the bytes
    per element and the TP widths are checked where the config is: phaze.schema.training, phaze.checks.train)."""
    import torch

    from phaze.workload.families import build_parts, count_params

    shards = shards_of(model_cfg, tp_widths, sp_values, cp_values, ep_values)
    dtype = getattr(torch, DTYPES[bytes_per_elem])
    fused = bool(getattr(model_cfg, "fused_kernels", False))
    policy = str(getattr(model_cfg, "selective_policy", SelectivePolicy.attention_core.value))
    graphs = {}
    for shard in shards:
        parts = build_parts(model_cfg, mbs, shard.tp, dtype, sp=shard.sp, cp=shard.cp, ep=shard.ep)
        without_experts = graphs.get(replace(shard, ep=1), {})
        graphs[shard] = {p: without_experts[p] if p in EXPERT_FREE_PARTS and p in without_experts else
                         _traced(p, parts[p], shard.tp, mbs, model_cfg.seq_len, fused, policy) for p in parts}
    params, active = count_params(model_cfg)
    blocks = block_parts(model_cfg)
    return Workload(
        model_name=model_cfg.name,
        num_layers=model_cfg.num_layers,
        seq_len=model_cfg.seq_len,
        mbs=mbs,
        bytes_per_elem=bytes_per_elem,
        params=params,
        graphs=graphs,
        active_params=active,
        block_parts=blocks if DENSE in blocks else (),
    )


def cached_path(model_cfg, mbs: int, bytes_per_elem: int = 2, tp_widths=(1, 2, 4, 8), cache_dir: str | Path | None = None,
                sp_values=(False,), cp_values=(1,), ep_values=(1,)) -> Path | None:
    """Where the workload of these shards is cached (keyed by a hash of the architecture and shards); None without a cache."""
    if cache_dir is None:
        return None
    key = cache_key(model_cfg, mbs, bytes_per_elem, tp_widths, sp_values, cp_values, ep_values)
    return Path(cache_dir) / "workload" / f"{model_cfg.name}-{key}.pkl"


def extract_workload(model_cfg, mbs: int, bytes_per_elem: int = 2, tp_widths=(1, 2, 4, 8), cache_dir: str | Path | None = None,
                     sp_values=(False,), cp_values=(1,), ep_values=(1,)) -> Workload:
    """The workload from the disk cache when present, else extracted and stored."""
    path = cached_path(model_cfg, mbs, bytes_per_elem, tp_widths, cache_dir, sp_values, cp_values, ep_values)
    cached = (_read_cached(path, model_cfg.name, mbs, bytes_per_elem, shards_of(model_cfg, tp_widths, sp_values, cp_values, ep_values))
              if path is not None else None)
    if cached is not None:
        return cached
    start = time.perf_counter()
    workload = extract_uncached(model_cfg, mbs, bytes_per_elem, tp_widths, sp_values, cp_values, ep_values)
    log.info("extracted %s mbs=%d in %.1f s", model_cfg.name, mbs, time.perf_counter() - start)
    if path is not None:
        write_atomic(path, pickle.dumps(workload, protocol=pickle.HIGHEST_PROTOCOL))
    return workload


UNPICKLING_ERRORS = (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, KeyError, TypeError,
                     ValueError, OSError)
"""What pickle.load raises on a truncated or garbled file, or on one whose classes this version no longer has
(the pickle documentation: "other exceptions may also be raised ... including (but not necessarily limited to)
AttributeError, EOFError, ImportError, and IndexError")."""


def _read_cached(path: Path, model_name: str, mbs: int, bytes_per_elem: int, shards: list[Shard]) -> Workload | None:
    """The workload cached at `path` when it is whole and what was asked for (a Workload with every field of this
    version, of this model, microbatch and precision, with a graph per shard); else None, a damaged file reported, to
    be extracted again and replaced."""
    try:
        with path.open("rb") as f:
            workload = pickle.load(f)
    except FileNotFoundError:
        return None
    except UNPICKLING_ERRORS as err:
        return _damaged(path, err)
    if not isinstance(workload, Workload):
        return _damaged(path, f"it holds a {type(workload).__name__}")
    missing = [f.name for f in fields(Workload) if f.name not in vars(workload)]
    if missing:
        return _damaged(path, f"no field {missing[0]!r}")
    if (workload.model_name, workload.mbs, workload.bytes_per_elem) != (model_name, mbs, bytes_per_elem):
        return _damaged(path, f"it is {workload.model_name} at mbs {workload.mbs}, {workload.bytes_per_elem} bytes per element")
    absent = [shard for shard in shards if shard not in workload.graphs]
    return _damaged(path, f"no graphs of {absent[0]}") if absent else workload


def _damaged(path: Path, why: object) -> None:
    """Report a damaged workload cache file; None, as for a miss."""
    log.warning("workload cache file %s is damaged (%s): extracting again", path, why)
    return None


_claims = None
"""The shared count of jobs taken so far (a spawned tracer's copy is set by _share_claims)."""


_started_claims: list = []
"""Every shared count handed to spawned tracers, kept for this process's life: a spawned process may still be
starting when this one has traced every size and moved on, and a count collected before the spawned process reads
it is unlinked (that process then fails with FileNotFoundError instead of finding no size left)."""


def _share_claims(claims) -> None:
    global _claims
    _claims = claims


def _trace_claimed(jobs: list, claims=None) -> dict[int, Workload]:
    """Run the jobs this process takes, one at a time, until none is left (`claims`: the shared count, else this
    process's copy): whichever process is free takes the next job. Returns {index in jobs: workload}."""
    claims = claims if claims is not None else _claims
    traced = {}
    while True:
        with claims.get_lock():
            i = claims.value
            claims.value += 1
        if i >= len(jobs):
            return traced
        traced[i] = jobs[i]()


def workload_job(model_cfg, mbs: int, bytes_per_elem: int = 2, tp_widths=(1, 2, 4, 8), cache_dir: str | Path | None = None,
                 sp_values=(False,), cp_values=(1,), ep_values=(1,)) -> partial:
    """extract_workload with these arguments, to be run later (by extract_jobs, here or in a spawned process)."""
    return partial(extract_workload, model_cfg, mbs, bytes_per_elem, tuple(tp_widths), cache_dir, tuple(sp_values),
                   tuple(cp_values), tuple(ep_values))


def extract_jobs(jobs: list[partial], processes: int | None = None) -> list[Workload]:
    """The workload of each workload_job; those not cached are traced by this process and up to `processes` - 1
    spawned ones (None: the cores this process may use; tracing is single-threaded Python, so each core traces one
    workload at a time), each taking the next when it is free. A process first spends seconds importing torch and
    transformers (Llama-2-7B: 8.3 s for the first size, 2.2-2.6 s for each further one), so a run traces every
    workload it needs at once: a summary's and the study's together."""
    if processes is None:
        processes = usable_cores()
    paths = [cached_path(*job.args) for job in jobs]
    todo, seen = [], set()
    for i, path in enumerate(paths):
        if path is None or (path not in seen and not path.exists()):  # a job asked twice is traced once, then read
            todo.append(i)
            seen.add(path)
    traced = {}
    if processes > 1 and len(todo) > 1:
        start = time.perf_counter()
        context = spawn_context()
        claims = context.Value("i", 0)
        _started_claims.append(claims)
        n_helpers = min(processes, len(todo)) - 1
        pool = ProcessPoolExecutor(n_helpers, mp_context=context, initializer=_share_claims, initargs=(claims,))
        todo_jobs = [jobs[i] for i in todo]
        try:
            helpers = {pool.submit(_trace_claimed, todo_jobs, None) for _ in range(n_helpers)}
            here = _trace_claimed(todo_jobs, claims)
            traced = {todo[k]: w for k, w in here.items()}
            while len(traced) < len(todo):  # jobs a spawned process took: wait for it, not for one still importing
                done, helpers = wait(helpers, return_when=FIRST_COMPLETED)
                for future in done:
                    traced.update({todo[k]: w for k, w in future.result().items()})
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        log.info("extracted %s in %.1f s (%d of %d in this process)", sorted({f"{jobs[i].args[0].name} mbs={jobs[i].args[1]}" for i in todo}),
                 time.perf_counter() - start, len(here), len(todo))
    return [traced[i] if i in traced else job() for i, job in enumerate(jobs)]
