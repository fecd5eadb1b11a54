"""The FlashAttention kernel check's arithmetic: the papers' FLOPs formula and the kernel's HBM traffic, by hand."""

import pandas as pd
import pytest

from experiments.validation.flash_attention_check import DATA, kernel_frame, paper_flops


def test_paper_flops_follow_the_papers_formula():
    # one 16k-token sequence, 16 heads of 128: forward 4 * 16384^2 * 128 * 16 = 2.199e12 FLOPs
    forward = 4 * 16384**2 * 128 * 16
    assert paper_flops("fwd", 1, 16384, 16, 128, False) == pytest.approx(2.19902e12, rel=1e-5)
    assert paper_flops("fwd", 1, 16384, 16, 128, True) == forward / 2
    assert paper_flops("bwd", 1, 16384, 16, 128, False) == 2.5 * forward
    assert paper_flops("fwd+bwd", 1, 16384, 16, 128, True) == 3.5 * forward / 2


def test_the_kernel_reads_and_writes_its_tensors_once():
    """Forward: q, k, v in, o and the fp32 log-sum-exp out; backward: q, k, v, o, do and the log-sum-exp in, dq, dk,
    dv out; the steps between move nothing (S and P stay on chip)."""
    b, s, h, d = 2, 1024, 16, 128
    tensor = b * s * h * d * 2
    forward, backward = kernel_frame(True, b, s, h, d, False), kernel_frame(False, b, s, h, d, False)
    assert forward.bytes_read.sum() == 3 * tensor and forward.bytes_written.sum() == tensor + b * s * h * 4
    assert backward.bytes_read.sum() == 5 * tensor + b * s * h * 4 and backward.bytes_written.sum() == 3 * tensor
    assert forward.fused.all() and list(forward.target) == ["bmm", "_softmax", "bmm"]
    assert forward.bytes_read.iloc[1:].sum() == 0 and forward.bytes_written.iloc[:-1].sum() == 0


def test_the_published_points_are_the_papers_settings():
    """Every point is batch x sequence = 16k tokens at hidden 2048, and the figures' headline labels are transcribed."""
    points = pd.read_csv(DATA)
    assert (points.batch * points.seq_len == 16384).all() and (points.heads * points.head_dim == 2048).all()
    best = points.groupby(["gpu", "kernel", "direction"]).measured_tflops.max()
    assert best["a100", "flash-attention-2", "fwd+bwd"] == 203  # arXiv 2307.08691 Fig. 4d: d=128, non-causal, 16k
    assert best["h100", "flash-attention-3", "fwd"] == 756  # d=256, 16k (arXiv 2407.08608v2 Fig. 5e)
    assert best["h100", "flash-attention-2", "fwd+bwd"] == 338  # Fig. 7 (the text: "up to 335 TFLOPs/s"), d=128 non-causal 16k
