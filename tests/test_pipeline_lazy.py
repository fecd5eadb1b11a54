"""Layers scheduled on demand (LayerLatencies.best) give exactly the placement found with every layer
scheduled, while scheduling fewer of them; unscheduled entries are true lower bounds."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from phaze.config import compose_config, model_job, study_spec
from phaze.cost.network import Network
from phaze.hardware.space import enumerate_space
from phaze.pipeline import layer_latencies, load_workloads, placer, variant_graph
from phaze.placement.kept import Kept
from phaze.search.evaluator import PLACED_KEPT, SpaceEvaluator, known_placement
from tests.test_search_study import TINY_MODEL

pytestmark = [pytest.mark.slow, pytest.mark.solver]

POINTS = 4
"""Tiny-grid points checked (seeded choice): each schedules every layer problem once for the reference."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cache = tmp_path_factory.mktemp("lazy-cache")
    cfg = compose_config(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={cache}", "schedule.cache=false")
    points = enumerate_space(cfg.hw)
    pick = np.random.default_rng(0).choice(len(points), POINTS, replace=False)
    return cfg, load_workloads(model_job(cfg)), Network.from_cfg(cfg.cluster), [points.iloc[[int(i)]].reset_index(drop=True) for i in pick]


@pytest.mark.parametrize("mode_search", [False, True])
def test_on_demand_equals_every_layer_scheduled(setup, mode_search):
    """With the mode search, best() runs a pending layer up to its MILP and places again before solving it."""
    cfg, workloads, network, points = setup
    cfg = compose_config(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={cfg.cache_dir}", "schedule.cache=false",
                         f"schedule.mode_search={str(mode_search).lower()}")
    solved_on_demand = solved_all = 0
    for point in points:
        place = placer(model_job(cfg), point, workloads, network)
        lazy = layer_latencies(model_job(cfg), point, workloads, network)
        bounds = {p: {f: a.copy() for f, a in fields.items()} for p, fields in lazy.values.items()}
        result, exact = lazy.best(place)
        full = layer_latencies(model_job(cfg), point, workloads, network)
        reference = place(full.solve_all())
        assert exact
        assert result.throughput_seq_s == pytest.approx(reference.throughput_seq_s, rel=1e-12)
        assert result.time_per_batch_s == pytest.approx(reference.time_per_batch_s, rel=1e-12)
        for part, fields in full.values.items():
            for f in ("fwd_s", "bwd_s"):
                solved = np.isfinite(fields[f])
                assert (bounds[part][f][solved] <= fields[f][solved] * (1 + 1e-12)).all()
        solved_on_demand += lazy.n_solved
        solved_all += full.n_solved
    assert solved_all > 0
    assert solved_on_demand < solved_all


EXPERT = ["search.placement=expert", "model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1"]


@pytest.mark.parametrize("placement", [[], EXPERT], ids=["searched", "expert"])
def test_bounds_chain_down_to_the_value(setup, tmp_path, placement):
    """work bound >= placement bound (HBM-sibling shortcut included) >= schedule bound >= throughput, on every
    tiny_grid point, with the placement searched or the expert one held fixed."""
    cfg = compose_config(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={setup[0].cache_dir}", f"schedule.cache_dir={tmp_path}", *placement)
    ev = SpaceEvaluator(study_spec(cfg))
    assert ev.points.hbm_gib.nunique() > 1
    for i in range(len(ev)):
        value = ev.evaluate(i).throughput_seq_s
        assert value > 0
        listed, own = ev.schedule_bound(i), ev.placement_bound(i)
        top = ev.placement_bound(i, beat=float("inf"))
        assert ev.work_bound[i] * (1 + 1e-12) >= top
        assert top * (1 + 1e-12) >= own >= listed * (1 - 1e-12)
        assert listed * (1 + 1e-12) >= value


def test_kept_placements_answer_as_the_dp_would(setup, tmp_path):
    """ModelEvaluator.placer answers a question on latencies it has placed before from the kept answers (no DP) exactly as
    the DP does: with no cut-off, with cut-offs the optimum beats or misses, and after a cut-off nothing beat."""
    cfg = compose_config(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={setup[0].cache_dir}", f"schedule.cache_dir={tmp_path}")
    ev = SpaceEvaluator(study_spec(cfg))
    model = ev.models[0]
    derived = 0
    for i in np.random.default_rng(1).choice(len(ev), 6, replace=False).tolist():
        point, bounds = ev.point(i), model.lower_bounds.at(i)
        value = model.dp_placer(point, False, None, None)(bounds).throughput_seq_s
        for first in (None, 0.5 * value, 1.5 * value):
            model._placed = Kept(PLACED_KEPT)
            model.placer(point, False, beat=first)(bounds)
            for beat in (None, 0.25 * value, 0.5 * value, 0.999 * value, 1.001 * value, 1.5 * value, 3.0 * value):
                found, _ = known_placement(model._placed.values()[0], beat, int(cfg.train.global_batch))
                derived += found
                kept, fresh = model.placer(point, False, beat=beat)(bounds), model.dp_placer(point, False, None, beat)(bounds)
                assert (kept is None) == (fresh is None)
                if fresh is not None:
                    assert kept.time_per_batch_s == fresh.time_per_batch_s and kept.strategy == fresh.strategy
    assert derived > 0


def test_kept_placement_rules():
    """A kept optimum answers every cut-off it clearly beats (itself) or misses (None), not one within rounding of it;
    a cut-off nothing beat answers every higher one (None) and no lower one; an empty space answers all (None)."""
    optimum = SimpleNamespace(time_per_batch_s=2.0)  # 8 sequences per batch: 4 seq/s
    assert known_placement({None: optimum}, None, 8) == (True, optimum)
    assert known_placement({None: optimum}, 3.0, 8) == (True, optimum)
    assert known_placement({3.0: optimum}, 5.0, 8) == (True, None)
    assert known_placement({None: optimum}, 4.0, 8) == (False, None)
    assert known_placement({5.0: None}, 6.0, 8) == (True, None)
    assert known_placement({5.0: None}, 3.0, 8) == (False, None)
    assert known_placement({5.0: None}, None, 8) == (False, None)
    assert known_placement({None: None}, 3.0, 8) == (True, None)
    assert known_placement({}, None, 8) == (False, None)


def test_kept_drops_the_least_recently_used():
    """Kept makes a value once, returns it again without making it, and beyond its size drops the one least recently asked for."""
    made = []
    kept = Kept(2)

    def make(key):
        return lambda: made.append(key) or key.upper()

    assert [kept.get(k, make(k)) for k in ("a", "b", "a", "c", "a", "b")] == ["A", "B", "A", "C", "A", "B"]
    assert made == ["a", "b", "c", "b"]
    assert kept.values() == ["A", "B"]
    # find only looks (marking what it finds), put stores: "b", then least recently used, goes; then "a"
    assert kept.find("c") is None and kept.find("a") == "A"
    kept.put("c", "C")
    assert kept.values() == ["A", "C"]
    kept.put("d", None)
    assert kept.values() == ["C", None] and kept.get("d", make("d")) is None and made == ["a", "b", "c", "b"]


def test_stopping_at_beat_is_a_true_bound(setup):
    """best(place, beat): above the value it stops with an upper bound at most `beat` that is at least
    the value; at or below the value it returns exactly the value."""
    cfg, workloads, network, points = setup
    stopped = 0
    for point in points:
        place = placer(model_job(cfg), point, workloads, network)
        value = layer_latencies(model_job(cfg), point, workloads, network).best(place)[0].throughput_seq_s
        high, exact = layer_latencies(model_job(cfg), point, workloads, network).best(place, beat=value * 1.05)
        assert high.throughput_seq_s * (1 + 1e-12) >= value
        if not exact:
            assert high.throughput_seq_s <= value * 1.05
            stopped += 1
        low, exact = layer_latencies(model_job(cfg), point, workloads, network).best(place, beat=value * 0.95)
        assert exact and low.throughput_seq_s == pytest.approx(value, rel=1e-12)
    assert stopped > 0


def test_twin_entries_are_scheduled_once(tmp_path):
    """Sequence parallelism at TP width 1 is the graph without it: the two entries are list-scheduled and solved
    once, both taking the schedule, and every MILP of a full solve is a distinct graph, width and direction
    (schedule.mip_gap=0 sends every list schedule that is not provably optimal to the MILP)."""
    cfg = compose_config(*TINY_MODEL, "hw=tiny_grid", f"cache_dir={tmp_path}", "schedule.cache=false", "train.sp=[false,true]",
                         "schedule.mip_gap=0")
    workloads, network = load_workloads(model_job(cfg)), Network.from_cfg(cfg.cluster)
    point = enumerate_space(cfg.hw).iloc[[0]].reset_index(drop=True)
    lazy = layer_latencies(model_job(cfg), point, workloads, network)
    off = next(i for i, v in enumerate(lazy.variants) if not v.sp)
    on = lazy.variants.index(replace(lazy.variants[off], sp=True))
    width = lazy.tp_values.index(1)
    lazy.list_schedule([(off, width, "layer", "bwd")])
    assert (on, width, "layer", "bwd") not in lazy.unlisted
    assert lazy.values["layer"]["bwd_s"][on, width] == lazy.values["layer"]["bwd_s"][off, width]
    assert ((on, width, "layer", "bwd") in lazy.pending) == ((off, width, "layer", "bwd") in lazy.pending)
    lazy.listed_all()
    pending = set(lazy.pending)
    distinct = {(id(variant_graph(workloads, lazy.variants[vi], lazy.tp_values[ti], part)), ti, direction) for vi, ti, part, direction in pending}
    lazy.solve_all()
    assert lazy.n_solved == len(lazy.milps) == len(distinct) < len(pending)
    for part, fields in lazy.values.items():
        np.testing.assert_array_equal(fields["fwd_s"][on, width], fields["fwd_s"][off, width])
        np.testing.assert_array_equal(fields["bwd_s"][on, width], fields["bwd_s"][off, width])
    wide = lazy.tp_values.index(2)
    assert lazy.values["layer"]["fwd_s"][on, wide] != lazy.values["layer"]["fwd_s"][off, wide]
