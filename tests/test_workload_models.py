"""Models built from their published configuration on `meta`: parameter counts."""

import pytest

from phaze.workload.families import count_params
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
