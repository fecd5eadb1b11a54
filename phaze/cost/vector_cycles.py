"""Vector-core cycles per element by aten operator: PHAZE's (WHAM's) per-op cycle constants.

Source: WHAM perf_wrappers/vector_core_estimator.py and op_to_compute.py, as listed in
docs/phaze-reference.md §4.3 and §10 (forward / backward columns). Operators not listed take one
cycle per element (add, mul, copies, casts, layer norm, ...).
"""

from __future__ import annotations

DEFAULT_CYCLES_PER_ELEM = 1.0

CYCLES_PER_ELEM = {
    # forward
    "div": 10.0,
    "pow": 15.0, "sqrt": 15.0, "rsqrt": 15.0, "exp": 15.0, "log": 15.0,  # PHAZE maps exp/log to Pow
    "tanh": 27.0,
    "sin": 13.0, "cos": 13.0,
    "sigmoid": 12.0,
    "silu": 14.0,  # Swish
    "erf": 15.0,
    "gelu": 15.0,  # aten.gelu evaluates erf (PHAZE mapped gelu to Relu, 1 cycle)
    "native_dropout": 2.0,
    "_softmax": 11.0,  # one pass for the max and sum, plus 10 per element (PHAZE's Softmax)
    "_log_softmax": 14.0,  # the same with 13 (PHAZE's LogSoftmax)
    "nll_loss_forward": 2.0,
    # backward
    "tanh_backward": 2.0,
    "sigmoid_backward": 22.0,
    "silu_backward": 15.0,
    "gelu_backward": 15.0,
    "native_dropout_backward": 1.0,
    "_softmax_backward_data": 2.0,
    "_log_softmax_backward_data": 2.0,
    "nll_loss_backward": 2.0,
    # Fused kernels (phaze.workload.fused_ops): the per-element cycles of the eager chain each replaces, per-row
    # operators (the mean's rsqrt) left out. RMSNorm: _to_copy, pow, mean, mul, _to_copy, mul; its backward: eight
    # products, two sums, two casts, mean's div and pow's backward pow; rotary: mul, neg, cat, mul, add (backward:
    # mul, neg, two slice_backward, two add, mul); SwiGLU: silu, mul (backward: silu_backward, two mul); GeGLU (tanh
    # GeLU): gelu, mul (backward: gelu_backward, two mul).
    "phaze.rms_norm": 20.0,
    "phaze.rms_norm_backward": 36.0,
    "phaze.rotary": 5.0,
    "phaze.rotary_backward": 7.0,
    "phaze.swiglu": 15.0,
    "phaze.swiglu_backward": 17.0,
    "phaze.geglu": 16.0,
    "phaze.geglu_backward": 17.0,
}


def cycles_per_elem(target: str) -> float:
    return CYCLES_PER_ELEM.get(target, DEFAULT_CYCLES_PER_ELEM)
