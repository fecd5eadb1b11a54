"""FlashAttention kernels as the model prices them, against the published kernel benchmarks of FlashAttention-2 (A100,
H100) and FlashAttention-3 (H100, with the FlashAttention-2 and cuDNN kernels it is compared with).

    python -m experiments.validation.flash_attention_check

Each published point (experiments/data/flash_attention_published.csv) is the papers' setting: batch x sequence length =
16k tokens, hidden size 2048 (32, 16 or 8 heads of 64, 128 or 256), fp16, with or without the causal mask. The model
prices the same kernel as the extraction writes it (phaze.workload.attention.kernel_steps: FlashAttention-2's
matmuls and softmax, the causally skipped blocks left out; FlashAttention-2's matmuls with warp-level MMA,
hw.mma_sync_fraction) on the `hw=a100` or `hw=h100` point, one kernel alone
(KERNEL_ALONE: the benchmarks time kernels, and FlashAttention-3's ran at a fixed 1830 MHz), and converts the time to
TFLOP/s with the papers' formula: forward 4 s^2 d heads batch (halved when causal), backward 2.5 times that,
forward + backward 3.5 times. Writes experiments/results/flash_attention_check.{md,json}.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments.harness import write_result
from phaze.config import compose_config, model_job
from phaze.cost.latency import op_latencies
from phaze.hardware import enumerate_space
from phaze.hardware.derating import KERNEL_ALONE
from phaze.workload.attention import LSE_DTYPE, kernel_steps
from phaze.workload.graph import OP_COLUMNS
from phaze.workload.trace import kernel_step_rows

DATA = Path(__file__).resolve().parents[1] / "data" / "flash_attention_published.csv"
HALF_BYTES = 2
"""fp16 / bf16 operands and results."""
BACKWARD_FLOPS_RATIO = 2.5
"""The papers' backward FLOPs over forward: 5 matmuls against 2 (the backward recomputes S)."""
CLUSTERS = {"a100": "dgx_a100", "h100": "dgx_h100"}
SHORTEST_SEQ, LONGEST_SEQ = 512, 16384
"""The ends of the papers' sequence-length sweep (512, 1k, ..., 16k), the by-case table's two columns."""


def paper_flops(direction: str, batch: int, seq: int, heads: int, head_dim: int, causal: bool) -> float:
    """The papers' FLOPs of one kernel (arXiv 2307.08691 and 2407.08608 section 4.1)."""
    forward = 4.0 * seq**2 * head_dim * heads * batch / (2.0 if causal else 1.0)
    return forward * {"fwd": 1.0, "bwd": BACKWARD_FLOPS_RATIO, "fwd+bwd": 1.0 + BACKWARD_FLOPS_RATIO}[direction]


WARP_MMA_KERNELS = ("flash-attention-2",)
"""Kernels written with warp-level MMA (mma.sync): FlashAttention-2 (FlashAttention-3 and cuDNN use Hopper's wgmma)."""


def kernel_frame(forward: bool, batch: int, seq: int, heads: int, head_dim: int, causal: bool, warp_mma: bool = False) -> pd.DataFrame:
    """One FlashAttention kernel's steps as operator rows: forward reads q, k, v and writes o (and the fp32 log-sum-exp);
    backward reads q, k, v, o, do and the log-sum-exp and writes dq, dk, dv; `warp_mma`: its matmuls use mma.sync."""
    tensor = batch * seq * heads * head_dim * HALF_BYTES
    lse = batch * seq * heads * LSE_DTYPE.itemsize
    read, written = (3 * tensor, tensor + lse) if forward else (5 * tensor + lse, 3 * tensor)
    rows = kernel_step_rows("attention", kernel_steps(forward, (batch, seq, heads, head_dim), causal), HALF_BYTES, read, written)
    frame = pd.DataFrame(rows)
    frame["op_id"] = np.arange(len(frame))
    frame["fp8"] = False
    frame["warp_mma"] = warp_mma & (frame["kind"] == "matmul")
    return frame


def predict(published: pd.DataFrame) -> np.ndarray:
    """Predicted TFLOP/s of every published point, kernel alone on its GPU's preset."""
    out = np.empty(len(published))
    for gpu, rows in published.groupby("gpu"):
        cfg = compose_config(f"hw={gpu}", f"cluster={CLUSTERS[gpu]}", "train=megatron", KERNEL_ALONE)
        space, network = enumerate_space(cfg.hw), model_job(cfg).network
        for i, r in rows.iterrows():
            directions = {"fwd": (True,), "bwd": (False,), "fwd+bwd": (True, False)}[r.direction]
            warp = r.kernel in WARP_MMA_KERNELS
            seconds = sum(float(op_latencies(kernel_frame(forward, r.batch, r.seq_len, r.heads, r.head_dim, r.causal, warp)[
                list(OP_COLUMNS) + ["fp8", "warp_mma"]], space, network, 1).parallel_s[:, 0].sum()) for forward in directions)
            out[published.index.get_loc(i)] = paper_flops(r.direction, r.batch, r.seq_len, r.heads, r.head_dim, r.causal) / seconds / 1e12
    return out


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median predicted/measured and its spread by GPU, kernel, direction, head width and mask."""
    keys = ["gpu", "kernel", "direction", "head_dim", "causal"]
    at = table.pivot_table(index=keys, columns="seq_len", values="ratio")[[SHORTEST_SEQ, LONGEST_SEQ]]
    return table.groupby(keys).agg(points=("ratio", "size"), median_ratio=("ratio", "median")).assign(
        at_512=at[SHORTEST_SEQ], at_16k=at[LONGEST_SEQ]).reset_index()


def main() -> None:
    published = pd.read_csv(DATA)
    table = published.assign(predicted_tflops=predict(published))
    table["ratio"] = table.predicted_tflops / table.measured_tflops
    by_case = summary(table)
    log_err = np.abs(np.log(table.ratio))
    kernels = table.assign(abs_log_error=log_err).groupby(["gpu", "kernel"]).agg(
        points=("ratio", "size"), median_ratio=("ratio", "median"), mean_abs_log_error=("abs_log_error", "mean"),
        lowest=("ratio", "min"), highest=("ratio", "max")).reset_index()
    page = "\n".join([
        "# FlashAttention kernels: the model against the published benchmarks", "",
        "Generated by `python -m experiments.validation.flash_attention_check` from "
        "[flash_attention_published.csv](../data/flash_attention_published.csv) (the figure labels of FlashAttention-2's "
        "Fig. 4 and 7 and FlashAttention-3's Fig. 5 and 6, arXiv 2307.08691 and 2407.08608v2). Each point is the papers' "
        "setting (16k tokens, hidden 2048, fp16), priced as one kernel alone on `hw=a100` or `hw=h100` "
        "(`hw.matmul_sustained_slowdown=1`); ratio = predicted / measured TFLOP/s (above 1: the model is too fast).", "",
        "## By kernel", "", kernels.to_markdown(index=False, floatfmt=".3g"), "",
        "## By case (ratio at 512 and at 16k tokens per sequence)", "", by_case.to_markdown(index=False, floatfmt=".3g"), "",
        "## Every point", "",
        table.drop(columns=["source", "reading"]).to_markdown(index=False, floatfmt=".3g"), "",
    ])
    write_result("flash_attention_check", page, kernels=kernels, cases=table)


if __name__ == "__main__":
    main()
