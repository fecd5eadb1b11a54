"""Benchmark: costing every operator of a Llama-2-7B layer (fwd + bwd, TP 1/2/4/8) on every point of
PHAZE's space, vectorised, against the plain-Python per-op loop of phaze.cost.reference.

    python -m experiments.performance.bench_cost [--quick]

Prints, in one run: the space enumeration time; the vectorised costing time and throughput
(ops x points per second); the throughput of the plain-Python loop measured on a sample of points;
their ratio. --quick costs TP 1 only and samples fewer points for the loop.

Then, for the GPU presets, their peak and achievable (derated) rates and what derating does to the
same Llama-2-7B layer at TP 1: one operator at a time, as on one CUDA stream (hw.inter_op_parallel false).
"""

from __future__ import annotations

import sys
import time

from phaze.config import compose_config
from phaze.cost import Network, op_latencies
from phaze.cost.reference import op_latency
from phaze.hardware import Accelerator, enumerate_space
from phaze.hardware.derating import DERATING_COLUMNS, FP8_COLUMN
from phaze.schema import HwCfg
from phaze.workload.extract import extract_workload

LOOP_POINTS = 200
"""Points the plain-Python loop costs (all ops of each graph on each): enough for a stable rate."""
GPU_PRESETS = ("a100", "h100")
IDEAL = {name: getattr(HwCfg(), name) for name in DERATING_COLUMNS if name != FP8_COLUMN}
"""Derating values of an ideal roofline (the schema's defaults): full peak rates, no per-operator overhead, no CTA
tiles, no power-limited clock; the FP8 rate is left as the preset has it (the layer is bf16)."""


def derating_report(layer, network) -> None:
    """Peak and achievable rates of each GPU preset, and the TP-1 `layer`'s serial time ideal vs derated."""
    for name in GPU_PRESETS:
        point = enumerate_space(compose_config(f"hw={name}").hw)
        acc = Accelerator.from_row(point.iloc[0])
        print(f"hw={name}: matmul {acc.peak_matmul_flops / 1e12:.1f} -> {acc.achievable_matmul_flops / 1e12:.1f} TFLOP/s "
              f"(x{acc.matmul_efficiency} / {acc.matmul_sustained_slowdown} back to back), HBM {acc.hbm_bytes_s / 1e9:.0f} -> {acc.achievable_hbm_bytes_s / 1e9:.1f} GB/s "
              f"(x{acc.memory_efficiency}), {acc.op_overhead_s * 1e6:.1f} us per operator")
        ideal_point = point.assign(**IDEAL)
        for direction, graph in (("fwd", layer.fwd), ("bwd", layer.bwd)):
            ops = graph.without_views().ops
            real = op_latencies(ops, point, network, 1).parallel_s[:, 0].sum()
            ideal = op_latencies(ops, ideal_point, network, 1).parallel_s[:, 0].sum()
            overhead = len(ops) * acc.op_overhead_s
            print(f"  layer {direction}, {len(ops)} operators: ideal {ideal * 1e3:.3f} ms, derated {real * 1e3:.3f} ms "
                  f"(x{real / ideal:.3f}; per-operator overhead {overhead * 1e3:.3f} ms of it)")


def main(quick: bool) -> None:
    cfg = compose_config()
    tp_widths = (1,) if quick else tuple(cfg.train.tp_widths)
    workload = extract_workload(cfg.model, mbs=1, bytes_per_elem=cfg.train.bytes_per_elem, tp_widths=tp_widths,
                                cache_dir=cfg.cache_dir)
    network = Network.from_cfg(cfg.cluster)

    start = time.perf_counter()
    points = enumerate_space(cfg.hw)
    enumerate_s = time.perf_counter() - start
    print(f"enumerate_space({cfg.hw.name}): {len(points):,} points in {enumerate_s:.2f} s")

    graphs = [(tp, g) for tp in workload.tp_widths for part in [workload.part(tp, "layer")] for g in (part.fwd, part.bwd)]
    n_ops = sum(len(g) for _, g in graphs)
    start = time.perf_counter()
    for tp, graph in graphs:
        op_latencies(graph.ops, points, network, tp)
    vector_s = time.perf_counter() - start
    vector_rate = n_ops * len(points) / vector_s
    print(f"vectorised: {n_ops} ops (layer fwd+bwd, TP {list(workload.tp_widths)}) x {len(points):,} points "
          f"in {vector_s:.2f} s = {vector_rate:,.0f} op-points/s")

    sample = points.sample(LOOP_POINTS // (4 if quick else 1), random_state=0)
    accs = [Accelerator.from_row(row) for _, row in sample.iterrows()]
    records = [(tp, graph.ops.to_dict("records")) for tp, graph in graphs]
    start = time.perf_counter()
    for tp, ops in records:
        for acc in accs:
            for op in ops:
                op_latency(op, acc, network, tp)
    loop_s = time.perf_counter() - start
    loop_rate = n_ops * len(accs) / loop_s
    print(f"plain-Python loop: {n_ops} ops x {len(accs)} points in {loop_s:.2f} s = {loop_rate:,.0f} op-points/s")
    print(f"speed-up of the vectorised model over the loop: {vector_rate / loop_rate:,.0f}x "
          f"(the loop would take {n_ops * len(points) / loop_rate:,.0f} s for the whole space)")
    derating_report(workload.part(1, "layer"), network)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])
