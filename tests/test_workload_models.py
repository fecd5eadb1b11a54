"""Models built from their published configuration on `meta`: parameter counts."""

import pytest

from phaze.workload.families import FAMILIES, count_params
from phaze.workload.model_rules import FAMILY_NAMES
from tests.conftest import compose_cfg

# Published totals: Llama-2-7B (arXiv 2307.09288, HF 6.74 B), GPT-2 XL (HF gpt2-xl, 1.56 B),
# BERT-large with its pre-training heads as built (3.35e8), OPT-6.7B (HF 6.66 B), GPT-3 175B (arXiv 2005.14165).
PUBLISHED = [
    ("llama2", 6.74e9, 0.005),
    ("gpt2", 1.56e9, 0.005),
    ("bertlarge", 3.35e8, 0.005),
    ("opt_6.7b", 6.66e9, 0.005),
    ("megatron_gpt3_175b", 1.75e11, 0.01),
]


@pytest.mark.parametrize("model,published,tol", PUBLISHED)
def test_parameter_count_matches_published(model, published, tol):
    params = count_params(compose_cfg(f"model={model}").model)[0]
    assert abs(params - published) / published <= tol, f"{model}: {params:.4e} vs {published:.4e}"


def test_llama2_exact_parameter_count():
    # 32 layers x (4 h^2 + 3 h f + 2 h) + 2 V h + h, with h=4096, f=11008, V=32000 (untied head)
    h, f, v, n = 4096, 11008, 32000, 32
    assert count_params(compose_cfg("model=llama2").model)[0] == n * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h


def test_a_head_width_apart_from_the_hidden_size():
    """model.head_dim: MaxText's 2023 52B (TPU v4 validation) has 32 heads of 256 (8192 wide) in a 12288-wide stream;
    as a Starcoder2 block (biases, LayerNorm, non-gated MLP) that is 52.35 B parameters, counted by hand."""
    h, heads, d, f, n, v = 12288, 32, 256, 49152, 32, 32768
    cfg = compose_cfg("model=llama2", "model.family=starcoder2", "model.activation=relu", "model.tie_word_embeddings=false",
                      f"model.hidden_size={h}", f"model.num_heads={heads}", f"model.num_kv_heads={heads}", f"model.head_dim={d}",
                      f"model.ffn_hidden_size={f}", f"model.num_layers={n}", f"model.vocab_size={v}", "model.seq_len=2048",
                      "model.max_position_embeddings=2048", "model.published_params=0").model
    attention = 4 * h * heads * d + 3 * heads * d + h  # q, k, v, o and their biases
    mlp = 2 * h * f + f + h
    layer = attention + mlp + 2 * 2 * h  # two LayerNorms
    assert count_params(cfg)[0] == n * layer + 2 * v * h + 2 * h
    assert count_params(cfg)[0] / 1e9 == pytest.approx(52.35, abs=0.005)


def test_forward_only_keeps_the_forward_and_the_weights():
    """train=inference: every part's backward is empty and nothing is saved for it; weights and forward unchanged."""
    from phaze.workload.extract import extract_workload
    from phaze.workload.inference import forward_only

    cfg = compose_cfg("model=gpt2", "model.num_layers=2", "model.hidden_size=256", "model.num_heads=4", "model.num_kv_heads=4",
                      "model.ffn_hidden_size=1024", "model.seq_len=128", "model.max_position_embeddings=128", "model.vocab_size=1000").model
    w = extract_workload(cfg, 1, 2, (1,))
    f = forward_only(w)
    for part in ("pre", "layer", "post"):
        g, h = w.part(1, part), f.part(1, part)
        assert len(h.bwd) == 0 and h.saved_bytes == 0.0 and h.fwd is g.fwd and h.param_bytes == g.param_bytes
    assert f.train_matmul_flops_per_seq(1) == pytest.approx(w.train_matmul_flops_per_seq(1) / 3, rel=0.01)  # backward: 2x forward


def test_the_config_check_knows_every_family_built():
    """model.family is checked against model_rules.FAMILY_NAMES (no torch at a command's start): exactly the families
    that families.FAMILIES builds."""
    assert sorted(FAMILY_NAMES) == sorted(FAMILIES)
