"""Builders for the cost tests: operator rows (OP_COLUMNS) and one-point accelerator frames."""

from __future__ import annotations

import pandas as pd

from phaze.config import compose_config
from phaze.hardware.space import describe_points
from phaze.workload.graph import OP_COLUMNS

AMPLE_GBPS = 1e12
"""A bandwidth so large that no memory bound can bind (10^21 bytes/s)."""


def matmul_op(b, m, k, n, elem_bytes=2, target="mm"):
    """C[b,m,n] = A[b,m,k] @ B[b,k,n] with its compulsory bytes."""
    return _row(
        target=target, kind="matmul", out_shape=(b, m, n), in_shapes=((b, m, k), (b, k, n)), numel_out=b * m * n,
        flops=2.0 * b * m * k * n, bytes_read=elem_bytes * b * (m * k + k * n), bytes_written=elem_bytes * b * m * n,
        mm_b=b, mm_m=m, mm_k=k, mm_n=n,
    )


def vector_op(numel, target="neg", kind="elementwise", elem_bytes=2, in_numel=None, n_inputs=1, fused=False):
    """A vector op reading `n_inputs` tensors of `in_numel` elements and writing `numel`; `fused`: a middle step of a
    fused kernel (no bytes to or from memory)."""
    in_numel = numel if in_numel is None else in_numel
    moved = 0.0 if fused else 1.0
    return _row(
        target=target, kind=kind, out_shape=(numel,), in_shapes=((in_numel,),) * n_inputs, numel_out=numel,
        flops=float(numel), bytes_read=moved * elem_bytes * in_numel * n_inputs, bytes_written=moved * elem_bytes * numel,
        fused=fused,
    )


def allreduce_op(nbytes, elem_bytes=2):
    numel = int(nbytes // elem_bytes)
    return _row(
        target="phaze.all_reduce", kind="collective", out_shape=(numel,), in_shapes=((numel,),), numel_out=numel,
        bytes_read=float(nbytes), bytes_written=float(nbytes), comm_bytes=float(nbytes),
    )


def view_op(numel):
    return _row(target="view", kind="view", out_shape=(numel,), in_shapes=((numel,),), numel_out=numel)


def _row(**values) -> dict:
    row = {c: 0 for c in OP_COLUMNS}
    row.update(op_id=0, name=values["target"], param_bytes=0.0, saved_bytes=0.0, comm_bytes=0.0, flops=0.0,
               bytes_read=0.0, bytes_written=0.0)
    row.update(values)
    return row


def ops_frame(rows) -> pd.DataFrame:
    frame = pd.DataFrame(list(rows), columns=list(OP_COLUMNS))
    frame["op_id"] = range(len(frame))
    return frame


def chip_frame(n_tc=1, tc_rows=128, tc_cols=128, n_vc=1, vc_width=128, glb_mib=128, hbm_gib=32, freq_ghz=1.0,
               hbm_gbps=AMPLE_GBPS, glb_gbps=AMPLE_GBPS, core_bytes_per_cycle=AMPLE_GBPS, buffer_bytes_per_pe=16.0):
    """One accelerator point (all derived columns) with PHAZE's area and power models."""
    hw = compose_config(
        "hw=tpuv4", f"hw.freq_ghz={freq_ghz}", f"hw.hbm_gbps={hbm_gbps}", f"hw.glb_gbps={glb_gbps}",
        f"hw.core_buffer_bytes_per_cycle={core_bytes_per_cycle}", f"hw.core_buffer_bytes_per_pe={buffer_bytes_per_pe}",
    ).hw
    axes = dict(n_tc=n_tc, tc_rows=tc_rows, tc_cols=tc_cols, n_vc=n_vc, vc_width=vc_width, glb_mib=glb_mib, hbm_gib=hbm_gib)
    return describe_points(hw, pd.DataFrame([axes]))
