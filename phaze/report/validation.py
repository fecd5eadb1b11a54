"""Predicted vs measured training throughput (and memory) for published runs (docs/validation_runs.csv).

Each run of the CSV becomes config overrides: its architecture, the GPU and cluster presets, its
framework as a training preset (conf/train/: which overlaps it assumes), and its published placement
(dp, pp, tp, cp, vp, microbatch, global batch, recompute, sequence parallelism, ZeRO stage, TP
overlap, attention kernel; for a mixture of experts its experts, routing and expert parallelism); `phaze.pipeline.evaluate_point` predicts it and the ratio to the measured
tokens/s per GPU is reported, with the predicted memory per GPU against the published figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hydra.errors import HydraException  # noqa: E402
from omegaconf.errors import OmegaConfBaseException  # noqa: E402

from phaze.config import compose_config, model_job  # noqa: E402
from phaze.config_check import check_choices, check_config, one_line  # noqa: E402
from phaze.config_values import ConfigError  # noqa: E402
from phaze.hardware.space import enumerate_space  # noqa: E402
from phaze.pipeline import evaluate_point  # noqa: E402
from phaze.report.first_seen import FIRST_SEEN_COLUMNS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RUNS_CSV = REPO / "docs" / "validation_runs.csv"

REQUIRED_COLUMNS = (
    "id", "model", "family", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
    "seq_len", "hw", "cluster", "gpus", "gpus_per_node", "framework", "tp", "pp", "dp", "cp", "vp", "mbs", "global_batch",
    "recompute", "sp", "zero", "tp_comm_overlap", "attention", "measured_tokens_per_s_per_gpu",
)
"""Columns every runs file has (docs/validation.md says what each holds). A run's measured throughput may be
empty when it is there for its memory figure (measured_memory_gib) only."""
MOE_COLUMNS = ("num_experts", "experts_per_token", "expert_ffn_hidden_size", "num_shared_experts", "capacity_factor", "ep")
"""A mixture of experts' architecture, routing assumption and expert-parallel width (empty for a dense run)."""
OPTIONAL_COLUMNS = ("activation", "dropout", "tie_word_embeddings", "measured_memory_gib", "memory_measure", "ratio_of", "overrides",
                    "source", "table", "notes", "precision") + MOE_COLUMNS + FIRST_SEEN_COLUMNS
"""Columns a runs file may have; empty when absent."""
FAMILY_BASES = {"gpt2": "gpt2", "llama": "llama2", "starcoder2": "llama2", "opt": "opt", "bert": "bertlarge",
                "mixtral": "mixtral_8x7b", "qwen2_moe": "qwen_moe_a2.7b", "olmoe": "olmoe_1b_7b", "deepseek_v2": "deepseek_v2_lite"}
"""model.family -> the conf/model preset whose fields a run overrides."""
GIB = 2**30


def resolve_runs_path(path: str | Path) -> Path:
    """`path` as given (relative to the working directory), else relative to the repository."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    return REPO / p


def load_runs(path: str | Path = RUNS_CSV) -> pd.DataFrame:
    """The runs file as strings, with every optional column present; ValueError naming missing columns."""
    frame = pd.read_csv(resolve_runs_path(path), dtype=str, keep_default_na=False)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; a runs file has {list(REQUIRED_COLUMNS)} (and optionally {list(OPTIONAL_COLUMNS)})")
    for column in OPTIONAL_COLUMNS:
        if column not in frame.columns:
            frame[column] = ""
    if frame["id"].duplicated().any():
        raise ValueError(f"{path}: repeated run ids {sorted(frame.id[frame.id.duplicated()])}")
    empty = frame.id[(frame.measured_tokens_per_s_per_gpu == "") & (frame.measured_memory_gib == "")].tolist()
    if empty:
        raise ValueError(f"{path}: runs {empty} have neither measured_tokens_per_s_per_gpu nor measured_memory_gib")
    return frame


def _number(value: str) -> float:
    return float(value) if value else float("nan")


def run_overrides(run: dict) -> list[str]:
    """Hydra overrides that describe one published run."""
    if run["family"] not in FAMILY_BASES:
        raise ValueError(f"run {run['id']}: family={run['family']!r}; allowed: {sorted(FAMILY_BASES)}")
    seq = int(run["seq_len"])
    out = [
        f"model={FAMILY_BASES[run['family']]}", f"model.name={run['id']}", f"model.family={run['family']}",
        *(f"model.{k}={run[k]}" for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size")),
        f"model.seq_len={seq}", f"model.max_position_embeddings={seq}", f"model.max_tp={run['tp']}",
        f"hw={run['hw']}", f"cluster={run['cluster']}", f"cluster.devices={run['gpus']}", f"cluster.node_size={run['gpus_per_node']}",
        f"train={run['framework']}", f"train.global_batch={run['global_batch']}", f"train.mbs={run['mbs']}",
        f"train.recompute={run['recompute']}", f"train.tp_widths=[{run['tp']}]", f"train.attention={run['attention']}",
        f"placement.dp={run['dp']}", f"placement.pp={run['pp']}", f"placement.tp={run['tp']}", f"placement.cp={run['cp']}",
        f"placement.vp={run['vp']}", f"placement.zero={run['zero']}", f"placement.sp={run['sp']}",
        f"placement.tp_comm_overlap={run['tp_comm_overlap']}",
    ]
    if run.get("activation"):
        out.append(f"model.activation={run['activation']}")
    if run.get("dropout"):
        out.append(f"model.dropout={run['dropout']}")
    if run.get("tie_word_embeddings"):
        out.append(f"model.tie_word_embeddings={run['tie_word_embeddings']}")
    out += ["model.published_params=0", "model.published_active_params=0"]
    out += [f"model.{k}={run[k] or 0}" for k in MOE_COLUMNS[:4]]
    if run.get("capacity_factor"):
        out.append(f"train.capacity_factor={run['capacity_factor']}")
    if run.get("ep"):
        out.append(f"placement.ep={run['ep']}")
    if run.get("precision"):
        out.append(f"train.precision={run['precision']}")
    return out + run.get("overrides", "").split()


@dataclass(frozen=True)
class Comparison:
    """One run predicted; `reason` says why the model finds its published placement infeasible ('' when it fits:
    the prediction is then reported anyway, as the plan's time and memory)."""

    run_id: str
    measured_tokens_s_gpu: float
    predicted_tokens_s_gpu: float
    mfu: float
    memory_gib: float
    measured_memory_gib: float
    """NaN when the source publishes no memory figure."""
    time_per_batch_s: float
    breakdown: dict = field(default_factory=dict)
    reason: str = ""

    @property
    def ratio(self) -> float:
        return self.predicted_tokens_s_gpu / self.measured_tokens_s_gpu

    @property
    def memory_ratio(self) -> float:
        return self.memory_gib / self.measured_memory_gib


def run_config(run: dict, cache_dir: str | None = None):
    """The job config of one published run, checked as `phaze.evaluate` checks a fixed placement; a bad value is a
    ConfigError naming the run and the field, so that a runs file is refused before any run is evaluated."""
    try:
        overrides = run_overrides(run)
        check_choices(overrides)
        cfg = compose_config(*overrides, *([f"cache_dir={cache_dir}"] if cache_dir else []))
        check_config(cfg)
    except (ValueError, HydraException, OmegaConfBaseException) as e:  # a ConfigError is a ValueError
        raise ConfigError(f"validate.runs, run {run['id']}: {one_line(e)}") from None
    return cfg


def compare(run: dict, cfg) -> Comparison:
    """Predict one run (its config from run_config) with its published placement. A plan the model finds infeasible
    (it does not fit the memory) keeps its reason; its throughput is what the plan's time would give."""
    result = evaluate_point(model_job(cfg), enumerate_space(cfg.hw))
    if result is None:
        raise RuntimeError(f"{run['id']}: the published placement could not be costed")
    tokens = int(cfg.train.global_batch) * int(cfg.model.seq_len) / result.strategy.devices_used
    return Comparison(
        run["id"], _number(run["measured_tokens_per_s_per_gpu"]), tokens / plan_time_s(result), result.mfu,
        result.memory_per_device_bytes / GIB, _number(run.get("measured_memory_gib", "")), plan_time_s(result),
        dict(result.breakdown), "" if result.feasible else result.reason,
    )


def plan_time_s(result) -> float:
    """The plan's time per batch, also for a plan flagged infeasible (its breakdown still sums to it)."""
    return result.time_per_batch_s if result.feasible else float(sum(result.breakdown.values())) or float("inf")


def comparison_table(comparisons: list[Comparison], runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: devices, sequence length, placement, measured and predicted tokens/s per GPU, their ratio, MFU,
    memory, source."""
    by_id = runs.set_index("id")
    rows = []
    for c in comparisons:
        r = by_id.loc[c.run_id]
        rows.append({
            "run": c.run_id, "hw": r.hw, "framework": r.framework, "gpus": int(r.gpus), "seq": int(r.seq_len),
            "tp/pp/dp/cp/vp/ep": f"{r.tp}/{r.pp}/{r.dp}/{r.cp}/{r.vp}/{r.get('ep') or 1}",
            "experts": f"{r.num_experts} top-{r.experts_per_token}" if r.get("num_experts") else "-",
            "rc/sp/zero": f"{r.recompute}/{'sp' if r.sp.lower() == 'true' else '-'}/{r.zero}",
            "precision": r.get("precision") or "bf16",
            "measured tok/s/GPU": None if math.isnan(c.measured_tokens_s_gpu) else c.measured_tokens_s_gpu,
            "predicted tok/s/GPU": round(c.predicted_tokens_s_gpu, 1),
            "predicted/measured": None if math.isnan(c.ratio) else round(c.ratio, 3), "predicted MFU": round(c.mfu, 3),
            "memory GiB": round(c.memory_gib, 1),
            "measured memory GiB": None if math.isnan(c.measured_memory_gib) else c.measured_memory_gib,
            "source": short_source(r.source, r.table), **({"infeasible": c.reason} if c.reason else {}),
        })
    return pd.DataFrame(rows)


def short_source(source: str, table: str) -> str:
    """The citation's lead (authors or document) and its table."""
    lead = source.split(";")[0].split(". ")[0].strip()
    return f"{lead}, {table}".strip(", ")


def error_summary(comparisons: list[Comparison]) -> dict:
    """Median and maximum absolute throughput error over the runs that publish throughput and the signed median
    (positive: predicted too fast), the same for memory over those that publish it, and how many runs the model finds
    infeasible (counted in the errors at their plan's time)."""
    signed = np.array([c.ratio - 1.0 for c in comparisons if not math.isnan(c.measured_tokens_s_gpu)])
    errors = np.abs(signed)
    mem = np.array([abs(c.memory_ratio - 1.0) for c in comparisons if not math.isnan(c.measured_memory_gib)])
    out = {"n_runs": len(errors), "median_abs_error": float(np.median(errors)), "max_abs_error": float(errors.max()),
           "median_signed_error": float(np.median(signed)), "n_infeasible": sum(1 for c in comparisons if c.reason)}
    if len(mem):
        out.update({"n_memory": len(mem), "median_abs_memory_error": float(np.median(mem)), "max_abs_memory_error": float(mem.max())})
    return out


def ratio_table(comparisons: list[Comparison], runs: pd.DataFrame) -> pd.DataFrame:
    """For each run whose `ratio_of` names another: its iteration time over that run's, measured and predicted
    (Korthikanti et al. 2022 Table 5: full recompute over sequence parallelism + selective recompute; an FP8 run
    over the same recipe in BF16)."""
    by_id = {c.run_id: c for c in comparisons}
    rows = []
    for _, r in runs.iterrows():
        ref = r.get("ratio_of", "")
        if not ref or r.id not in by_id or ref not in by_id:
            continue
        this, other = by_id[r.id], by_id[ref]
        # Iteration times are tokens per GPU over tokens/s per GPU; both runs have the same batch and GPUs.
        measured = other.measured_tokens_s_gpu / this.measured_tokens_s_gpu
        predicted = other.predicted_tokens_s_gpu / this.predicted_tokens_s_gpu
        rows.append({"run": r.id, "over": ref, "measured time ratio": round(measured, 3), "predicted time ratio": round(predicted, 3),
                     "error": round(predicted / measured - 1.0, 3)})
    return pd.DataFrame(rows, columns=["run", "over", "measured time ratio", "predicted time ratio", "error"])


def comparison_figure(comparisons: list[Comparison]):
    """Predicted against measured tokens/s per GPU (log-log), with the y = x line and +-7% / +-20% bands."""
    comparisons = [c for c in comparisons if not math.isnan(c.measured_tokens_s_gpu)]
    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    measured = np.array([c.measured_tokens_s_gpu for c in comparisons])
    predicted = np.array([c.predicted_tokens_s_gpu for c in comparisons])
    lo, hi = 0.7 * min(measured.min(), predicted.min()), 1.4 * max(measured.max(), predicted.max())
    line = np.array([lo, hi])
    ax.plot(line, line, color="black", lw=1, label="predicted = measured")
    for band, style in ((0.07, "--"), (0.20, ":")):
        ax.plot(line, line * (1 + band), color="grey", ls=style, lw=0.8, label=f"±{band:.0%}")
        ax.plot(line, line * (1 - band), color="grey", ls=style, lw=0.8)
    ax.scatter(measured, predicted, s=22, zorder=3)
    for c in comparisons:
        ax.annotate(c.run_id, (c.measured_tokens_s_gpu, c.predicted_tokens_s_gpu), fontsize=5, xytext=(3, 2), textcoords="offset points")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured tokens/s per GPU",
           ylabel="predicted tokens/s per GPU", title="phaze vs published training runs")
    ax.legend(loc="upper left", fontsize=8)
    return fig
