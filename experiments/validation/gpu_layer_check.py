"""Whole transformer layers timed on a real H100 against the `hw=h100` preset's layer predictions.

    python -m experiments.validation.gpu_layer_check measure --out DIR        # on the GPU (torch only): DIR/h100_layers.csv, ...
    python -m experiments.validation.gpu_layer_check compare --measured DIR   # here: experiments/results/gpu_layer_check.{md,json}

gpu_kernel_check.py checks single kernels; this checks what the validation runs are made of: a layer's forward and
backward as a framework runs them, kernel after kernel on one stream, back to back for seconds as in a training step
(the clock then sits at the power limit). `measure` builds each layer in plain PyTorch (bf16 weights, as FSDP's
gathered parameters or Megatron's bf16 copies; scaled-dot-product attention, which runs FlashAttention on an H100),
stacks LAYERS_PER_STACK of them, and records per layer the median forward and backward time, the activation bytes
kept for backward, and one profiled step's kernels. `compare` extracts the same layer with phaze (the validation
rows' model families, `train=fsdp` kernels: unfused, as eager PyTorch runs them) and prices it on `hw=h100`
(phaze.report.layer_prediction).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
"""experiments/data/ (found from this file: `measure` runs where only torch is installed, without the harness)."""
LAYERS_PER_STACK = 4
WARMUP_STEPS = 3
SUSTAINED_S = 4.0
"""How long each stack runs back to back; the medians are taken over the second half, once the clock has settled."""

# name: (style, hidden, heads, kv_heads, ffn, seq, mbs, tp, norm): the layers of validation rows' models
# (docs/validation_runs.csv): MPT-7B as llm-foundry's H100 table runs it (mpt_7b_h100_8: MBS 6, seq 2048; LayerNorm,
# GeLU MLP x4), Llama 3.1 8B at the NeMo row's sequence (8192, one sequence; RMSNorm, rotary, GQA 32/8, SwiGLU
# 14336) with PyTorch's eager RMSNorm (Hugging Face's LlamaRMSNorm: 8 kernels) and with the fused torch.nn.functional
# .rms_norm, and under torch.compile; one tensor-parallel shard (1/8) of a GPT-3 175B layer at Narayanan et al.'s MBS 1,
# seq 2048 (the shard's GEMMs and attention heads; its all-reduces need 8 GPUs and are not timed); MPT-13B, 30B and 70B
# at the MosaicML H100 rows' microbatches (mosaic_mpt*_h100_*); a TP-4 shard of a Llama 3.1 70B layer on the 4096 tokens
# a GPU holds in the NeMo rows (seq 8192 over CP 2; one sequence of 4096 here), eager and compiled.
LAYERS = {
    "mpt_7b": ("gpt", 4096, 32, 32, 16384, 2048, 6, 1, "layer_norm"),
    "llama31_8b": ("llama", 4096, 32, 8, 14336, 8192, 1, 1, "eager_rms"),
    "llama31_8b_fused_norm": ("llama", 4096, 32, 8, 14336, 8192, 1, 1, "fused_rms"),
    "gpt3_175b_tp8": ("gpt", 12288, 96, 96, 49152, 2048, 1, 8, "layer_norm"),
    "llama31_8b_compiled": ("llama", 4096, 32, 8, 14336, 8192, 1, 1, "compiled"),
    "mpt_13b": ("gpt", 5120, 40, 40, 20480, 2048, 2, 1, "layer_norm"),
    "mpt_30b": ("gpt", 7168, 56, 56, 28672, 2048, 14, 1, "layer_norm"),
    "mpt_70b": ("gpt", 8192, 64, 64, 32768, 2048, 8, 1, "layer_norm"),
    "llama31_70b_tp4": ("llama", 8192, 64, 8, 28672, 4096, 1, 4, "eager_rms"),
    "llama31_70b_tp4_compiled": ("llama", 8192, 64, 8, 28672, 4096, 1, 4, "compiled"),
}
LAYER_FIELDS = ("style", "hidden", "heads", "kv_heads", "ffn", "seq", "mbs", "tp", "norm")
"""`norm` "compiled": the eager layer under torch.compile, which fuses each chain of elementwise kernels into one."""
ROPE_BASE = 500000.0
"""Llama 3's rotary base (its config.json rope_theta); the value does not change the kernels' cost."""
RMS_EPS = 1e-5


def build_layer(torch, style: str, hidden: int, heads: int, kv_heads: int, ffn: int, seq: int, tp: int, norm: str):
    """One pre-norm transformer layer as a torch.nn.Module (no biases; heads and FFN width divided by tp)."""
    nn, F = torch.nn, torch.nn.functional
    head_dim = hidden // heads
    q_heads, kv_local, ffn_local = heads // tp, max(kv_heads // tp, 1), ffn // tp

    def rms(x, w):
        if norm == "fused_rms":
            return F.rms_norm(x, (hidden,), w, RMS_EPS)
        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.Parameter(torch.ones(hidden))
            self.norm2 = nn.Parameter(torch.ones(hidden))
            self.qkv = nn.Linear(hidden, (q_heads + 2 * kv_local) * head_dim, bias=False)
            self.proj = nn.Linear(q_heads * head_dim, hidden, bias=False)
            self.up = nn.Linear(hidden, ffn_local * (2 if style == "llama" else 1), bias=False)
            self.down = nn.Linear(ffn_local, hidden, bias=False)
            inv = 1.0 / ROPE_BASE ** (torch.arange(0, head_dim, 2).float() / head_dim)
            angles = torch.outer(torch.arange(seq).float(), inv)
            self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1), persistent=False)
            self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1), persistent=False)

        def normed(self, x, w):
            return rms(x, w) if style == "llama" else F.layer_norm(x, (hidden,), w)

        def rotary(self, t):
            half = t.shape[-1] // 2
            rotated = torch.cat([-t[..., half:], t[..., :half]], -1)
            return t * self.cos.to(t.dtype) + rotated * self.sin.to(t.dtype)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.normed(x, self.norm1)).split([q_heads * head_dim, kv_local * head_dim, kv_local * head_dim], -1)
            q, k, v = (t.view(b, s, -1, head_dim).transpose(1, 2) for t in (q, k, v))
            if style == "llama":
                q, k = self.rotary(q), self.rotary(k)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_local != q_heads)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
            h = self.up(self.normed(x, self.norm2))
            if style == "llama":
                gate, up = h.chunk(2, -1)
                h = F.silu(gate) * up
            else:
                h = F.gelu(h)
            return x + self.down(h)

    return Layer()


def measure_layer(torch, name: str, spec: dict, device, profile_dir: Path) -> dict:
    """Per layer of a LAYERS_PER_STACK stack: median forward and backward seconds back to back, kept activation bytes."""
    layers = torch.nn.Sequential(*[build_layer(torch, spec["style"], spec["hidden"], spec["heads"], spec["kv_heads"], spec["ffn"],
                                               spec["seq"], spec["tp"], spec["norm"]) for _ in range(LAYERS_PER_STACK)])
    layers = layers.to(device=device, dtype=torch.bfloat16)
    if spec["norm"] == "compiled":
        for layer in layers:
            layer.compile()
    x = torch.randn(spec["mbs"], spec["seq"], spec["hidden"], device=device, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)
    cuda = device.type == "cuda"

    def step(events=None):
        if events:
            events[0].record()
        out = layers(x)
        if events:
            events[1].record()
        out.backward(grad)
        if events:
            events[2].record()

    for _ in range(WARMUP_STEPS):
        step()
    for p in layers.parameters():
        p.grad = None
    x.grad = None
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if cuda else 0
    out = layers(x)
    kept = (torch.cuda.memory_allocated() - before) if cuda else 0
    out.backward(grad)
    del out
    timings, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < (SUSTAINED_S if cuda else 0.0) or len(timings) < 2:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if cuda else None
        start = time.perf_counter()
        step(events)
        if cuda:
            events[2].synchronize()
            timings.append((events[0].elapsed_time(events[1]) / 1e3, events[1].elapsed_time(events[2]) / 1e3))
        else:
            timings.append((time.perf_counter() - start, 0.0))
    late = timings[len(timings) // 2:]
    fwd = sorted(t[0] for t in late)[len(late) // 2] / LAYERS_PER_STACK
    bwd = sorted(t[1] for t in late)[len(late) // 2] / LAYERS_PER_STACK
    row = {"case": name, **spec, "fwd_s": fwd, "bwd_s": bwd, "kept_bytes_per_layer": kept / LAYERS_PER_STACK, "steps": len(timings)}
    if cuda:
        row.update(clock_mhz(), peak_bytes=torch.cuda.max_memory_allocated())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        kernels = [(e.key, e.count, e.device_time_total) for e in prof.key_averages() if e.device_time_total > 0]
        lines = ["case,kernel,calls_per_layer,us_per_layer"] + [
            f'{name},"{k.replace(chr(34), "")}",{c / LAYERS_PER_STACK},{t / LAYERS_PER_STACK:.2f}' for k, c, t in sorted(kernels, key=lambda r: -r[2])]
        (profile_dir / f"kernels_{name}.csv").write_text("\n".join(lines) + "\n")
    print(row, flush=True)
    del layers, x, grad
    return row


def clock_mhz() -> dict:
    """The SM clock and board power right after a sustained run (NVML), as the step ran them."""
    try:
        import pynvml
    except ImportError:
        return {}
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {"sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3}


def measure(out: Path, cases: list[str], scale: int) -> None:
    """Every case on this machine's first GPU (or, for a dry run on a CPU, every size divided by `scale`)."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in cases:
        spec = dict(zip(LAYER_FIELDS, LAYERS[name]))
        for key in ("hidden", "ffn", "seq"):
            spec[key] //= scale
        spec["heads"] = max(spec["heads"] // scale, spec["tp"])
        spec["kv_heads"] = max(spec["kv_heads"] // scale, spec["tp"])
        rows.append(measure_layer(torch, name, spec, device, out))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    header = list(rows[0])
    lines = [",".join(header)] + [",".join(str(r.get(h, "")) for h in header) for r in rows]
    (out / "h100_layers.csv").write_text("\n".join(lines) + "\n")
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    (out / "h100_layers_device.txt").write_text(f"{name}, torch {torch.__version__}\n")


ATTENTION_KERNELS = ("sdpa", "flash", "fmha")
GEMM_KERNELS = ("nvjet", "gemm", "cutlass", "xmma")


def kernel_class(name: str) -> str:
    """matmul, attention or vector, from a CUDA kernel's name (cuBLAS's nvjet/gemm kernels, cuDNN's SDPA kernels)."""
    low = name.lower()
    if any(k in low for k in ATTENTION_KERNELS):
        return "attention"
    return "matmul" if any(k in low for k in GEMM_KERNELS) else "vector"


def compare(measured: Path) -> None:
    """Predicted / measured layer times, by kernel class, and kept activation bytes, written to
    experiments/results/gpu_layer_check.md."""
    import pandas as pd

    from experiments.harness import ROOT, write_result
    from phaze.report.layer_prediction import COMPILED, predicted_layer

    cases = pd.read_csv(measured / "h100_layers.csv")
    rows, classes = [], []
    for case in cases.to_dict("records"):
        pred = predicted_layer(case, str(ROOT / "experiments" / ".cache" / "gpu_layer_check"))
        kernels = pd.read_csv(measured / f"kernels_{case['case']}.csv")
        by_class = kernels.assign(cls=kernels.kernel.map(kernel_class)).groupby("cls").us_per_layer.sum() * 1e-6
        step_s = case["fwd_s"] + case["bwd_s"]
        predicted_s = pred["predicted_fwd_s"] + pred["predicted_bwd_s"]
        rows.append({"case": case["case"], "norm": case["norm"], "phaze kernels": "fused" if case["norm"] == COMPILED else "eager",
                     "mbs x seq": f"{case['mbs']} x {case['seq']}", "tp": case["tp"],
                     "measured fwd ms": case["fwd_s"] * 1e3, "measured bwd ms": case["bwd_s"] * 1e3,
                     "predicted fwd ms": pred["predicted_fwd_s"] * 1e3, "predicted bwd ms": pred["predicted_bwd_s"] * 1e3,
                     "predicted/measured": predicted_s / step_s, "SM MHz": case.get("sm_clock_mhz"), "W": case.get("power_w"),
                     "measured kept GB": case["kept_bytes_per_layer"] / 1e9, "predicted kept GB": pred["predicted_kept_bytes_per_layer"] / 1e9})
        profiled = by_class.sum()
        for k in ("matmul", "attention", "vector"):
            # The profiled step ran one step alone; its class shares split the sustained time.
            share = by_class.get(k, 0.0) / profiled
            pred_k = pred[f"predicted_fwd_{k}_s"] + pred[f"predicted_bwd_{k}_s"]
            classes.append({"case": case["case"], "kernels": k, "measured ms (share of the sustained step)": share * step_s * 1e3,
                            "predicted ms": pred_k * 1e3, "predicted/measured": pred_k / (share * step_s) if share else float("nan"),
                            "measured kernels per layer": kernels[kernels.kernel.map(kernel_class) == k].calls_per_layer.sum(),
                            "predicted kernels per layer": pred[f"predicted_fwd_{k}_kernels"] + pred[f"predicted_bwd_{k}_kernels"]})
    device_file = measured / "h100_layers_device.txt"
    device = device_file.read_text().strip() if device_file.exists() else "a GPU not recorded"
    command = "python -m experiments.validation.gpu_layer_check"
    table, by_kind = pd.DataFrame(rows), pd.DataFrame(classes)
    page = "\n".join([
        "# Whole layers on an H100 against the `hw=h100` preset", "",
        f"Measured by `{command} measure --out <dir>` on {device}: {LAYERS_PER_STACK} layers stacked, forward and backward "
        f"back to back for {SUSTAINED_S:.0f} s (medians of the second half, per layer; CUDA events), the SM clock and board power "
        "read at the end; the activation bytes the forward keeps for backward (allocated memory after the forward, per "
        f"layer). Predicted by `{command} compare --measured <dir>`: the same layer extracted by phaze (the validation rows' "
        "families, `train=fsdp`, one microbatch, FlashAttention; the compiled layers with `train.fused_kernels=true`, "
        "their norms, rotary embeddings and SwiGLU one kernel each) on the `hw=h100` point, its compute kernels one after "
        "another as the placement DP takes a GPU layer (`hw.matmul_sustained_slowdown` included; a TP shard's collectives "
        f"left out, as one GPU has none). Measurements: [experiments/data/h100_layers/](../data/h100_layers/).", "",
        table.to_markdown(index=False, floatfmt=".3g"), "",
        "## By kernel class", "",
        "The measured split is one profiled step's (torch.profiler, CUDA kernels: cuBLAS GEMMs, cuDNN's SDPA kernels, the "
        "rest vector kernels), scaled to the sustained step; the predicted split is phaze's operators by kind (the fused "
        "attention kernel's steps, matmuls, the rest).", "",
        by_kind.to_markdown(index=False, floatfmt=".3g"), "",
    ])
    write_result("gpu_layer_check", page, device=device, layers=table, by_kernel_class=by_kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--cases", nargs="*", default=list(LAYERS), choices=list(LAYERS))
    m.add_argument("--scale", type=int, default=1, help="divide every size by this (a dry run on a CPU)")
    sub.add_parser("compare").add_argument("--measured", type=Path, default=DATA / "h100_layers")
    args = parser.parse_args()
    if args.mode == "measure":
        measure(args.out, args.cases, args.scale)
    else:
        compare(args.measured)


if __name__ == "__main__":
    sys.exit(main())
