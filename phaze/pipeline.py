"""One hardware point through the stages: operator graphs -> latencies -> layer schedules -> placement.

This is the only module below the entry points that knows every stage: `phaze.evaluate` and the search call it for
each accelerator point they consider, with the model's typed inputs (phaze.inputs.ModelJob); phaze.evaluation's
modules (the latency table, the layer scheduler, its refinement, the explanation) take the plain values it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.compat import expert_run_spaces
from phaze.cost.network import Network
from phaze.evaluation.latency_table import LATENCY_FIELDS, core_fwd_s, part_sizes, single_stream_s, tp_values_of, variant_graph  # noqa: F401
from phaze.evaluation.layer_scheduler import LayerScheduler, part_latencies  # noqa: F401
from phaze.evaluation.point import Explanation, explanation
from phaze.evaluation.refine import STOP_REL_TOL, LayerLatencies, value_now  # noqa: F401
from phaze.hardware import Accelerator
from phaze.inputs import ModelJob
from phaze.placement import PartCosts, PlacementInput, PlacementResult, evaluate_fixed, optimize
from phaze.placement.memory import ADAM_MOMENTS_BYTES_PER_PARAM, FP32_MASTER_BYTES_PER_PARAM
from phaze.placement.solve import Space
from phaze.plan_space import LayerVariant
from phaze.workload.extract import extract_jobs
from phaze.workload.graph import DENSE, Workload
from phaze.workload.inference import forward_only
from phaze.workload.phaze_conventions import with_phaze_conventions
from phaze.workload.precision import fp8_weight_cache_bytes_per_param_byte, weight_bytes_per_param_byte, with_precision
from phaze.workload.warp_mma import with_warp_mma

GIB = 2**30


def load_workloads(job: ModelJob) -> dict[int, Workload]:
    """The model's workload at every microbatch size of the job (cached on disk as traced, by `workload.processes`
    processes at once; the precision, the attention kernel's instruction set and the compat switches apply after the cache)."""
    spec = job.workload
    step = forward_only if spec.forward_only else (lambda workload: workload)
    traced = extract_jobs(spec.jobs(), processes=spec.processes)
    return {mbs: step(with_phaze_conventions(with_warp_mma(with_precision(w, spec.precision), spec.attention_warp_mma),
                                             spec.compat, str(spec.model.family)))
            for mbs, w in zip(spec.mbs_values, traced)}


def variants_of(job: ModelJob) -> list[LayerVariant]:
    return list(job.plan.variants)


def _or_default(value, default: float) -> float:
    """A train.* byte count, or the fp32 default where it is null."""
    return float(default if value is None else value)


def placement_input(job: ModelJob, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, latencies=None) -> PlacementInput:
    """The placement DP's input for one accelerator point: every part scheduled (or the given latencies)."""
    if latencies is None:
        e = job.execution
        latencies = part_latencies(workloads, point, network, e.schedule, tp_values_of(workloads), variants_of(job),
                                   e.inter_op_parallel, e.tp_comm_async, e.overlap_slowdown)
    return placement_inputs(job, point, workloads, network)(latencies)


@dataclass(frozen=True)
class PlacementSetup:
    """What the placement DP's input and space take from the configuration and the workload, whatever the point:
    read once per model, since a search builds a point's input again each time more of its layers are scheduled."""

    variants: list[LayerVariant]
    sizes: dict[str, dict[str, np.ndarray]]
    chain: tuple[str, ...]
    """The part at each position of the chain (Workload.chain)."""
    space: Space
    fixed: list[dict] | None
    """A fixed placement's plans (phaze.plan_space.fixed_plans), None for a search."""
    fp8: bool
    fields: dict
    """PlacementInput fields that do not depend on the point."""

    @classmethod
    def of(cls, job: ModelJob, workloads: dict[int, Workload]) -> "PlacementSetup":
        tp_values = tp_values_of(workloads)
        variants = variants_of(job)
        train = job.train
        any_w = next(iter(workloads.values()))
        fields = dict(
            mbs_values=np.array([v.mbs for v in variants]), sp_values=np.array([v.sp for v in variants]),
            cp_values=np.array([v.cp for v in variants]), overlap_values=np.array([v.tp_comm_overlap for v in variants]),
            ep_values=np.array([v.ep for v in variants]),
            tp_values=np.array(tp_values),
            devices=job.devices, global_batch=int(train.global_batch), seq_len=int(any_w.seq_len),
            optimizer=train.optimizer,
            bytes_per_elem=int(train.bytes_per_elem), grad_bytes_per_elem=int(train.grad_bytes_per_elem or 0),
            master_bytes_per_param=_or_default(train.master_bytes_per_param, FP32_MASTER_BYTES_PER_PARAM),
            moment_bytes_per_param=_or_default(train.moment_bytes_per_param, ADAM_MOMENTS_BYTES_PER_PARAM),
            weight_cache_bytes_per_param_byte=fp8_weight_cache_bytes_per_param_byte(train.precision, int(train.bytes_per_elem),
                                                                                    bool(train.fp8_params)),
            weight_bytes_per_param_byte=weight_bytes_per_param_byte(int(train.bytes_per_elem), bool(train.fp8_params)),
            p2p_scatter_gather=bool(train.p2p_scatter_gather),
            recompute_granularity=train.recompute_granularity, model_flops_per_seq=any_w.train_matmul_flops_per_seq(any_w.tp_widths[0]),
            part_names=("pre",) + tuple(f"{'dense' if part == DENSE else 'layer'}{i}" for i, part in enumerate(any_w.blocks)) + ("post",),
            step_model=train.step_model, overlap_grad_reduce=bool(train.overlap_grad_reduce),
            overlap_param_gather=bool(train.overlap_param_gather),
            grad_bucket_min_params=int(train.grad_bucket_min_params), grad_bucket_params_per_rank=int(train.grad_bucket_params_per_rank),
            serial_zero3_collectives=bool(train.serial_zero3_collectives), per_param_sharding=bool(train.per_param_sharding),
            update_bytes_per_param_byte=float(train.update_bytes_per_param) / int(train.bytes_per_elem),
            overlap_slowdown=job.execution.overlap_slowdown,
        )
        return cls(variants, part_sizes(workloads, tp_values, variants), any_w.chain, job.plan.space,
                   None if job.plan.fixed is None else list(job.plan.fixed), train.precision == "fp8", fields)


def placement_inputs(job: ModelJob, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, setup: PlacementSetup | None = None):
    """latencies -> the placement DP's input for one accelerator point (`setup`: PlacementSetup.of(job, workloads))."""
    setup = setup or PlacementSetup.of(job, workloads)
    row = point.iloc[0]
    chip = Accelerator.from_row(row)
    fields = dict(setup.fields, hbm_bytes=float(row.hbm_gib) * GIB, network=network, hbm_bytes_s=chip.achievable_hbm_bytes_s,
                  peak_flops_s=chip.peak_matmul_flops * (chip.fp8_matmul_ratio if setup.fp8 else 1.0))

    def build(latencies) -> PlacementInput:
        costs = {part: PartCosts(**latencies[part], **setup.sizes[part]) for part in setup.sizes}
        return PlacementInput.from_chain(costs, setup.chain, **fields)

    return build


def placer(job: ModelJob, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, beat_seq_s: float | None = None,
           setup: PlacementSetup | None = None):
    """latencies -> the best placement on this point, or the fixed one when placement.* sets dp, pp and tp.
    With `beat_seq_s` only placements of a higher throughput count: None when there is none (cheaper to show).
    `setup`: PlacementSetup.of(job, workloads), where the caller keeps it."""
    setup = setup or PlacementSetup.of(job, workloads)
    cutoff_s = int(job.train.global_batch) / beat_seq_s if beat_seq_s else np.inf
    inputs = placement_inputs(job, point, workloads, network, setup)

    def place(latencies) -> PlacementResult | None:
        inp = inputs(latencies)
        if setup.fixed is not None:  # the best of the fixed placement's plans; where none fits, the one needing least memory
            return max((evaluate_fixed(inp, **plan) for plan in setup.fixed), key=lambda r: (r.throughput_seq_s, -r.memory_per_device_bytes))
        found = [r for r in (optimize(inp, space=s, cutoff_s=cutoff_s) for s in expert_run_spaces(job.compat, job.model.expert, inp, setup.space)) if r is not None]
        return max(found, key=lambda r: r.throughput_seq_s, default=None)

    return place


def layer_latencies(job: ModelJob, point: pd.DataFrame, workloads: dict[int, Workload], network: Network, lower_bounds=None) -> LayerLatencies:
    """The point's LayerLatencies; `lower_bounds` (one point's slice of phaze.search.bounds.lower_bound_latencies)
    spares computing the initial bounds."""
    e = job.execution
    return LayerLatencies(workloads, point, network, e.schedule, tp_values_of(workloads), variants_of(job), e.inter_op_parallel, lower_bounds,
                          e.tp_comm_async, e.overlap_slowdown)


def evaluate_scheduled(job: ModelJob, point: pd.DataFrame, workloads: dict[int, Workload] | None = None) -> tuple[PlacementResult | None, LayerLatencies]:
    """evaluate_point with the layer schedules it made (explain reuses them)."""
    workloads = workloads or load_workloads(job)
    layers = layer_latencies(job, point, workloads, job.network)
    return layers.best(placer(job, point, workloads, job.network))[0], layers


def evaluate_point(job: ModelJob, point: pd.DataFrame, workloads: dict[int, Workload] | None = None, latencies=None) -> PlacementResult | None:
    """Best placement on this point, or the fixed one when placement.* sets dp, pp and tp.

    Layers are scheduled only as far as the placement needs them (LayerLatencies.best); the result
    equals the one on every layer scheduled. `latencies` (as from part_latencies) replaces the
    scheduled ones: the search passes per-layer lower bounds to get an upper bound on the throughput.
    """
    if latencies is None:
        return evaluate_scheduled(job, point, workloads)[0]
    workloads = workloads or load_workloads(job)
    return placer(job, point, workloads, job.network)(latencies)


def explain(job: ModelJob, point: pd.DataFrame, result: PlacementResult, workloads: dict[int, Workload] | None = None,
            layers: LayerScheduler | None = None) -> Explanation:
    """The breakdown of `result` (a placement found on `point`) from the same latencies and cost model that timed it:
    `layers`, the schedules its evaluation made (evaluate_scheduled, ModelEvaluator.layers), or the point's scheduled
    afresh as far as its strategy reads them."""
    workloads = workloads or load_workloads(job)
    layers = layers or layer_latencies(job, point, workloads, job.network)
    return explanation(layers, placement_inputs(job, point, workloads, job.network), result, point, workloads, job.network)
