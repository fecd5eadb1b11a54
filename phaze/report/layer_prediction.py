"""phaze's prediction of a whole transformer layer timed on a GPU (experiments/validation/gpu_layer_check.py measures
them, experiments/data/h100_layers/ holds the measurements): the case as a validation row, extracted and priced on
`hw=h100` kernel after kernel, as the placement DP takes a GPU's layer."""

from __future__ import annotations

import numpy as np

from phaze.config import compose_config, model_job
from phaze.cost.latency import op_latencies
from phaze.hardware import enumerate_space
from phaze.pipeline import load_workloads, variant_graph, variants_of
from phaze.report.validation import run_overrides

# The validation rows' model family and vocabulary per case (docs/validation_runs.csv: MPT and GPT-3 as GPT-2 blocks,
# Llama 3.1 as a Llama); the vocabulary only sizes the embedding and head, which are not compared.
FAMILIES = {"mpt_": ("gpt2", "gelu", 50368), "gpt3_": ("gpt2", "gelu", 50257), "llama31_": ("llama", "", 128256)}
COMPILED = "compiled"
"""The `norm` of the cases run under torch.compile, whose fused kernels phaze prices with `train.fused_kernels=true`
(phaze.workload.fused_ops); the others are priced as traced, eager."""


def layer_run(case: dict) -> dict:
    """The case as a validation row (docs/validation_runs.csv columns): its model on `tp` H100s, one microbatch."""
    family, activation, vocab = next(v for k, v in FAMILIES.items() if case["case"].startswith(k))
    tp = int(case["tp"])
    return {"id": case["case"], "family": family, "num_layers": 2, "hidden_size": case["hidden"], "num_heads": case["heads"],
            "num_kv_heads": case["kv_heads"], "ffn_hidden_size": case["ffn"], "vocab_size": vocab, "seq_len": case["seq"],
            "activation": activation, "dropout": "0" if family == "gpt2" else "", "tie_word_embeddings": "",
            "hw": "h100", "cluster": "dgx_h100", "gpus": tp, "gpus_per_node": 8, "framework": "fsdp", "tp": tp, "pp": 1,
            "dp": 1, "cp": 1, "vp": 1, "mbs": case["mbs"], "global_batch": case["mbs"], "recompute": "none", "sp": "false",
            "zero": 0, "tp_comm_overlap": "false", "attention": "flash", "precision": "",
            "overrides": "train.fused_kernels=true" if case["norm"] == COMPILED else "",
            "num_experts": "", "experts_per_token": "", "expert_ffn_hidden_size": "", "num_shared_experts": ""}


def predicted_layer(case: dict, cache_dir: str) -> dict:
    """phaze's forward and backward time of the case's layer on `hw=h100` (its compute kernels one after another, as
    the placement DP takes a GPU's layer; TP collectives left out, as the measurement has none), by kernel class,
    and the bytes its forward keeps for backward."""
    cfg = compose_config(*run_overrides(layer_run(case)), f"cache_dir={cache_dir}")
    job = model_job(cfg)
    point, workloads = enumerate_space(cfg.hw), load_workloads(job)
    graph = variant_graph(workloads, variants_of(job)[0], int(case["tp"]), "layer")
    out = {"predicted_kept_bytes_per_layer": float(graph.saved_bytes)}
    for direction in ("fwd", "bwd"):
        ops = getattr(graph, direction).without_views().ops
        lat = op_latencies(ops, point, job.network, int(case["tp"]))
        seconds = np.asarray(lat.parallel_s)[:, 0]
        kind = np.where(ops.fused.to_numpy(dtype=bool), "attention", np.where(ops.kind.to_numpy() == "matmul", "matmul", "vector"))
        compute = np.isin(lat.unit, ("tc", "vc"))
        out[f"predicted_{direction}_s"] = float(seconds[compute].sum())
        for k in ("matmul", "attention", "vector"):
            out[f"predicted_{direction}_{k}_s"] = float(seconds[compute & (kind == k)].sum())
            out[f"predicted_{direction}_{k}_kernels"] = int((compute & (kind == k)).sum())
    return out
