"""`python -m phaze.run` end to end on a tiny model: exit 0, a parent run in MLflow with the model's
parameter count and the study's result; an unknown model exits 2 listing the available ones."""

import subprocess
import sys

import mlflow
import pytest

from tests.test_search_study import TINY_MODEL

pytestmark = pytest.mark.slow

HIDDEN, VOCAB, POSITIONS, LAYERS = 256, 1000, 128, 2
GPT2_TINY_PARAMS = VOCAB * HIDDEN + POSITIONS * HIDDEN + LAYERS * (12 * HIDDEN**2 + 13 * HIDDEN) + 2 * HIDDEN
"""GPT-2 with tied LM head: token and position embeddings, per layer QKV (3h^2+3h), out-proj (h^2+h),
MLP (8h^2+5h, ffn 4h) and two layer norms (4h), plus the final layer norm (2h)."""


def phaze_run(tmp_path, *overrides):
    return subprocess.run(
        [sys.executable, "-m", "phaze.run", *overrides, f"cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )


def test_run_exits_0_and_logs_the_study(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = phaze_run(tmp_path, *TINY_MODEL, "hw=tiny_grid", "hw.inter_op_parallel=false", f"tracking.uri={uri}",
                     f"search.storage=sqlite:///{tmp_path / 'studies.db'}", "model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{GPT2_TINY_PARAMS / 1e9:.3f} B parameters" in proc.stdout
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["phaze"], filter_string="tags.phaze_role = 'study'")
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["metrics.model.params"] == GPT2_TINY_PARAMS
    assert run["metrics.best.throughput_seq_s"] > 0 and run["metrics.baseline.throughput_seq_s"] > 0
    assert run["metrics.speedup_vs_baseline"] == pytest.approx(run["metrics.best.throughput_seq_s"] / run["metrics.baseline.throughput_seq_s"])


def test_unknown_model_lists_the_available_ones(tmp_path):
    proc = phaze_run(tmp_path, "model=nosuchmodel")
    assert proc.returncode == 2
    for name in ("bertlarge", "gpt2", "llama2", "megatron_gpt3_175b", "opt", "opt_6.7b"):
        assert name in proc.stderr
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "studies.db").exists()
