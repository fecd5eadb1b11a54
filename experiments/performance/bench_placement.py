"""Benchmark: the placement DP on Llama-2-7B and GPT-3 175B, 1024 and 16,384 devices, fed by the phaze pipeline.

    python -m experiments.performance.bench_placement [--quick] [--solve]      (from the repository root)

Inputs are the pipeline's own: the workload stage's extracted graphs (phaze.pipeline.load_workloads,
cached under cfg.cache_dir), costed on the TPUv4-like point (hw=tpuv4) and list-scheduled per layer
(phaze.pipeline.layer_latencies), then phaze.pipeline.placement_input. An entry whose list schedule
is within schedule.mip_gap of the schedule's lower bound holds that list schedule (as schedule_layer
would return it); the others hold the lower bound, no ILP run. That changes the numbers the DP reads,
not the work it does, so it is enough to time the DP, but the optima printed are those of the
bounds. --solve runs the layer ILP on those entries first (solve_all, cached under
schedule.cache_dir): on this 2-core host the DGX H100 cases' ILPs ran into their 60 s limit and the
run did not finish in 9 minutes.

Networks: PHAZE's flat 4 GiB/s one (cluster=phaze_1024 with node_size = devices) and DGX H100's two
levels (cluster=dgx_h100: 8 GPUs per node on NVLink, InfiniBand across), each at cluster.devices =
1024 and 16,384. The global batch stays PHAZE's 4096 sequences at both sizes: the DP needs only that
mbs divides it (and takes the data-parallel degrees d dividing B / mbs, d <= devices).

Prints, in one run: a table of DP seconds per optimize() call for each (model, devices, network),
with one TP width per pipeline and with PHAZE's stage-input recompute checkpoints (the default is
Megatron-LM's per-layer ones); each case's optimum and the expert placement; the growth of DP time
1024 -> 16,384 devices; and the ratio of the plain-Python reference to the Numba DP on Llama-2-7B /
1024 devices / flat network, kernel to kernel on the same unpruned work and end to end
(reference.optimize is unpruned and solves every d apart, so it runs only on that case, with one TP
width per pipeline). Target: Python / Numba >= 50x.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np

from phaze.config import compose_config, model_job
from phaze.cost.network import Network
from phaze.hardware import enumerate_space
from phaze.pipeline import layer_latencies, load_workloads, placement_input
from phaze.placement import evaluate_fixed, optimize, reference, warm_up
from phaze.placement.solve import Config, Group, chain_arrays, kernel_fronts

MODELS = ("llama2", "megatron_gpt3_175b")
DEVICE_COUNTS = (1024, 16384)
"""PHAZE's cluster (docs/phaze-reference.md §10) and 16x it (issue 5's scale case)."""
FLAT, HIERARCHICAL = "flat 4 GiB/s", "DGX H100 8/node"
CLUSTERS = {FLAT: "phaze_1024", HIERARCHICAL: "dgx_h100"}
HW = "tpuv4"
REPEATS = 3
RATIO_TARGET = 50
"""Issue 5: Numba DP >= 50x the plain-Python reference."""
KERNEL_FRONT_CAPACITY = 256
"""Front capacity of the kernel run the ratio times: large enough that no cell of this case overflows."""


def cluster_overrides(network: str, devices: int) -> list[str]:
    """Overrides for one network at `devices`; the flat one keeps every device in one node."""
    out = [f"cluster={CLUSTERS[network]}", f"cluster.devices={devices}"]
    if network == FLAT:
        out.append(f"cluster.node_size={devices}")
    return out


def timed(fn, repeats: int):
    """fn's last result and its mean wall time over `repeats` calls."""
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, float(np.mean(times))


def describe(result) -> str:
    """One line: the strategy and its time, throughput, MFU and memory."""
    if result is None:
        return "nothing fits"
    st = result.strategy
    tp = st.tp_per_stage if st.tp_per_stage and len(set(st.tp_per_stage)) > 1 else st.tp
    return (f"pp={st.pp} dp={st.dp} tp={tp} mbs={st.mbs} rc={st.recompute} devices={st.devices_used} "
            f"t/batch={result.time_per_batch_s:.2f}s {result.throughput_seq_s:.1f} seq/s MFU={result.mfu:.3f} "
            f"mem={result.memory_per_device_bytes / 2**30:.1f}GiB")


def pipeline_input(name: str, network_name: str, devices: int, workloads, solve: bool):
    """The PlacementInput of one case from the pipeline (ILP-scheduled layers if `solve`), its config, and the latency stage's counts."""
    cfg = compose_config(f"model={name}", f"hw={HW}", *cluster_overrides(network_name, devices))
    point = enumerate_space(cfg.hw)
    network = Network.from_cfg(cfg.cluster)
    t0 = time.perf_counter()
    lat = layer_latencies(model_job(cfg), point, workloads, network)
    lat.listed_all()
    entries = sum(int(np.isfinite(v).sum()) for fields in lat.values.values() for f, v in fields.items() if f in ("fwd_s", "bwd_s"))
    over_gap = len(lat.pending)
    values = lat.solve_all() if solve else lat.values
    note = f"{time.perf_counter() - t0:.1f} s, {over_gap} of {entries} " + (f"by ILP ({lat.n_solved} solved)" if solve else "lower bounds")
    return placement_input(model_job(cfg), point, workloads, network, values), cfg, note


def scale_table(repeats: int, solve: bool) -> tuple[dict, dict]:
    """Time optimize() on every case; print the table and each case's optima. Returns the inputs and DP seconds."""
    rows, notes, inputs, dp_seconds = [], [], {}, {}
    for name in MODELS:
        t0 = time.perf_counter()
        workloads = load_workloads(model_job(compose_config(f"model={name}", f"hw={HW}")))
        print(f"{name}: workloads (mbs {sorted(workloads)}) loaded or extracted in {time.perf_counter() - t0:.1f} s")
        for devices in DEVICE_COUNTS:
            for net_name in CLUSTERS:
                inp, cfg, lat_note = pipeline_input(name, net_name, devices, workloads, solve)
                inputs[(name, devices, net_name)] = inp
                stage_inp = dataclasses.replace(inp, recompute_granularity="stage")
                result, secs = timed(lambda: optimize(inp), repeats)
                uniform, secs_uniform = timed(lambda: optimize(inp, per_stage_tp=False), repeats)
                stage_result, secs_stage = timed(lambda: optimize(stage_inp), repeats)
                dp_seconds[(name, devices, net_name)] = secs
                rows.append(f"| {name} | {devices:,} | {net_name} | {inp.num_parts} | {lat_note} | {secs:.3f} | "
                            f"{secs_uniform:.3f} | {secs_stage:.3f} |")
                e = cfg.model.expert
                notes.append(f"{name} D={devices} {net_name}:")
                notes.append(f"    DP optimum        {describe(result)}")
                notes.append(f"    one width / pipe  {describe(uniform)}")
                notes.append(f"    stage checkpoints {describe(stage_result)}")
                for rc in (False, True):
                    expert = evaluate_fixed(inp, e.dp, e.pp, e.tp, 1, rc)
                    notes.append(f"    expert {e.pp}x{e.dp}x{e.tp} rc={rc}  "
                                 + (describe(expert) if expert.feasible else f"infeasible: {expert.reason[:90]}"))
    print("\n| model | devices | network | parts | latency stage (s; entries over the gap) | DP s/call | one TP width / pipeline s/call | stage checkpoints s/call |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n" + "\n".join(notes))
    return inputs, dp_seconds


def ratio_to_reference(inp, repeats: int) -> None:
    """Plain-Python reference vs Numba on one case: the kernel on the same unpruned work, then optimize() end to end."""
    config = Config(vi=0, recompute="full", zero=0)
    k_max = min(inp.devices, int(inp.tp_values.max()) * inp.num_parts)
    chain = chain_arrays(inp, config.vi, config.recompute, tuple(range(len(inp.tp_values))), True)
    group = Group(cap=inp.num_parts + 1, replicas=((1, inp.global_batch, k_max),), k_max=k_max)
    ((loads, _, counts, _), _), secs_kernel = timed(
        lambda: kernel_fronts(chain, inp, config, group, k_max, np.inf, KERNEL_FRONT_CAPACITY), REPEATS)
    fronts, secs_py = timed(lambda: reference.pareto_fronts(inp, config, chain, group, k_max), 1)
    assert int(counts.sum()) == sum(len(points) for points in fronts.values())
    print(f"kernel ratio, same unpruned work (llama2 D=1024 {FLAT}, mbs=1, recompute, all widths, k<={k_max}): "
          f"Python {secs_py:.2f} s, Numba {secs_kernel:.4f} s, Python / Numba = {secs_py / secs_kernel:.0f}x "
          f"(target >= {RATIO_TARGET}x)")

    fast, secs_fast = timed(lambda: optimize(inp, per_stage_tp=False), repeats)
    slow, secs_slow = timed(lambda: reference.optimize(inp, per_stage_tp=False), 1)
    assert fast.time_per_batch_s == slow.time_per_batch_s
    print(f"end-to-end ratio (llama2 D=1024 {FLAT}, one TP width per pipeline, every mbs and recompute): Python reference "
          f"{secs_slow:.2f} s, Numba optimize {secs_fast:.4f} s, Python / Numba = {secs_slow / secs_fast:.0f}x "
          f"(target >= {RATIO_TARGET}x), same optimum {fast.time_per_batch_s:.4f} s "
          f"(the reference solves each d unpruned; optimize() groups the d and prunes)")


def main(argv: list[str]) -> None:
    repeats = 1 if "--quick" in argv else REPEATS
    t0 = time.perf_counter()
    warm_up()
    print(f"warm-up (compile or load the Numba cache): {time.perf_counter() - t0:.2f} s")
    inputs, dp_seconds = scale_table(repeats, solve="--solve" in argv)
    for name in MODELS:
        for net_name in CLUSTERS:
            grow = dp_seconds[(name, DEVICE_COUNTS[1], net_name)] / dp_seconds[(name, DEVICE_COUNTS[0], net_name)]
            print(f"growth {name} {net_name}: DP time at {DEVICE_COUNTS[1]:,} / at {DEVICE_COUNTS[0]:,} devices = {grow:.2f}x")
    ratio_to_reference(inputs[(MODELS[0], DEVICE_COUNTS[0], FLAT)], repeats)


if __name__ == "__main__":
    main(sys.argv[1:])
