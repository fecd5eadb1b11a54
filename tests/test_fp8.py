"""FP8 training (train.precision=fp8): which GEMMs run in FP8, their time on an H100, the bytes FP8 keeps."""

from __future__ import annotations

import numpy as np
import pytest

from phaze.cost import Network, op_latencies
from phaze.hardware import enumerate_space
from phaze.placement.memory import state_bytes_per_param_byte
from phaze.workload.extract import extract_uncached, extract_workload
from phaze.workload.precision import (FP8_CAST, FP8_TRANSPOSE, FP8_WEIGHT_CACHE_BYTES_PER_PARAM, fp8_weight_cache_bytes_per_param_byte,
                                      weight_bytes_per_param_byte, with_precision)
from tests.conftest import compose_cfg
from tests.cost_cases import matmul_op, ops_frame

NET = Network(devices=8, node_size=8, intra_bytes_s=1e11, inter_bytes_s=1e11)


def test_an_fp8_gemm_computes_at_the_h100s_measured_multiple_of_the_bf16_rate():
    points = enumerate_space(compose_cfg("hw=h100").hw)
    n = 8192  # compute-bound at both rates: 1.1 PFLOP against ~0.2 GB of operands
    ops = ops_frame([matmul_op(1, n, n, n), matmul_op(1, n, n, n, elem_bytes=1)])
    ops["fp8"] = [False, True]
    t = op_latencies(ops, points, NET, tp=1).parallel_s[:, 0]
    fixed_s = float(points.op_overhead_s[0] + points.matmul_fixed_s[0])
    assert float(points.fp8_matmul_ratio[0]) == 2.0 and float(points.fp8_matmul_efficiency[0]) == 0.90
    assert (t[1] - fixed_s) == pytest.approx((t[0] - fixed_s) / (2 * 0.90), rel=1e-12)  # twice the peak at 0.90 of its efficiency
    ideal = enumerate_space(compose_cfg("hw=h100", "hw.fp8_matmul_efficiency=1").hw)
    t_ideal = op_latencies(ops, ideal, NET, tp=1).parallel_s[:, 0]
    assert t_ideal[0] == t[0] and (t_ideal[1] - fixed_s) == pytest.approx((t[0] - fixed_s) / 2, rel=1e-12)


@pytest.fixture(scope="module")
def llama_layers(tmp_path_factory):
    cfg = compose_cfg("model=llama2")
    bf16 = extract_workload(cfg.model, 1, 2, (1,), cache_dir=tmp_path_factory.mktemp("wl"))
    fp8 = with_precision(bf16, "fp8")
    shard = next(iter(bf16.graphs))
    return bf16.graphs[shard], fp8.graphs[shard]


def test_only_the_layers_linear_gemms_run_in_fp8(llama_layers):
    bf16, fp8 = llama_layers
    layer = fp8["layer"]
    # Llama-2-7B block: q, k, v, o, gate, up, down = 7 linear GEMMs forward; data and weight gradient each backward.
    assert int(layer.fwd.ops.fp8.sum()) == 7 and int(layer.bwd.ops.fp8.sum()) == 14
    assert set(layer.fwd.ops.target[layer.fwd.ops.fp8]) == {"mm"}
    assert not layer.fwd.ops.fp8[layer.fwd.ops.target == "bmm"].any()  # the attention core stays bf16
    assert fp8["post"] is bf16["post"] and fp8["pre"] is bf16["pre"]  # LM head and embedding stay bf16
    mm = layer.fwd.ops[layer.fwd.ops.fp8]
    same_ops = bf16["layer"].fwd.ops.set_index("name").loc[mm.name]
    assert np.allclose(mm.bytes_read, same_ops.bytes_read / 2)  # 1-byte operands
    assert layer.matmul_flops() == bf16["layer"].matmul_flops()


def test_activations_kept_only_for_fp8_gemms_are_kept_in_fp8(llama_layers):
    bf16, fp8 = llama_layers
    s, h, ffn = 4096, 4096, 11008
    # The two RMSNorm outputs (into q/k/v and into gate/up), the attention output (into o) and the SwiGLU
    # product (into down) are saved as FP8 copies: half of their bf16 bytes. Everything else keeps bf16.
    shed_bytes = (3 * s * h + s * ffn) * 2 / 2
    assert bf16["layer"].saved_bytes - fp8["layer"].saved_bytes == shed_bytes


def test_fp8_weight_caches_in_the_state_per_parameter():
    # Adam in bf16: 2 (weight) + 2 (gradient) + 12 (moments and master) + 2 (FP8 weight and transpose) bytes per parameter.
    cache = fp8_weight_cache_bytes_per_param_byte("fp8", 2)
    assert cache == FP8_WEIGHT_CACHE_BYTES_PER_PARAM / 2 == 1.0
    assert state_bytes_per_param_byte("adam", 2, weight_cache_copies=cache) * 2 == 18.0
    assert fp8_weight_cache_bytes_per_param_byte("bf16", 2) == 0.0
    # ZeRO-3 shards the caches with the weights.
    assert state_bytes_per_param_byte("sgd", 2, zero=3, shards=4, weight_cache_copies=cache) == pytest.approx((1 + 1) / 4 + 1 / 4)


def test_fp8_weights_keep_one_byte_and_their_transpose_instead_of_bf16_and_two_caches():
    # train.fp8_params: 1 (FP8 weight) + 1 (its FP8 transpose) + 4 (fp32 gradient) + 12 (moments and fp32 master) / 8
    # ZeRO-1 shards = 7.5 bytes per parameter, against 2 + 2 + 4 + 12 / 8 = 9.5 with bf16 weights and FP8 caches.
    weights = weight_bytes_per_param_byte(2, fp8_params=True)
    cache = fp8_weight_cache_bytes_per_param_byte("fp8", 2, fp8_params=True)
    assert (weights, cache) == (0.5, 0.5)
    assert state_bytes_per_param_byte("adam", 2, 1, 8, 4, weight_cache_copies=cache, weight_copies=weights) * 2 == pytest.approx(7.5)
    assert state_bytes_per_param_byte("adam", 2, 1, 8, 4, weight_cache_copies=fp8_weight_cache_bytes_per_param_byte("fp8", 2)) * 2 == pytest.approx(9.5)
    assert weight_bytes_per_param_byte(2, fp8_params=False) == 1.0


def test_fp8_operands_are_cast_once_per_tensor(llama_layers):
    """Llama-2-7B (eager kernels, s = 4096 tokens, h = 4096, f = 11008): forward, one cast-transpose per distinct GEMM
    input (the normed x read by q, k and v; the attention output; the normed x read by gate and up; the SwiGLU
    product), each reading its bf16 tensor and writing an FP8 copy and an FP8 transpose (2 + 1 + 1 bytes per
    element); backward, one per data-gradient GEMM's output gradient (q, k, v, o, gate, up, down)."""
    _, fp8 = llama_layers
    s, h, f = 4096, 4096, 11008
    layer = fp8["layer"]
    fwd = layer.fwd.ops[layer.fwd.ops.target == FP8_CAST]
    bwd = layer.bwd.ops[layer.bwd.ops.target == FP8_CAST]
    assert sorted(fwd.numel_out) == [s * h] * 3 + [s * f]
    assert sorted(bwd.numel_out) == [s * h] * 5 + [s * f] * 2
    for casts in (fwd, bwd):
        assert (casts.bytes_read == 2 * casts.numel_out).all() and (casts.bytes_written == 2 * casts.numel_out).all()
    for graph in (layer.fwd, layer.bwd):  # still a DAG in topological order, every cast before the GEMMs that read it
        assert (graph.edges.src < graph.edges.dst).all()
        cast_ids = set(graph.ops.op_id[graph.ops.target == FP8_CAST])
        readers = graph.edges[graph.edges.src.isin(cast_ids)].dst
        assert graph.ops.fp8.to_numpy()[readers.to_numpy()].all() and len(graph.without_views().ops) < len(graph.ops)


def test_a_fused_norm_writes_the_fp8_copy_and_only_its_transpose_is_left():
    """With fused kernels the norms feeding q/k/v and gate/up are Transformer Engine's norm-linear modules: their FP8
    copy comes out of the norm, and a transpose (1 byte read, 1 written per element) is all that is left."""
    tiny = ["model=llama2", "model.num_layers=2", "model.hidden_size=64", "model.num_heads=4", "model.num_kv_heads=4", "model.ffn_hidden_size=96",
            "model.vocab_size=256", "model.seq_len=16", "model.max_position_embeddings=64", "model.attention=flash"]
    fused = with_precision(extract_uncached(compose_cfg(*tiny, "model.fused_kernels=true").model, 2, 2, (1,)), "fp8").part(1, "layer")
    ops = fused.fwd.ops
    transposes, casts = ops[ops.target == FP8_TRANSPOSE], ops[ops.target == FP8_CAST]
    assert sorted(transposes.numel_out) == [32 * 64] * 2 and sorted(casts.numel_out) == [32 * 64, 32 * 96]
    assert (transposes.bytes_read == transposes.numel_out).all() and (transposes.bytes_written == transposes.numel_out).all()


def test_behind_sequence_parallel_gathers_a_norm_output_still_needs_only_its_transpose():
    """GPT-2 style layer, TP 2 with sequence parallelism: the LayerNorm runs on the sequence shard and its output is
    all-gathered before the QKV and MLP-up GEMMs (Transformer Engine gathers the norm's FP8 output), so those two take
    a transpose of the gathered T x h tensor; the attention output (T x h / 2 per rank) and the GeLU output (T x f / 2)
    are cast."""
    tiny = ["model=gpt2", "model.num_layers=2", "model.hidden_size=64", "model.num_heads=4", "model.num_kv_heads=4",
            "model.ffn_hidden_size=256", "model.vocab_size=256", "model.seq_len=16", "model.max_position_embeddings=64",
            "model.attention=flash", "model.activation=gelu_pytorch_tanh", "model.fused_kernels=true", "model.dropout=0",
            "model.max_tp=2"]
    workload = extract_uncached(compose_cfg(*tiny).model, 2, 2, (2,), (True,))
    ops = with_precision(workload, "fp8").part(2, "layer", sp=True).fwd.ops
    tokens, h = 2 * 16, 64
    assert sorted(ops[ops.target == FP8_TRANSPOSE].numel_out) == [tokens * h] * 2
    assert sorted(ops[ops.target == FP8_CAST].numel_out) == [tokens * h // 2, tokens * 256 // 2]
