"""Real H100 kernels against the `hw=h100` preset's predictions: bf16 matmuls and vector operators of transformer layers.

    python -m experiments.validation.gpu_kernel_check measure --out DIR        # on the GPU (torch only): DIR/h100_kernels.csv
    python -m experiments.validation.gpu_kernel_check sustained --out DIR      # on the GPU: DIR/h100_sustained.csv (back to back)
    python -m experiments.validation.gpu_kernel_check fp8 --out DIR            # on the GPU: DIR/h100_fp8.csv (bf16 and FP8 GEMMs)
    python -m experiments.validation.gpu_kernel_check compare --measured CSV   # here: experiments/results/gpu_kernel_check.{md,json}

`measure` times each case with CUDA events, the 50 MB L2 cleared before every repetition (training's operands come
from HBM), and records the median. `compare` builds the same operator as a row of the workload tables
(phaze.workload.graph.OP_COLUMNS, as the extraction writes it) and prices it with phaze.cost.op_latencies on the
`hw=h100` point, all cores (a GPU runs one kernel over every SM), launch overhead included. The cases are the GEMMs of
Llama-2-7B and GPT-3 175B layers at tensor-parallel widths 1 to 8, the vector operators between them, and the
mixtures of experts' GEMMs: DeepSeek-V2-Lite's multi-head latent attention projections and the grouped expert GEMMs
of Mixtral 8x7B and DeepSeek-V2-Lite (one batched matmul over a device's local experts, each on its balanced share of
the routed tokens, as phaze.workload.experts traces them).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
"""experiments/data/ (found from this file: `measure` runs where only torch is installed, without the harness)."""
BF16_BYTES = 2
L2_FLUSH_BYTES = 256 * 2**20
"""More than the H100's 50 MB L2, written before each repetition so that no operand is left on chip."""
REPEATS = 20
WARMUP = 5

# (name, tokens, hidden, ffn): the layers whose GEMMs are timed (Llama-2-7B: SwiGLU, 11008; GPT-3 175B: 4 x 12288).
LAYERS = (("llama2_7b", 4096, 4096, 11008), ("gpt3_175b", 2048, 12288, 49152))
TP_WIDTHS = (1, 2, 4, 8)
VECTOR_TOKENS = (4096, 16384)


# (name, tokens, hidden, experts, experts per token, expert FFN width): the MoE layers whose expert GEMMs are timed
# (conf/model/mixtral_8x7b.yaml, conf/model/deepseek_v2_lite.yaml; 4096 tokens: one sequence).
MOE_LAYERS = (("mixtral_8x7b", 4096, 4096, 8, 2, 14336), ("deepseek_v2_lite", 4096, 2048, 64, 6, 1408))
EXPERT_PARALLEL_WIDTHS = (1, 8)
# DeepSeek-V2-Lite's attention GEMMs (16 heads; query/key 128 + 64 rotary wide, values 128, key/value latent 512).
MLA_GEMMS = (("q", 2048, 16 * 192), ("kv_down", 2048, 512 + 64), ("kv_up", 512, 16 * 256), ("out", 16 * 128, 2048))


def matmul_cases() -> list[dict]:
    """QKV, output projection, MLP up and down GEMMs of each layer at each TP width: C[m, n] = A[m, k] @ B[k, n]; the
    MLA projections; the grouped expert GEMMs, C[b, m, n] = A[b, m, k] @ B[b, k, n] over the b = E / ep local
    experts, m = T k ep / E rows each (balanced routing), gate and up projections fused (2f wide) and down."""
    cases = []
    for name, tokens, hidden, ffn in LAYERS:
        up = 2 * ffn if name.startswith("llama") else ffn
        for tp in TP_WIDTHS:
            for gemm, k, n in (("qkv", hidden, 3 * hidden // tp), ("proj", hidden // tp, hidden), ("up", hidden, up // tp),
                               ("down", ffn // tp, hidden)):
                cases.append({"case": f"{name}_tp{tp}_{gemm}", "op": "mm", "b": 1, "m": tokens, "k": k, "n": n})
    for gemm, k, n in MLA_GEMMS:
        cases.append({"case": f"deepseek_v2_lite_mla_{gemm}", "op": "mm", "b": 1, "m": 4096, "k": k, "n": n})
    for name, tokens, hidden, experts, per_token, ffn in MOE_LAYERS:
        for ep in EXPERT_PARALLEL_WIDTHS:
            local, rows = experts // ep, tokens * per_token * ep // experts
            for gemm, k, n in (("experts_up", hidden, 2 * ffn), ("experts_down", ffn, hidden)):
                cases.append({"case": f"{name}_ep{ep}_{gemm}", "op": "bmm", "b": local, "m": rows, "k": k, "n": n})
    return cases


def vector_cases() -> list[dict]:
    """Vector operators on [tokens, hidden] activations (Llama-2-7B's 4096 and its 11008-wide MLP)."""
    cases = []
    for tokens in VECTOR_TOKENS:
        for width in (4096, 11008):
            for op in ("add", "mul", "silu", "gelu"):
                cases.append({"case": f"{op}_{tokens}x{width}", "op": op, "m": tokens, "k": 0, "n": width})
        for op in ("native_layer_norm", "_softmax"):
            cases.append({"case": f"{op}_{tokens}x4096", "op": op, "m": tokens, "k": 0, "n": 4096})
    return cases


def cases() -> list[dict]:
    return matmul_cases() + vector_cases()


def measure(out: Path) -> None:
    """Median GPU time of every case on this machine's first GPU (torch only: runs where phaze is not installed)."""
    import torch

    dev = torch.device("cuda")
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=dev)
    rows = []
    for c in cases():
        if c["op"] == "mm":
            a = torch.randn(c["m"], c["k"], device=dev, dtype=torch.bfloat16)
            b = torch.randn(c["k"], c["n"], device=dev, dtype=torch.bfloat16)
            run = lambda a=a, b=b: torch.mm(a, b)  # noqa: E731
        elif c["op"] == "bmm":
            a = torch.randn(c["b"], c["m"], c["k"], device=dev, dtype=torch.bfloat16)
            b = torch.randn(c["b"], c["k"], c["n"], device=dev, dtype=torch.bfloat16)
            run = lambda a=a, b=b: torch.bmm(a, b)  # noqa: E731
        else:
            x = torch.randn(c["m"], c["n"], device=dev, dtype=torch.bfloat16)
            y = torch.randn(c["m"], c["n"], device=dev, dtype=torch.bfloat16)
            w = torch.ones(c["n"], device=dev, dtype=torch.bfloat16)
            run = {
                "add": lambda: x + y, "mul": lambda: x * y, "silu": lambda: torch.nn.functional.silu(x),
                "gelu": lambda: torch.nn.functional.gelu(x), "_softmax": lambda: torch.softmax(x, dim=-1),
                "native_layer_norm": lambda: torch.nn.functional.layer_norm(x, (c["n"],), w, w),
            }[c["op"]]
        rows.append({**c, "measured_s": _median_time_s(torch, run, flush)})
        print(rows[-1], flush=True)
    out.mkdir(parents=True, exist_ok=True)
    header = ["case", "op", "b", "m", "k", "n", "measured_s"]
    lines = [",".join(header)] + [",".join(str(r[h]) for h in header) for r in rows]
    (out / "h100_kernels.csv").write_text("\n".join(lines) + "\n")
    props = torch.cuda.get_device_properties(0)
    (out / "h100_device.txt").write_text(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}\n")


SUSTAINED_S = 3.0
"""How long `sustained` keeps one GEMM running back to back: long enough for the clock to settle under the power limit."""
SUSTAINED_CASES = ("llama2_7b_tp1_up", "llama2_7b_tp8_qkv", "gpt3_175b_tp1_up", "gpt3_175b_tp8_up")


def sustained(out: Path) -> None:
    """Per GEMM of SUSTAINED_CASES: the median time of one kernel after an L2 clear (as `measure`) and the mean time
    of a kernel run back to back for SUSTAINED_S, as a training step runs them (torch only)."""
    import torch

    dev = torch.device("cuda")
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=dev)
    lines = ["case,m,k,n,single_s,sustained_s"]
    for c in (c for c in matmul_cases() if c["case"] in SUSTAINED_CASES):
        a = torch.randn(c["m"], c["k"], device=dev, dtype=torch.bfloat16)
        b = torch.randn(c["k"], c["n"], device=dev, dtype=torch.bfloat16)
        run = lambda a=a, b=b: torch.mm(a, b)  # noqa: E731
        lines.append(f"{c['case']},{c['m']},{c['k']},{c['n']},{_median_time_s(torch, run, flush)},{_back_to_back_s(torch, run)}")
        print(lines[-1], flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "h100_sustained.csv").write_text("\n".join(lines) + "\n")


def _median_time_s(torch, run, flush) -> float:
    """Median of REPEATS timed runs (CUDA events), the L2 cleared before each, after WARMUP untimed ones."""
    for _ in range(WARMUP):
        run()
    times = []
    for _ in range(REPEATS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def _back_to_back_s(torch, run) -> float:
    """Mean time of one run repeated back to back for SUSTAINED_S (the clock then sits at the power limit)."""
    import time

    time.sleep(2.0)  # let the chip cool from the previous case
    n, t0 = 0, time.perf_counter()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    while time.perf_counter() - t0 < SUSTAINED_S:
        for _ in range(10):
            run()
        n += 10
        torch.cuda.synchronize()
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / n


def fp8(out: Path) -> None:
    """Each dense GEMM of `measure` in bf16 and in FP8 (E4M3 operands, per-tensor scales, bf16 output:
    torch._scaled_mm, the cuBLASLt FP8 GEMM Transformer Engine also calls), alone after an L2 clear; the
    SUSTAINED_CASES again back to back in both (torch only)."""
    import torch

    dev = torch.device("cuda")
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=dev)
    scale = torch.tensor(1.0, device=dev)
    lines = ["case,m,k,n,bf16_s,fp8_s,bf16_sustained_s,fp8_sustained_s"]
    for c in (c for c in matmul_cases() if c["op"] == "mm"):
        a = torch.randn(c["m"], c["k"], device=dev, dtype=torch.bfloat16)
        b = torch.randn(c["k"], c["n"], device=dev, dtype=torch.bfloat16)
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt's FP8 GEMM takes it
        run16 = lambda a=a, b=b: torch.mm(a, b)  # noqa: E731
        run8 = lambda a8=a8, b8=b8: torch._scaled_mm(a8, b8, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)  # noqa: E731
        held = c["case"] in SUSTAINED_CASES
        lines.append(",".join(str(v) for v in (
            c["case"], c["m"], c["k"], c["n"], _median_time_s(torch, run16, flush), _median_time_s(torch, run8, flush),
            _back_to_back_s(torch, run16) if held else "", _back_to_back_s(torch, run8) if held else "")))
        print(lines[-1], flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "h100_fp8.csv").write_text("\n".join(lines) + "\n")


VECTOR_KINDS = {"add": "elementwise", "mul": "elementwise", "silu": "elementwise", "gelu": "elementwise",
                "native_layer_norm": "norm", "_softmax": "softmax"}


def op_row(c: dict) -> dict:
    """The case as the extraction would write its operator (OP_COLUMNS; bf16 operands and results)."""
    m, k, n = int(c["m"]), int(c["k"]), int(c["n"])
    b = int(c.get("b", 1) or 1)
    if c["op"] == "mm":
        return {"name": c["case"], "target": "mm", "kind": "matmul", "out_shape": (m, n), "in_shapes": ((m, k), (k, n)),
                "numel_out": m * n, "flops": 2.0 * m * k * n, "bytes_read": BF16_BYTES * (m * k + k * n),
                "bytes_written": BF16_BYTES * m * n, "mm_b": 1, "mm_m": m, "mm_k": k, "mm_n": n}
    if c["op"] == "bmm":
        return {"name": c["case"], "target": "bmm", "kind": "matmul", "out_shape": (b, m, n), "in_shapes": ((b, m, k), (b, k, n)),
                "numel_out": b * m * n, "flops": 2.0 * b * m * k * n, "bytes_read": BF16_BYTES * b * (m * k + k * n),
                "bytes_written": BF16_BYTES * b * m * n, "mm_b": b, "mm_m": m, "mm_k": k, "mm_n": n}
    two_inputs = c["op"] in ("add", "mul")
    inputs = ((m, n), (m, n)) if two_inputs else ((m, n), (n,), (n,)) if c["op"] == "native_layer_norm" else ((m, n),)
    read = sum(math.prod(s) for s in inputs) * BF16_BYTES
    return {"name": c["case"], "target": c["op"], "kind": VECTOR_KINDS[c["op"]], "out_shape": (m, n), "in_shapes": inputs,
            "numel_out": m * n, "flops": float(m * n), "bytes_read": read, "bytes_written": BF16_BYTES * m * n,
            "mm_b": 0, "mm_m": 0, "mm_k": 0, "mm_n": 0}


def compare(measured_csv: Path) -> None:
    """Predicted / measured per case and by kind, written to experiments/results/gpu_kernel_check.md."""
    import numpy as np
    import pandas as pd

    from experiments.harness import write_result
    from phaze.config import compose_config, model_job
    from phaze.cost.latency import op_latencies
    from phaze.hardware import enumerate_space
    from phaze.hardware.derating import KERNEL_ALONE
    from phaze.workload.graph import NO_TRAFFIC, OP_COLUMNS

    measured = pd.read_csv(measured_csv)
    if "b" not in measured.columns:
        measured.insert(2, "b", 1)
    def op_frame(records: list[dict], fp8: bool = False) -> pd.DataFrame:
        """The cases as operator rows; FP8 GEMMs read 1-byte operands (phaze.workload.precision)."""
        frame = pd.DataFrame([op_row(c) for c in records])
        defaults = {"op_id": 0, "elem_bytes": BF16_BYTES, "fused": False, **NO_TRAFFIC}
        for col in OP_COLUMNS:
            if col not in frame.columns:
                frame[col] = defaults[col]
        frame["op_id"] = np.arange(len(frame))
        frame["fp8"] = fp8
        if fp8:
            frame["bytes_read"] = frame.bytes_read / BF16_BYTES
        return frame

    def predict(frame: pd.DataFrame, *overrides: str) -> np.ndarray:
        cfg = compose_config("hw=h100", "cluster=dgx_h100", "train=megatron", *overrides)
        return op_latencies(frame[list(OP_COLUMNS) + ["fp8"]], enumerate_space(cfg.hw), model_job(cfg).network, 1).parallel_s[:, 0]

    rows = op_frame(measured.to_dict("records"))
    predicted = predict(rows, KERNEL_ALONE)
    predicted_in_step = predict(rows)
    kind = np.where(measured.op == "bmm", "matmul (grouped experts)", rows.kind.to_numpy())
    table = measured.assign(kind=kind, gflop=rows.flops.to_numpy() / 1e9, mb_moved=(rows.bytes_read + rows.bytes_written).to_numpy() / 1e6,
                            measured_us=measured.measured_s * 1e6, predicted_us=predicted * 1e6)
    table["predicted/measured"] = table.predicted_us / table.measured_us
    table["measured TFLOP/s or GB/s"] = np.where(rows.kind.to_numpy() == "matmul", table.gflop / table.measured_us * 1e3, table.mb_moved / table.measured_us * 1e3)
    log_err = np.abs(np.log(table["predicted/measured"]))
    summary = table.assign(abs_log_error=log_err).groupby("kind").agg(
        cases=("case", "size"), median_ratio=("predicted/measured", "median"), mean_abs_log_error=("abs_log_error", "mean"),
        worst_ratio_low=("predicted/measured", "min"), worst_ratio_high=("predicted/measured", "max"))
    command = "python -m experiments.validation.gpu_kernel_check"
    device_file = measured_csv.parent / "h100_device.txt"
    device = device_file.read_text().strip() if device_file.exists() else "a GPU not recorded"
    held = measured_csv.parent / "h100_sustained.csv"
    sustained_part = []
    if held.exists():
        runs = pd.read_csv(held).set_index("case")
        in_step = pd.Series(predicted_in_step, index=table.case)
        runs = runs.assign(predicted_s=table.set_index("case").predicted_us.reindex(runs.index) * 1e-6,
                           predicted_in_step_s=in_step.reindex(runs.index))
        runs["sustained/single"] = runs.sustained_s / runs.single_s
        runs["predicted/sustained"] = runs.predicted_s / runs.sustained_s
        runs["in-step predicted/sustained"] = runs.predicted_in_step_s / runs.sustained_s
        runs[["m", "k", "n"]] = runs[["m", "k", "n"]].astype(str)
        clocks = held.parent / "h100_sustained_smi.csv"
        clock_note = ""
        if clocks.exists():
            smi = pd.read_csv(clocks, skipinitialspace=True)
            mhz = smi.iloc[:, 1].astype(str).str.split().str[0].astype(float)
            watts = smi.iloc[:, 2].astype(str).str.split().str[0].astype(float)
            busy = watts > 300
            clock_note = (f" While they ran (nvidia-smi every 250 ms, [h100_sustained_smi.csv](../data/h100_sustained_smi.csv)) the SM "
                          f"clock went from {mhz[busy].max():.0f} MHz down to {mhz[busy].min():.0f} MHz (median {mhz[busy].median():.0f}) "
                          f"at up to {watts.max():.0f} W: the 700 W power limit.")
        sustained_part = [
            "## Back to back", "",
            f"`{command} sustained`: each GEMM once after an L2 clear (median of {REPEATS}) and then back to back for "
            f"{SUSTAINED_S:.0f} s, as a training step's GEMMs follow each other ([h100_sustained.csv](../data/h100_sustained.csv))."
            + clock_note, "",
            runs[["m", "k", "n", "single_s", "sustained_s", "predicted_s", "sustained/single", "predicted/sustained",
                  "predicted_in_step_s", "in-step predicted/sustained"]].to_markdown(floatfmt=".3g"), "",
            f"`predicted_s` is one kernel alone (`{KERNEL_ALONE}`, as in the table above); `predicted_in_step_s` the preset as a "
            "training step uses it, its tensor-core steps slowed by `hw.matmul_sustained_slowdown` (conf/hw/h100.yaml: the "
            "median of the four `sustained/single` ratios here).", "",
        ]
    fp8_part = []
    fp8_csv = measured_csv.parent / "h100_fp8.csv"
    if fp8_csv.exists():
        gemms = pd.read_csv(fp8_csv)
        records = [{"case": r.case, "op": "mm", "b": 1, "m": r.m, "k": r.k, "n": r.n} for r in gemms.itertuples()]
        bf16_s = predict(op_frame(records), KERNEL_ALONE)
        fp8_s = predict(op_frame(records, fp8=True), KERNEL_ALONE)
        fp8_same_s = predict(op_frame(records, fp8=True), KERNEL_ALONE, "hw.fp8_matmul_efficiency=1")
        speedups = gemms.assign(**{"measured bf16/fp8": gemms.bf16_s / gemms.fp8_s, "predicted bf16/fp8": bf16_s / fp8_s,
                                   "at the bf16 efficiency": bf16_s / fp8_same_s,
                                   "fp8 sustained/single": gemms.fp8_sustained_s / gemms.fp8_s,
                                   "bf16 sustained/single": gemms.bf16_sustained_s / gemms.bf16_s})
        speedups[["m", "k", "n"]] = speedups[["m", "k", "n"]].astype(str)
        fp8_part = [
            "## FP8", "",
            f"`{command} fp8`: each dense GEMM above in bf16 (torch.mm) and in FP8 (torch._scaled_mm: E4M3 operands, "
            "per-tensor scales, bf16 output, the cuBLASLt FP8 GEMM Transformer Engine calls), alone after an L2 clear "
            f"(median of {REPEATS}), four of them again back to back for {SUSTAINED_S:.0f} s "
            "([h100_fp8.csv](../data/h100_fp8.csv), clocks in [h100_fp8_smi.csv](../data/h100_fp8_smi.csv)). Measured "
            f"speedup median {speedups['measured bf16/fp8'].median():.3f}; predicted {speedups['predicted bf16/fp8'].median():.3f} "
            f"with `hw.fp8_matmul_efficiency` {float(compose_config('hw=h100').hw.fp8_matmul_efficiency):.2f} (conf/hw/h100.yaml), "
            f"{speedups['at the bf16 efficiency'].median():.3f} at the bf16 efficiency (`hw.fp8_matmul_efficiency=1`).", "",
            speedups[["case", "m", "k", "n", "bf16_s", "fp8_s", "measured bf16/fp8", "predicted bf16/fp8", "at the bf16 efficiency",
                      "bf16 sustained/single", "fp8 sustained/single"]].to_markdown(index=False, floatfmt=".3g"), "",
        ]
    page = "\n".join([
        "# H100 kernels against the `hw=h100` preset", "",
        f"Measured by `{command} measure` on {device} (CUDA events, median of {REPEATS} after {WARMUP} warm-ups, L2 cleared "
        f"before each); predicted by `{command} compare --measured <csv>`: phaze.cost.op_latencies on the `hw=h100` point, all "
        "cores, launch overhead included. Measurements: [experiments/data/h100_kernels.csv](../data/h100_kernels.csv).", "",
        summary.to_markdown(floatfmt=".3f"), "",
        table[["case", "kind", "b", "m", "k", "n", "gflop", "mb_moved", "measured_us", "predicted_us", "predicted/measured",
               "measured TFLOP/s or GB/s"]].to_markdown(index=False, floatfmt=".3f"), "",
        *sustained_part,
        *fp8_part,
    ])
    write_result("gpu_kernel_check", page, device=device, summary=summary, cases=table,
                 sustained=runs if sustained_part else None, fp8=speedups if fp8_part else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("measure").add_argument("--out", type=Path, required=True)
    sub.add_parser("sustained").add_argument("--out", type=Path, required=True)
    sub.add_parser("fp8").add_argument("--out", type=Path, required=True)
    sub.add_parser("compare").add_argument("--measured", type=Path, default=DATA / "h100_kernels.csv")
    args = parser.parse_args()
    {"measure": lambda: measure(args.out), "sustained": lambda: sustained(args.out), "fp8": lambda: fp8(args.out), "compare": lambda: compare(args.measured)}[args.mode]()


if __name__ == "__main__":
    main()
