"""Several models in one study (`model=[a,b]`, PHAZE's common architecture): the objective is their
mean throughput, the bounds stay true, pruning keeps the optimum, and each model keeps its own config."""

import numpy as np
import pytest

from phaze.config import compose_config, models_of
from phaze.search import run_study, trials_frame
from tests.test_search_study import TINY_MODEL

pytestmark = pytest.mark.slow

SINGLE = [o for o in TINY_MODEL if not o.startswith("model=")] + ["model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    cache = tmp_path_factory.mktemp("multi-cache")
    return SINGLE + ["hw=tiny_grid", "hw.inter_op_parallel=false", f"cache_dir={cache}", "search.storage=memory", "tracking.enabled=false"]


def grid_values(base, model: str):
    out = run_study(compose_config(*base, f"model={model}", "search=grid", "search.prune=false"), progress=False)
    return trials_frame(out).set_index("point").value.sort_index()


def test_models_are_composed_one_by_one():
    cfg = compose_config("model=[llama2,gpt2]", "model.num_layers=3")
    names = [(c.model.name, c.model.family, c.model.num_layers, c.model.expert.pp) for c in models_of(cfg)]
    assert names == [("llama2", "llama", 3, 8), ("gpt2", "gpt2", 3, 32)]


def test_common_architecture_maximises_the_mean_throughput(base):
    per_model = [grid_values(base, m) for m in ("gpt2", "opt")]
    mean = (per_model[0] + per_model[1]) / 2
    for sampler in ("grid", "bound"):
        out = run_study(compose_config(*base, "model=[gpt2,opt]", f"search={sampler}"), progress=False)
        assert out.evaluator.model_names == ["gpt2", "opt"]
        assert out.best.throughput_seq_s == pytest.approx(mean.max(), rel=1e-9)
        assert [out.best.results[m].throughput_seq_s for m in ("gpt2", "opt")] == pytest.approx([v.loc[out.best_index] for v in per_model], rel=1e-9)
        assert all(out.baseline.results[m].throughput_seq_s > 0 for m in ("gpt2", "opt"))
        ratios = [out.best.results[m].throughput_seq_s / out.baseline.results[m].throughput_seq_s for m in ("gpt2", "opt")]
        assert out.speedup == pytest.approx(np.mean(ratios), rel=1e-12)
        df = trials_frame(out)
        pruned = df[df.state == "PRUNED"]
        assert (mean.loc[pruned.point].to_numpy() <= pruned.bound.to_numpy() * (1 + 1e-12)).all()
