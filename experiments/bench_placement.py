"""Benchmark: the placement DP on Llama-2-7B and GPT-3 175B, 1024 and 16,384 devices.

    python -m experiments.bench_placement [--quick]      (from the repository root)

Prints, in one run: DP seconds per optimize() call for each (model, devices, network), with the
chosen strategy, the best single-width pipeline, the optimum under PHAZE's stage-input recompute
checkpoints (the default is Megatron-LM's per-layer ones) and the expert placement; the growth of
DP time 1024 -> 16,384 devices; the DP time with per-layer over stage checkpoints; the ratio of the
plain-Python reference to the Numba DP on Llama-2-7B / 1024 devices, kernel to kernel on the same
unpruned work and end to end.

INPUTS ARE CLOSED-FORM STAND-INS, not the phaze pipeline: per-layer forward FLOPs
24 b s h^2 + 4 b s^2 h (Narayanan et al. 2021, SC'21, eq. 2 per layer), backward 2x, run at
MATMUL_EFFICIENCY of a TPUv4-like peak; weights 12 h^2 per layer; saved activations
s b h (10 + 24/t + 5 a s / (h t)) bytes per layer (Korthikanti et al. 2022, "Reducing Activation
Recomputation", eq. 2, TP without sequence parallelism); LM head 2 b s h V FLOPs; Megatron TP
all-reduces (2 forward, 2 backward per layer). Networks: PHAZE's flat 4 GiB/s one and an assumed
two-level one. They will be replaced by the workload, cost and schedule stages' real numbers.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np

from phaze.cost.network import Network
from phaze.placement import PartCosts, PlacementInput, evaluate_fixed, optimize, reference, warm_up
from phaze.placement.dp import pareto_fronts
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.placement.solve import chain_arrays
from tests.conftest import compose_cfg

PEAK_FLOPS_S = 8 * 128 * 128 * 2 * 1.05e9
"""TPUv4-like reference chip: 8 tensor cores of 128x128 MACs at 1.05 GHz (DESIGN.md §3) = 275 TFLOP/s."""
MATMUL_EFFICIENCY = 0.5
"""Stated assumption: fraction of peak the matmuls reach."""
HBM_BYTES_S = 1.2e12
"""TPUv4 HBM bandwidth (Jouppi et al. 2023, ISCA, Table 1: 1200 GB/s), for the memory-bound embedding."""
HBM_BYTES = 32 * 2**30
"""TPUv4 HBM capacity (same table)."""
TOKEN_ID_BYTES = 4
LOGIT_BYTES = 4
"""Korthikanti et al. 2022 count the logits of the loss at 4 bytes (fp32 softmax)."""
LOSS_BYTES = 4
DEVICE_COUNTS = (1024, 16384)
NODE_SIZE, NODE_INTRA_GBPS, NODE_INTER_GBPS = 8, 300.0, 25.0
"""Stated assumption for the two-level network: DGX-like nodes of 8 chips, NVLink-class 300 GB/s
inside a node, 200 Gb/s-class 25 GB/s per chip across nodes."""
REPEATS = 3


def networks(cluster, devices: int) -> dict[str, Network]:
    """PHAZE's flat network (conf/cluster/phaze_1024.yaml at any size) and an assumed two-level one."""
    gb = 1e9
    return {
        "flat 4 GiB/s": Network(devices, devices, cluster.intra_node_gbps * gb, cluster.inter_node_gbps * gb, cluster.link_latency_s),
        "8/node 300|25 GB/s": Network(devices, NODE_SIZE, NODE_INTRA_GBPS * gb, NODE_INTER_GBPS * gb),
    }


def closed_form_input(model, train, net: Network) -> PlacementInput:
    """PlacementInput for a decoder-only transformer from closed forms (see the module docstring).

    Tied embeddings (GPT-3) are counted in both the pre- and the post-part, as Megatron keeps a
    copy on the first and the last pipeline stage.
    """
    h, a, s, v, n_layers = model.hidden_size, model.num_heads, model.seq_len, model.vocab_size, model.num_layers
    bpe = train.bytes_per_elem
    tps = np.array([t for t in train.tp_widths if t <= model.max_tp])
    mbs = np.array(train.mbs)
    b, t = np.meshgrid(mbs.astype(float), tps.astype(float), indexing="ij")  # [mbs, tp]
    rate = PEAK_FLOPS_S * MATMUL_EFFICIENCY
    act = s * b * h * bpe  # one activation between layers, replicated on each TP rank
    tp_ar = np.vectorize(lambda nbytes, width: float(net.allreduce_s(nbytes, int(width))))(act, t)
    layer_flops = (24 * b * s * h**2 + 4 * b * s**2 * h) / t
    layer = PartCosts(
        fwd_s=layer_flops / rate + 2 * tp_ar, bwd_s=2 * layer_flops / rate + 2 * tp_ar,
        tp_comm_fwd_s=2 * tp_ar, tp_comm_bwd_s=2 * tp_ar,
        param_bytes=12 * h**2 * bpe / t, saved_bytes=s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
        input_bytes=act, output_bytes=act,
    )
    lookup_s = 2 * act / HBM_BYTES_S  # read the rows, write the activation
    token_ids = TOKEN_ID_BYTES * s * b
    pre = PartCosts(
        fwd_s=lookup_s + tp_ar, bwd_s=lookup_s + tp_ar, tp_comm_fwd_s=tp_ar, tp_comm_bwd_s=tp_ar,
        param_bytes=v * h * bpe / t, saved_bytes=token_ids, input_bytes=token_ids, output_bytes=act,
    )
    head_flops = 2 * b * s * h * v / t
    post = PartCosts(
        fwd_s=head_flops / rate, bwd_s=2 * head_flops / rate + tp_ar, tp_comm_fwd_s=np.zeros_like(tp_ar), tp_comm_bwd_s=tp_ar,
        param_bytes=v * h * bpe / t, saved_bytes=act + LOGIT_BYTES * s * b * v / t,
        input_bytes=act, output_bytes=np.full_like(act, LOSS_BYTES),
    )
    flops_per_seq = 3 * (n_layers * (24 * s * h**2 + 4 * s**2 * h) + 2 * s * h * v)
    return PlacementInput.from_parts(
        pre, layer, post, n_layers, mbs_values=mbs, tp_values=tps, devices=net.devices, global_batch=train.global_batch,
        seq_len=s, hbm_bytes=HBM_BYTES, network=net, optimizer=train.optimizer, bytes_per_elem=bpe,
        model_flops_per_seq=flops_per_seq, peak_flops_s=PEAK_FLOPS_S,
    )


def timed(fn, repeats: int):
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, float(np.mean(times))


def describe(result) -> str:
    if result is None:
        return "nothing fits"
    st = result.strategy
    return (f"pp={st.pp} dp={st.dp} tp={st.tp} mbs={st.mbs} rc={st.recompute} devices={st.devices_used} "
            f"t/batch={result.time_per_batch_s:.2f}s {result.throughput_seq_s:.1f} seq/s MFU={result.mfu:.3f} "
            f"mem={result.memory_per_device_bytes / 2**30:.1f}GiB")


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    repeats = 1 if quick else REPEATS
    t0 = time.perf_counter()
    warm_up()
    print(f"warm-up (compile or load the Numba cache): {time.perf_counter() - t0:.2f} s")
    cfgs = {name: compose_cfg(f"model={name}") for name in ("llama2", "megatron_gpt3_175b")}
    dp_seconds, stage_seconds = {}, {}
    for name, cfg in cfgs.items():
        for devices in DEVICE_COUNTS:
            for net_name, net in networks(cfg.cluster, devices).items():
                inp = closed_form_input(cfg.model, cfg.train, net)
                stage_inp = dataclasses.replace(inp, recompute_granularity="stage")
                result, secs = timed(lambda: optimize(inp), repeats)
                uniform, secs_uniform = timed(lambda: optimize(inp, per_stage_tp=False), repeats)
                stage_result, secs_stage = timed(lambda: optimize(stage_inp), repeats)
                dp_seconds[(name, devices, net_name)] = secs
                stage_seconds[(name, devices, net_name)] = secs_stage
                e = cfg.model.expert
                print(f"{name} D={devices} {net_name}, {inp.num_parts} parts: DP {secs:.3f} s/call "
                      f"(one TP width per pipeline: {secs_uniform:.3f} s/call; stage checkpoints: {secs_stage:.3f} s/call)")
                print(f"    DP optimum        {describe(result)}")
                print(f"    one width / pipe  {describe(uniform)}")
                print(f"    stage checkpoints {describe(stage_result)}")
                for rc in (False, True):
                    expert = evaluate_fixed(inp, e.dp, e.pp, e.tp, 1, rc)
                    print(f"    expert {e.pp}x{e.dp}x{e.tp} rc={rc}  "
                          + (describe(expert) if expert.feasible else f"infeasible: {expert.reason[:90]}"))
    for name in cfgs:
        for net_name in networks(cfgs[name].cluster, 1).keys():
            grow = dp_seconds[(name, 16384, net_name)] / dp_seconds[(name, 1024, net_name)]
            print(f"growth {name} {net_name}: DP time at 16,384 / at 1024 devices = {grow:.2f}x")
    ratios = np.array([dp_seconds[key] / stage_seconds[key] for key in dp_seconds])
    print(f"DP time with per-layer / with stage checkpoints, over the {len(ratios)} cases above: "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (geometric mean {np.exp(np.log(ratios).mean()):.2f}x)")

    cfg = cfgs["llama2"]
    inp = closed_form_input(cfg.model, cfg.train, networks(cfg.cluster, 1024)["flat 4 GiB/s"])
    mi, rc, cap, k_max = 0, True, inp.num_parts + 1, min(inp.devices, int(inp.tp_values.max()) * inp.num_parts)
    chain = chain_arrays(inp, mi, tuple(range(len(inp.tp_values))), True)
    mult = state_bytes_per_param_byte(inp.optimizer, inp.bytes_per_elem)
    q_max = min(inp.num_parts, k_max)
    rep_k, rep_m = np.array([k_max]), np.array([inp.global_batch])
    (loads, _, counts, ok), secs_kernel = timed(lambda: pareto_fronts(*chain.args(), mult, float(inp.hbm_bytes), rc, inp.per_layer_recompute, cap,
                                                                      q_max, k_max, rep_k, rep_m, np.inf, 256), REPEATS)
    fronts, secs_py = timed(lambda: reference.pareto_fronts(inp, mi, inp.tp_values.tolist(), True, rc, cap, k_max), 1)
    assert ok and len(loads) == sum(len(points) for points in fronts.values())
    print(f"kernel ratio, same unpruned work (llama2 D=1024, mbs=1, recompute, all widths, k<={k_max}): "
          f"Python {secs_py:.2f} s, Numba {secs_kernel:.4f} s, Python / Numba = {secs_py / secs_kernel:.0f}x")

    fast, secs_fast = timed(lambda: optimize(inp, per_stage_tp=False), repeats)
    slow, secs_slow = timed(lambda: reference.optimize(inp, per_stage_tp=False), 1)
    assert fast.time_per_batch_s == slow.time_per_batch_s
    print(f"end-to-end ratio (llama2 D=1024, one TP width per pipeline, every mbs and recompute): Python reference "
          f"{secs_slow:.2f} s, Numba optimize {secs_fast:.4f} s, Python / Numba = {secs_slow / secs_fast:.0f}x, same "
          f"optimum {fast.time_per_batch_s:.4f} s (the reference solves each d unpruned; optimize() groups the d and prunes)")


if __name__ == "__main__":
    main(sys.argv[1:])
