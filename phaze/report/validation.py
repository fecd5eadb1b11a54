"""Predicted vs measured training throughput for published GPU runs (docs/validation_runs.csv).

Each run becomes config overrides: its architecture, the GPU preset and DGX cluster, its fixed
(dp, pp, tp), microbatch, global batch, recompute and Adam; `phaze.pipeline.evaluate_point`
predicts it and the ratio to the measured tokens/s per GPU is reported.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from phaze.config import compose_config
from phaze.hardware.space import enumerate_space
from phaze.pipeline import evaluate_point

RUNS_CSV = Path(__file__).resolve().parents[2] / "docs" / "validation_runs.csv"

PRESETS = {"A100": ("a100", "dgx_a100"), "H100": ("h100", "dgx_h100")}
"""GPU name prefix in the CSV -> (hw preset, cluster preset)."""

SELECTED = (
    "nar21_t1_1.7B", "nar21_t1_18.4B", "nar21_t1_39.1B", "nar21_t1_145.6B", "nar21_t1_1T", "nar21_t2_175B_384",
    "kor22_t5_22B", "bloom_176B_384", "mtnlg_530B_2240",
)
"""Runs whose memory and schedule plain data, tensor and pipeline parallelism express. The others need
sequence parallelism, fully sharded parameters, a distributed optimizer, context parallelism or
Meta's own pipeline schedule; docs/validation.md lists them as not modelled."""

FLASH_ATTENTION_RUNS = ("mpt_", "nemo_", "llama3_")
"""Runs made with FlashAttention (MosaicML llm-foundry, NVIDIA NeMo 2024, Llama 3). The Megatron-LM
runs of 2021-22, BLOOM and MT-NLG predate it (Dao et al. 2022): their fused softmax kernels still
compute the full s x s scores and keep them in HBM, which the eager trace models."""


def attention_of(run_id: str) -> str:
    return "flash" if run_id.startswith(FLASH_ATTENTION_RUNS) else "eager"


DEFAULT_MBS = 1
"""Microbatch for runs whose source does not state it (Korthikanti et al. 2022 Table 5 rows)."""


@dataclass(frozen=True)
class Comparison:
    run_id: str
    measured_tokens_s_gpu: float
    predicted_tokens_s_gpu: float
    mfu: float
    memory_gib: float
    overrides: tuple[str, ...]

    @property
    def ratio(self) -> float:
        return self.predicted_tokens_s_gpu / self.measured_tokens_s_gpu


def load_runs(path: Path = RUNS_CSV) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _int_or(value: str, default: int) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def run_overrides(run: dict, attention: str | None = None) -> list[str]:
    """Hydra overrides that describe one published run."""
    hw, cluster = next(v for k, v in PRESETS.items() if run["gpu"].startswith(k))
    family = "llama" if run["model"].lower().startswith("llama") else "gpt2"
    recompute = run["recompute"].lower().startswith("full")
    tp = int(run["tp"])
    seq = int(run["seq_len"])
    return [
        "model=llama2" if family == "llama" else "model=megatron_gpt3_175b",
        f"model.name={run['id']}", f"model.family={family}",
        f"model.num_layers={run['num_layers']}", f"model.hidden_size={run['hidden_size']}",
        f"model.num_heads={run['num_heads']}", f"model.num_kv_heads={run['num_kv_heads']}",
        f"model.ffn_hidden_size={run['ffn_hidden_size']}", f"model.vocab_size={run['vocab_size']}",
        f"model.seq_len={seq}", f"model.max_position_embeddings={seq}", f"model.max_tp={tp}",
        f"hw={hw}", f"cluster={cluster}", f"cluster.devices={run['gpus']}",
        f"train.global_batch={run['global_batch']}", f"train.mbs={_int_or(run['mbs'], DEFAULT_MBS)}",
        f"train.recompute={str(recompute).lower()}", "train.optimizer=adam", f"train.tp_widths=[{tp}]",
        f"placement.dp={run['dp']}", f"placement.pp={run['pp']}", f"placement.tp={tp}",
        f"model.attention={attention or attention_of(run['id'])}",
    ]


def compare(run: dict, cache_dir: str | None = None, attention: str | None = None) -> Comparison:
    overrides = run_overrides(run, attention) + ([f"cache_dir={cache_dir}"] if cache_dir else [])
    cfg = compose_config(*overrides)
    result = evaluate_point(cfg, enumerate_space(cfg.hw))
    if result is None or not result.feasible:
        raise RuntimeError(f"{run['id']}: the published placement is infeasible in the model: {getattr(result, 'reason', 'none')}")
    return Comparison(
        run["id"], float(run["tokens_per_s_per_gpu"]), result.tokens_per_s_per_device, result.mfu,
        result.memory_per_device_bytes / 2**30, tuple(overrides),
    )


def short_source(run: dict) -> str:
    """"First author et al., arXiv id, table" from the CSV's full citation."""
    lead = run["source"].split(",")[0]
    first = lead.split("(")[0].strip() if "(" in lead else f"{lead.split(' ')[-1]} et al."
    arxiv = re.search(r"arXiv:?\s?(\d{4}\.\d{4,5})", run["source"])
    where = f"arXiv:{arxiv.group(1)}" if arxiv else run["framework"]
    return f"{first}, {where}, {run['table'].split('(')[0].strip()}"


def comparison_table(comparisons: list[Comparison], runs: dict[str, dict]) -> pd.DataFrame:
    return pd.DataFrame([
        {
            "run": c.run_id, "gpus": int(runs[c.run_id]["gpus"]), "tp/pp/dp": f"{runs[c.run_id]['tp']}/{runs[c.run_id]['pp']}/{runs[c.run_id]['dp']}",
            "measured tok/s/GPU": c.measured_tokens_s_gpu, "predicted tok/s/GPU": round(c.predicted_tokens_s_gpu, 1),
            "predicted/measured": round(c.ratio, 3), "predicted MFU": round(c.mfu, 3), "memory GiB": round(c.memory_gib, 1),
            "source": short_source(runs[c.run_id]),
        }
        for c in comparisons
    ])


def median_abs_error(comparisons: list[Comparison]) -> float:
    return float(np.median([abs(c.ratio - 1.0) for c in comparisons]))
