"""The kernels a framework with fused kernels (`model.fused_kernels`) runs where Hugging Face's eager modules launch
a chain of small operators: RMSNorm, the rotary embedding of a query or key tensor, and the gated activations of
SwiGLU and of GeGLU with the tanh GeLU.

Megatron-Core with Transformer Engine, as NeMo configures Llama (nemo/collections/llm/gpt/model/llama.py,
`LlamaConfig`: `normalization="RMSNorm"` in Transformer Engine's fused norm-linear modules, `apply_rope_fusion`,
`bias_activation_fusion` for the gated SiLU; for a gated GeLU, Megatron-Core's `bias_geglu_impl`, as NeMo's Grok-1
recipe runs it: dgxc-benchmarking grok1/grok1_314b.yaml, `activation: fast-geglu`, `bias_activation_fusion: true`),
runs each of these as one kernel forward and one backward, while the eager modules trace as eight operators (RMSNorm:
casts, pow, mean, rsqrt, products), five per tensor (rotary: two products, a negation, a concatenation, a sum) and
two (the activation and the product). Each is a real custom operator with a
fake implementation for `meta` tracing, so that the traced graphs hold one node per kernel whose bytes are its own
inputs and outputs; `fused_kernels` swaps them into a built model for its trace. Checked on
an H100 (experiments/results/gpu_layer_check.md): Llama layers under torch.compile, which fuses these chains, take
0.98-1.03 of the time predicted with them.
"""

from __future__ import annotations

import contextlib
import sys
import types

import torch
import torch.nn.functional as F

RMS_NORM = "phaze.rms_norm"
ROTARY = "phaze.rotary"
SWIGLU = "phaze.swiglu"
GEGLU = "phaze.geglu"
FUSED_OPS = (RMS_NORM, f"{RMS_NORM}_backward", ROTARY, f"{ROTARY}_backward", SWIGLU, f"{SWIGLU}_backward", GEGLU, f"{GEGLU}_backward")
"""Traced operator names (aten_ops.op_name) of the fused kernels, forward and backward."""

RSTD_DTYPE = torch.float32
"""RMSNorm keeps its per-row reciprocal root mean square in fp32 for backward (as Transformer Engine's rsigma)."""

GELU_TANH_SCALE = (2.0 / torch.pi) ** 0.5
GELU_TANH_CUBIC = 0.044715
"""The tanh approximation of GeLU: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks and Gimpel 2016, §2)."""

TANH_GELU_ACTIVATIONS = ("GELUTanh", "PytorchGELUTanh", "NewGELUActivation")
"""Hugging Face activation classes that compute the tanh GeLU (`gelu_pytorch_tanh`, `gelu_new`)."""


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@torch.library.custom_op("phaze::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension, and the per-row reciprocal (fp32)."""
    x32 = x.to(RSTD_DTYPE)
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (x32 * rstd).to(x.dtype), rstd


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps):
    return torch.empty_like(x), x.new_empty(*x.shape[:-1], 1, dtype=RSTD_DTYPE)


@torch.library.custom_op("phaze::rms_norm_backward", mutates_args=())
def rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of rms_norm from its input and saved reciprocal."""
    normed = x.to(RSTD_DTYPE) * rstd
    g = grad.to(RSTD_DTYPE) * weight.to(RSTD_DTYPE)
    dx = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
    dweight = (grad.to(RSTD_DTYPE) * normed).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dweight.to(weight.dtype)


@rms_norm_backward.register_fake
def _rms_norm_backward_fake(grad, x, weight, rstd):
    return torch.empty_like(x), torch.empty_like(weight)


def _rms_norm_setup(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])


def _rms_norm_grad(ctx, grad, grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dweight = rms_norm_backward(grad, x, weight, rstd)
    return dx, dweight, None


rms_norm.register_autograd(_rms_norm_grad, setup_context=_rms_norm_setup)


@torch.library.custom_op("phaze::rotary", mutates_args=())
def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin (cos and sin broadcast over x): the rotary embedding of one tensor."""
    return (x * cos + _rotate_half(x) * sin).to(x.dtype)


@rotary.register_fake
def _rotary_fake(x, cos, sin):
    return torch.empty_like(x)


@torch.library.custom_op("phaze::rotary_backward", mutates_args=())
def rotary_backward(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The input gradient of rotary: grad * cos plus rotate_half's transpose of grad * sin."""
    return (grad * cos - _rotate_half(grad * sin)).to(grad.dtype)


@rotary_backward.register_fake
def _rotary_backward_fake(grad, cos, sin):
    return torch.empty_like(grad)


def _rotary_setup(ctx, inputs, output):
    _, cos, sin = inputs
    ctx.save_for_backward(cos, sin)


def _rotary_grad(ctx, grad):
    cos, sin = ctx.saved_tensors
    return rotary_backward(grad, cos, sin), None, None


rotary.register_autograd(_rotary_grad, setup_context=_rotary_setup)


@torch.library.custom_op("phaze::swiglu", mutates_args=())
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up."""
    return F.silu(gate) * up


@torch.library.custom_op("phaze::swiglu_backward", mutates_args=())
def swiglu_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dgate, dup) of swiglu."""
    g32 = gate.to(RSTD_DTYPE)
    s = torch.sigmoid(g32)
    dup = grad.to(RSTD_DTYPE) * g32 * s
    dgate = grad.to(RSTD_DTYPE) * up.to(RSTD_DTYPE) * s * (1 + g32 * (1 - s))
    return dgate.to(gate.dtype), dup.to(up.dtype)


@torch.library.custom_op("phaze::geglu", mutates_args=())
def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(gate) * up."""
    return F.gelu(gate, approximate="tanh") * up


@torch.library.custom_op("phaze::geglu_backward", mutates_args=())
def geglu_backward(grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dgate, dup) of geglu, computed in fp32 (or the inputs' wider type)."""
    wide = torch.promote_types(gate.dtype, RSTD_DTYPE)
    g, dy = gate.to(wide), grad.to(wide)
    t = torch.tanh(GELU_TANH_SCALE * (g + GELU_TANH_CUBIC * g ** 3))
    dgelu = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * GELU_TANH_SCALE * (1 + 3 * GELU_TANH_CUBIC * g * g)
    dup = dy * 0.5 * g * (1 + t)
    dgate = dy * up.to(wide) * dgelu
    return dgate.to(gate.dtype), dup.to(up.dtype)


def _gate_fake(gate, up):
    return torch.empty_like(gate)


def _gate_backward_fake(grad, gate, up):
    return torch.empty_like(gate), torch.empty_like(up)


def _save_gate_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _register_gate(kernel, backward) -> None:
    """A gated activation's fake implementations and autograd: its backward kernel from the saved gate and up."""
    kernel.register_fake(_gate_fake)
    backward.register_fake(_gate_backward_fake)
    kernel.register_autograd(lambda ctx, grad: backward(grad, *ctx.saved_tensors), setup_context=_save_gate_inputs)


_register_gate(swiglu, swiglu_backward)
_register_gate(geglu, geglu_backward)


def fused_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Hugging Face's apply_rotary_pos_emb (same signature and result) as one rotary kernel per tensor."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return rotary(q, cos, sin), rotary(k, cos, sin)


def _fused_rms_forward(self, hidden_states):
    return rms_norm(hidden_states, self.weight, float(self.variance_epsilon))[0]


def _fused_mlp_forward(self, x):
    return self.down_proj(self.fused_gate(self.gate_proj(x), self.up_proj(x)))


def _fused_apply_gate(self, gate_up_out):
    gate, up = gate_up_out.chunk(2, dim=-1)
    return self.fused_gate(gate, up)


def _gate_kernel(act):
    """The fused gated-activation kernel for a gate activation module: swiglu, geglu, or None (not fused)."""
    if isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation":
        return swiglu
    if type(act).__name__ in TANH_GELU_ACTIVATIONS:
        return geglu
    return None


def _fuse_module_kernels(module: torch.nn.Module) -> None:
    """Swap, in place, every Hugging Face RMSNorm, gated MLP and gated expert group (SiLU or tanh-GeLU gate) of `module`
    for the fused kernels (their parameters and results unchanged)."""
    for m in module.modules():
        kernel = _gate_kernel(getattr(m, "act_fn", None))
        if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon"):
            m.forward = types.MethodType(_fused_rms_forward, m)
        elif kernel is not None and all(hasattr(m, a) for a in ("gate_proj", "up_proj", "down_proj")):
            m.fused_gate = kernel
            m.forward = types.MethodType(_fused_mlp_forward, m)
        elif kernel is not None and getattr(m, "has_gate", False) and hasattr(m, "gate_up_proj"):
            m.fused_gate = kernel
            m._apply_gate = types.MethodType(_fused_apply_gate, m)


@contextlib.contextmanager
def fused_kernels(module: torch.nn.Module):
    """`module` (built for one trace) with its norms and gated activations swapped for the fused kernels, and, while
    open, the modeling files of its submodules that define Hugging Face's apply_rotary_pos_emb calling the fused one
    instead (the attention modules look it up in their file at call time)."""
    _fuse_module_kernels(module)
    files = {sys.modules[type(m).__module__] for m in module.modules()}
    patched = [(f, f.apply_rotary_pos_emb) for f in files if hasattr(f, "apply_rotary_pos_emb")]
    try:
        for f, _ in patched:
            f.apply_rotary_pos_emb = fused_apply_rotary_pos_emb
        yield
    finally:
        for f, original in patched:
            f.apply_rotary_pos_emb = original
