"""Each config group checks its own fields when its dataclass is built (composed and typed at an entry point, or
built by hand), naming the field and its allowed values; the string choices' allowed values live in one enum each,
and the stages' tables of them are those enums."""

from __future__ import annotations

import pytest

from phaze.config import compose_config, typed_config
from phaze.config_values import ConfigError
from phaze.cost.network import ALGORITHMS
from phaze.placement.layouts import STAGE_LAYER_RULES
from phaze.schema import ClusterCfg, ExpertCfg, ScheduleCfg, SearchCfg, TrainCfg
from phaze.schema.choices import CollectiveAlgorithm, Objective, PlacementSearch, Sampler, StageLayers
from phaze.search.evaluator import PLACEMENTS
from phaze.search.strategies import STRATEGIES
from phaze.search.study import OBJECTIVES


def test_the_stages_tables_of_choices_are_the_schema_enums():
    assert STRATEGIES.keys() == set(Sampler.values())
    pairs = [(STAGE_LAYER_RULES, StageLayers), (ALGORITHMS, CollectiveAlgorithm), (PLACEMENTS, PlacementSearch), (OBJECTIVES, Objective)]
    for table, enum in pairs:
        assert table == enum.values() and all(type(v) is str for v in table)


@pytest.mark.parametrize("build, field, allowed", [
    (lambda: ScheduleCfg(backend="cplex"), "schedule.backend='cplex'", "auto, gurobi, highs"),
    (lambda: ScheduleCfg(mip_gap=1.0), "schedule.mip_gap=1.0", "[0, 1)"),
    (lambda: SearchCfg(sampler="random"), "search.sampler='random'", "bound, grid, tpe, nsga2, pareto"),
    (lambda: SearchCfg(sampler="pareto", top_n=1, objective="throughput_per_tdp"), "search.objective='throughput_per_tdp'", "throughput"),
    (lambda: SearchCfg(grace_period_s=5, heartbeat_interval_s=5), "search.grace_period_s=5", "> search.heartbeat_interval_s=5"),
    (lambda: SearchCfg(storage="memory", n_workers=2), "search.n_workers=2", "not memory"),
    (lambda: TrainCfg(global_batch=64, mbs=[1, 3]), "train.global_batch=64", "multiple of every train.mbs"),
    (lambda: TrainCfg(optimizer="lion"), "train.optimizer='lion'", "sgd, adam, none"),
    (lambda: TrainCfg(precision="fp8", bytes_per_elem=4), "train.bytes_per_elem (FP8", "2"),
    (lambda: TrainCfg(tp_widths=[1, 3]), "train.tp_widths", "powers of two"),
    (lambda: ExpertCfg(dp=0), "model.expert.dp=0", "positive integers"),
    (lambda: ClusterCfg(name="c", devices=12, node_size=8, intra_node_gbps=1.0, inter_node_gbps=1.0), "cluster.devices=12",
     "multiples of cluster.node_size=8"),
    (lambda: ClusterCfg(name="c", devices=8, node_size=8, intra_node_gbps=1.0, inter_node_gbps=1.0, collective_algorithm="mesh"),
     "cluster.collective_algorithm='mesh'", "ring, tree, best"),
])
def test_a_group_refuses_a_bad_field_when_built(build, field, allowed):
    with pytest.raises(ConfigError) as err:
        build()
    assert field in str(err.value) and allowed in str(err.value)


def test_a_schema_template_with_mandatory_fields_unset_is_not_checked():
    """A default_factory builds a group from its schema's defaults: mandatory fields left MISSING are not values."""
    assert ClusterCfg().devices == "???"


def test_the_typed_config_runs_every_group_check():
    """A composed config with a bad value that only a group's own rule refuses fails as it is typed."""
    cfg = compose_config("train.global_batch=4095")
    with pytest.raises(ConfigError, match="train.global_batch=4095: must be a multiple"):
        typed_config(cfg)
    assert typed_config(compose_config()).train.global_batch == 4096
