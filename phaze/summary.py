"""Human-readable summaries of stage outputs, for the entry points to print."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from phaze.workload.graph import Workload


@dataclass(frozen=True)
class WorkloadSummary:
    model: str
    params: int
    num_layers: int
    seq_len: int
    train_flops_per_seq: float
    """Matmul FLOPs of one training step (forward + backward) per sequence, whole model."""
    ops: pd.DataFrame
    """Per TP width and part: forward / backward operator counts (views excluded) and collectives."""

    def to_string(self) -> str:
        head = (
            f"model {self.model}: {self.params / 1e9:.3f} B parameters, {self.num_layers} layers, seq {self.seq_len}, "
            f"{self.train_flops_per_seq / 1e12:.2f} TFLOP per sequence per training step (fwd+bwd matmuls)"
        )
        return head + "\n" + self.ops.to_string(index=False)


def workload_summary(w: Workload) -> WorkloadSummary:
    rows = []
    for tp, parts in w.graphs.items():
        for part, g in parts.items():
            fwd_c, bwd_c = g.n_collectives()
            rows.append({
                "tp": tp, "part": part, "fwd_ops": len(g.fwd.without_views()), "bwd_ops": len(g.bwd.without_views()),
                "all_reduces_fwd": fwd_c, "all_reduces_bwd": bwd_c,
                "matmul_gflop_per_device": round(g.matmul_flops() / 1e9, 2),
                "param_mib_per_device": round(g.param_bytes / 2**20, 1),
            })
    return WorkloadSummary(w.model_name, w.params, w.num_layers, w.seq_len, w.train_matmul_flops_per_seq(1), pd.DataFrame(rows))
