"""The traced training step: closed-form matmul FLOPs, TP split, collectives, caching."""

import pickle
import time

import numpy as np
import pandas as pd
import pytest

from phaze.workload import extract as extract_mod
from phaze.pipeline import load_workloads
from phaze.run import model_summaries
from phaze.workload.extract import extract_jobs, extract_workload, workload_job
from phaze.workload.families import build_parts
from phaze.workload.graph import OpGraph
from phaze.workload.trace import part_graph
from phaze.config import model_job, typed_config
from phaze.config_values import ConfigError
from tests.conftest import compose_cfg
from tests.test_search_study import TINY_MODEL

SPAWNED_TRACE_WAIT_S = 300.0
"""How long this process's trace waits for the spawned process's (which first imports torch and transformers): far
more than that takes on a loaded 2-core machine."""


@pytest.fixture(scope="module")
def llama(workload_cache):
    return extract_workload(compose_cfg("model=llama2").model, mbs=1, tp_widths=(1, 2, 4, 8), cache_dir=workload_cache)


@pytest.fixture(scope="module")
def gpt2(workload_cache):
    return extract_workload(compose_cfg("model=gpt2").model, mbs=1, tp_widths=(1,), cache_dir=workload_cache)


def closed_form_train_matmul_flops(n_layers, tokens, seq, h, layer_linear_params, head_params):
    """Matmul FLOPs of one training step, derived by hand.

    Forward: every linear weight W does one multiply-add per token per entry, 2*tokens*|W| FLOPs;
    attention adds Q K^T and P V, each 2*s*s*h per sequence per layer, i.e. 4*s^2*h per sequence.
    Backward: for every forward matmul, one data-gradient and one weight-gradient matmul of the
    same size (and for Q K^T, P V: two gradient bmms each), so backward = 2x forward.
    Embedding lookups are not matmuls; the LM head is one linear counted once.
    """
    sequences = tokens // seq
    forward = n_layers * (2 * tokens * layer_linear_params + 4 * seq * seq * h * sequences) + 2 * tokens * head_params
    return 3 * forward


def test_llama2_matmul_flops_match_closed_form(llama):
    h, f, v, s = 4096, 11008, 32000, 4096
    expected = closed_form_train_matmul_flops(32, s, s, h, 4 * h * h + 3 * h * f, v * h)
    assert llama.train_matmul_flops_per_seq(1) == pytest.approx(expected, rel=0.02)
    # And the per-sequence total against the looser "6 * params * tokens + attention" form of the issue.
    attention = 32 * 3 * 4 * s * s * h
    assert llama.train_matmul_flops_per_seq(1) == pytest.approx(6 * (llama.params - v * h) * s + attention, rel=0.02)


def test_gpt2_matmul_flops_match_closed_form(gpt2):
    h, v, s = 1600, 50257, 1024
    # GPT-2 block linears: QKV 3h^2, out-proj h^2, FC1 and FC2 4h^2 each = 12 h^2 (biases are not matmul work).
    expected = closed_form_train_matmul_flops(48, s, s, h, 12 * h * h, v * h)
    assert gpt2.train_matmul_flops_per_seq(1) == pytest.approx(expected, rel=0.02)


def test_backward_has_data_and_weight_gradient_matmuls(llama):
    layer = llama.part(1, "layer")
    fwd_mm = layer.fwd.ops[layer.fwd.ops.kind == "matmul"]
    bwd_mm = layer.bwd.ops[layer.bwd.ops.kind == "matmul"]
    assert len(bwd_mm) == 2 * len(fwd_mm) == 18
    assert bwd_mm.flops.sum() == pytest.approx(2 * fwd_mm.flops.sum(), rel=1e-9)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel_split(llama, t):
    one, split = llama.part(1, "layer"), llama.part(t, "layer")
    assert split.matmul_flops() == pytest.approx(one.matmul_flops() / t, rel=0.01)
    assert split.param_bytes == pytest.approx(one.param_bytes / t, rel=0.01)
    assert split.n_collectives() == (2, 2)  # Megatron: after out-proj and FC2; mirrors at QKV and FC1 inputs
    hidden_bytes = 1 * 4096 * 4096 * 2
    fwd_coll = split.fwd.ops[split.fwd.ops.kind == "collective"]
    assert (fwd_coll.comm_bytes == hidden_bytes).all()
    assert llama.part(1, "layer").n_collectives() == (0, 0)


def test_lm_head_and_loss_are_post_layers_counted_once(llama):
    vocab = 32000
    layer_ops = pd.concat([llama.part(1, "layer").fwd.ops, llama.part(1, "layer").bwd.ops])
    assert not layer_ops.mm_n.eq(vocab).any() and not layer_ops.mm_k.eq(vocab).any()
    post = llama.part(1, "post")
    head = post.fwd.ops[(post.fwd.ops.kind == "matmul") & (post.fwd.ops.mm_n == vocab)]
    assert len(head) == 1 and head.flops.iloc[0] == 2 * 4096 * 4096 * vocab
    assert post.fwd.ops.target.eq("_log_softmax").sum() == 1


def test_linear_layers_see_the_microbatch(workload_cache):
    cfg = compose_cfg("model=gpt2").model
    one = extract_workload(cfg, mbs=1, tp_widths=(1,), cache_dir=workload_cache).part(1, "layer")
    two = extract_workload(cfg, mbs=2, tp_widths=(1,), cache_dir=workload_cache).part(1, "layer")
    mm1 = one.fwd.ops[one.fwd.ops.kind == "matmul"]
    mm2 = two.fwd.ops[two.fwd.ops.kind == "matmul"]
    np.testing.assert_allclose(mm2.flops.to_numpy(), 2 * mm1.flops.to_numpy())
    assert two.saved_bytes == pytest.approx(2 * one.saved_bytes, rel=1e-6)


@pytest.mark.parametrize("model", ["llama2", "opt"])
def test_traced_blocks_are_identical(model):
    """Tracing block 0 and block 1 of a two-block model gives the same tables: repeating one is exact."""
    cfg = compose_cfg(f"model={model}").model
    first = part_graph("layer", build_parts(cfg, 1, 2, layer_index=0)["layer"], 2, 1, cfg.seq_len)
    second = part_graph("layer", build_parts(cfg, 1, 2, layer_index=1)["layer"], 2, 1, cfg.seq_len)
    cols = ["target", "kind", "out_shape", "flops", "bytes_read", "bytes_written", "saved_bytes"]
    for a, b in ((first.fwd, second.fwd), (first.bwd, second.bwd)):
        pd.testing.assert_frame_equal(a.ops[cols], b.ops[cols])
        pd.testing.assert_frame_equal(a.edges, b.edges)
    assert first.param_bytes == second.param_bytes and first.saved_bytes == second.saved_bytes


def test_cache_hit_does_not_retrace(workload_cache, monkeypatch, llama):
    def fail(*args, **kwargs):
        raise AssertionError("cache miss: the workload was traced again")

    monkeypatch.setattr(extract_mod, "extract_uncached", fail)
    again = extract_workload(compose_cfg("model=llama2").model, mbs=1, tp_widths=(1, 2, 4, 8), cache_dir=workload_cache)
    assert pickle.dumps(again) == pickle.dumps(llama)
    # A change of architecture is a different key.
    with pytest.raises(AssertionError, match="cache miss"):
        extract_workload(compose_cfg("model=llama2", "model.num_layers=31").model, mbs=1, tp_widths=(1, 2, 4, 8), cache_dir=workload_cache)


def test_processes_trace_what_one_process_traces(tmp_path, monkeypatch):
    """Two processes tracing the microbatch sizes not cached give the workloads one process gives, cached for the
    next call; a size already cached is read, not traced again. This process takes the first size and the spawned
    one the next when it is free (here this process's trace waits until the other has traced its size)."""
    model = compose_cfg("model=gpt2").model
    shards = {"tp_widths": (1, 2), "sp_values": (False, True)}
    extract_workload(model, 2, cache_dir=tmp_path / "both", **shards)
    traced_here = []
    trace = extract_mod.extract_uncached

    def after_the_other(model_cfg, mbs, *args):
        traced_here.append(mbs)
        other = extract_mod.cached_path(model, 4, cache_dir=tmp_path / "both", **shards)
        deadline = time.monotonic() + SPAWNED_TRACE_WAIT_S
        while not other.exists():
            assert time.monotonic() < deadline, "the spawned process traced nothing"
            time.sleep(0.1)
        return trace(model_cfg, mbs, *args)

    def jobs(cache):
        return [workload_job(model, mbs, cache_dir=tmp_path / cache, **shards) for mbs in (1, 2, 4)]

    monkeypatch.setattr(extract_mod, "extract_uncached", after_the_other)
    both = extract_jobs(jobs("both"), processes=2)
    assert traced_here == [1]
    monkeypatch.setattr(extract_mod, "extract_uncached", trace)
    one = extract_jobs(jobs("one"), processes=1)
    assert [w.mbs for w in both] == [1, 2, 4]
    assert all(pickle.dumps(b) == pickle.dumps(o) for b, o in zip(both, one))
    monkeypatch.setattr(extract_mod, "extract_uncached", lambda *a, **k: pytest.fail("a cached workload was traced again"))
    again = extract_jobs(jobs("both"), processes=2)
    assert all(pickle.dumps(a) == pickle.dumps(b) for a, b in zip(again, both))


def test_a_job_asked_twice_is_traced_once(tmp_path, monkeypatch):
    """The same workload asked by two jobs (a run's summary and its search at the same size) is traced once, then
    read from the cache; jobs of other shards are distinct."""
    model = compose_cfg(*TINY_MODEL).model
    traced = []
    trace = extract_mod.extract_uncached

    def counted(model_cfg, mbs, *args):
        traced.append((mbs, args))
        return trace(model_cfg, mbs, *args)

    monkeypatch.setattr(extract_mod, "extract_uncached", counted)
    same = workload_job(model, 2, tp_widths=(1,), cache_dir=tmp_path)
    other = workload_job(model, 2, tp_widths=(1, 2), cache_dir=tmp_path)
    out = extract_jobs([same, other, same], processes=1)
    assert [mbs for mbs, _ in traced] == [2, 2]
    assert list(out[0].tp_widths) == list(out[2].tp_widths) == [1] and list(out[1].tp_widths) == [1, 2]
    assert pickle.dumps(out[0]) == pickle.dumps(out[2])


def test_summaries_trace_what_the_search_reads(tmp_path, monkeypatch):
    """model_summaries traces the searched workloads along with the summary's, so that load_workloads then traces
    nothing; the summary counts the model's parameters (2 layers of 12 h^2 + embeddings and positions)."""
    cfg = compose_cfg(*TINY_MODEL, f"cache_dir={tmp_path}")
    summaries = model_summaries(cfg)
    hidden, vocab, seq = 256, 1000, 128
    assert list(summaries) == [cfg.model.name]
    assert summaries[cfg.model.name].params == pytest.approx(2 * 12 * hidden**2 + (vocab + seq) * hidden, rel=0.01)
    monkeypatch.setattr(extract_mod, "extract_uncached", lambda *a, **k: pytest.fail("the search traced a workload again"))
    assert sorted(load_workloads(model_job(cfg))) == [1, 2]


def test_without_views_keeps_dependencies():
    # a -> v1 -> v2 -> b ; a -> c ; v1 -> c      (v1, v2 are views)
    ops = pd.DataFrame({"op_id": range(5), "kind": ["elementwise", "view", "view", "matmul", "elementwise"]})
    edges = pd.DataFrame({"src": [0, 1, 2, 0, 1], "dst": [1, 2, 3, 4, 4], "bytes": [1.0] * 5})
    g = OpGraph(ops, edges).without_views()
    assert g.ops.kind.tolist() == ["elementwise", "matmul", "elementwise"]
    assert sorted(map(tuple, g.edges[["src", "dst"]].to_numpy().tolist())) == [(0, 1), (0, 2)]


def test_invalid_microbatch_rejected():
    with pytest.raises(ConfigError, match=r"train\.mbs=0: allowed values are positive integers"):
        typed_config(compose_cfg("model=gpt2", "train.mbs=0"))


def test_embedding_reads_only_the_gathered_rows(llama):
    pre = llama.part(1, "pre").fwd.ops
    emb = pre[pre.target == "embedding"].iloc[0]
    tokens, hidden = 4096, 4096
    # token ids (int64) plus one bf16 row of the table per token; not the 32000-row table
    assert emb.bytes_read == tokens * 8 + tokens * hidden * 2
    assert emb.bytes_written == tokens * hidden * 2
