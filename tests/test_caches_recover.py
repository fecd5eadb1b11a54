"""Caches never give a wrong answer: a truncated file, another version's entry, an entry that does not fit its
problem and two processes writing one cache at once are detected, the layer solved (or the model traced) again and
its file replaced."""

from __future__ import annotations

import json
import logging
import multiprocessing
import pickle
from dataclasses import replace

import numpy as np
import pytest

from phaze.schedule import schedule_layer
from phaze.schedule import cache as schedule_cache
from phaze.schedule.instance import LayerProblem
from phaze.schema import ScheduleCfg
from phaze.workload import extract
from tests.conftest import compose_cfg
from tests.schedule_cases import Case, brute_force_makespan
from tests.test_search_study import TINY_MODEL

CASE = Case(edges=[(0, 2), (1, 2), (2, 3)], unit=["tc", "vc", "tc", "vc"], single_s=np.array([4e-3, 3e-3, 2e-3, 1e-3]),
            parallel_s=np.array([1.5e-3, 2e-3, 1e-3, 1e-3]), n_tc=2, n_vc=2)
"""Two independent operators on different units, then a chain. By hand: op 0 over both tensor cores (1.5 ms) beside
op 1 over both vector cores (2 ms), then op 2 (1 ms) and op 3 (1 ms): 4 ms."""


def cfg_at(directory) -> ScheduleCfg:
    return ScheduleCfg(backend="highs", mip_gap=0.0, time_limit_s=60.0, threads=1, cache=True, cache_dir=str(directory),
                       mode_search=False)


def entry_path(directory) -> "Path":
    problem = LayerProblem.build(*CASE.args())
    key = schedule_cache.problem_key(problem, 0.0)
    return schedule_cache.ScheduleCache(directory)._path(key)


def cold(directory):
    """The layer solved on an empty cache at `directory` (its entry written there)."""
    schedule_cache._stores.clear()
    return schedule_layer(*CASE.args(), cfg=cfg_at(directory))


def again(directory):
    """The layer asked for again by a fresh process (no in-process copy of the cache)."""
    schedule_cache._stores.clear()
    return schedule_layer(*CASE.args(), cfg=cfg_at(directory))


def test_the_case_optimum_is_the_brute_force_one():
    assert brute_force_makespan(CASE) == pytest.approx(4e-3)


@pytest.mark.parametrize("damage", ["truncated", "not_utf8", "older_fields", "wrong_length", "broken_dependency", "not_a_dict"])
def test_a_damaged_schedule_entry_is_solved_again_and_replaced(tmp_path, caplog, damage):
    """Each damage is reported, the layer solved again to the same optimum as on an empty cache, and the file replaced
    by a whole entry that a third process reads back as a cache hit."""
    first = cold(tmp_path)
    assert first.makespan_s == pytest.approx(4e-3) and not first.from_cache
    path = entry_path(tmp_path)
    entry = json.loads(path.read_text())
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif damage == "not_utf8":
        path.write_bytes(b"\xff\xfe" + path.read_bytes())
    elif damage == "older_fields":
        del entry["bound_s"]
        path.write_text(json.dumps(entry))
    elif damage == "wrong_length":
        entry["start_s"] = entry["start_s"][:-1]
        path.write_text(json.dumps(entry))
    elif damage == "broken_dependency":
        entry["start_s"] = [0.0] * CASE.n
        entry["makespan_s"] = 4e-3
        path.write_text(json.dumps(entry))
    else:
        path.write_text(json.dumps([entry]))
    with caplog.at_level(logging.WARNING, logger="phaze.schedule.cache"):
        rebuilt = again(tmp_path)
    assert "damaged" in caplog.text and str(path) in caplog.text
    assert not rebuilt.from_cache and rebuilt.makespan_s == pytest.approx(first.makespan_s, rel=1e-12)
    assert np.array_equal(rebuilt.start_s, first.start_s)
    caplog.clear()
    read_back = again(tmp_path)
    assert read_back.from_cache and read_back.makespan_s == pytest.approx(first.makespan_s, rel=1e-12)
    assert "damaged" not in caplog.text


def test_an_older_versions_schedule_is_never_read(tmp_path, monkeypatch):
    """An entry written under another CACHE_VERSION (here a feasible but slower schedule: every operator one after
    another on one core) sits under another key: the current version solves the layer to its optimum."""
    problem = LayerProblem.build(*CASE.args())
    monkeypatch.setattr(schedule_cache, "CACHE_VERSION", schedule_cache.CACHE_VERSION - 1)
    old_key = schedule_cache.problem_key(problem, 0.0)
    serial = np.concatenate([[0.0], np.cumsum(CASE.single_s)[:-1]])
    slow = replace(cold(tmp_path / "scratch"), start_s=serial, parallel=np.zeros(CASE.n, dtype=bool),
                   makespan_s=float(CASE.single_s.sum()))
    schedule_cache.ScheduleCache(tmp_path).save(old_key, slow, 60.0)
    monkeypatch.undo()
    assert schedule_cache.problem_key(problem, 0.0) != old_key
    solved = again(tmp_path)
    assert not solved.from_cache and solved.makespan_s == pytest.approx(4e-3)


def _write_many(directory: str, n_writes: int) -> None:
    """Save the layer's schedule under its key over and over (another what-if run sharing the cache)."""
    problem = LayerProblem.build(*CASE.args())
    store = schedule_cache.ScheduleCache(directory)
    key = schedule_cache.problem_key(problem, 0.0)
    schedule = schedule_layer(*CASE.args(), cfg=replace(cfg_at(directory), cache=False))
    for _ in range(n_writes):
        store.save(key, schedule, 60.0)


def test_two_runs_writing_one_schedule_cache_at_once_never_read_half_an_entry(tmp_path, caplog):
    """Two processes save the same entry 300 times each while this one reads it back 300 times through fresh caches:
    every read is a miss (not yet written) or the whole optimal schedule, never a damaged entry."""
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_write_many, args=(str(tmp_path), 300)) for _ in range(2)]
    for w in writers:
        w.start()
    problem = LayerProblem.build(*CASE.args())
    key = schedule_cache.problem_key(problem, 0.0)
    hits = 0
    with caplog.at_level(logging.WARNING, logger="phaze.schedule.cache"):
        for _ in range(300):
            hit = schedule_cache.ScheduleCache(tmp_path).load(key, problem, 60.0)
            if hit is not None:
                hits += 1
                assert hit.makespan_s == pytest.approx(4e-3)
    for w in writers:
        w.join(timeout=120)
        assert w.exitcode == 0
    assert "damaged" not in caplog.text
    assert schedule_cache.ScheduleCache(tmp_path).load(key, problem, 60.0).makespan_s == pytest.approx(4e-3)
    assert not list(tmp_path.rglob("*.tmp"))


TINY = compose_cfg(*TINY_MODEL[:10]).model
"""A two-layer GPT-2 of width 256 (traced in about a second)."""


def tiny_workload(directory):
    return extract.extract_workload(TINY, mbs=1, tp_widths=(1, 2), cache_dir=directory)


def same_workload(a, b) -> bool:
    """The same shards, parts and operator tables."""
    return (a.params, a.mbs, sorted(map(str, a.graphs))) == (b.params, b.mbs, sorted(map(str, b.graphs))) and all(
        a.graphs[s][p].fwd.ops.equals(b.graphs[s][p].fwd.ops) and a.graphs[s][p].bwd.ops.equals(b.graphs[s][p].bwd.ops)
        for s in a.graphs for p in a.graphs[s])


@pytest.mark.parametrize("damage", ["truncated", "another_class", "older_fields", "another_model", "missing_shard"])
def test_a_damaged_workload_file_is_traced_again_and_replaced(tmp_path, caplog, damage):
    """Each damage is reported and the model traced again, equal to a trace on an empty cache; the file is replaced by
    one the next run reads back."""
    first = tiny_workload(tmp_path)
    path = extract.cached_path(TINY, 1, 2, (1, 2), tmp_path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    elif damage == "another_class":
        path.write_bytes(pickle.dumps({"graphs": first.graphs}))
    elif damage == "older_fields":
        older = replace(first)
        object.__delattr__(older, "block_parts")  # a Workload pickled before that field existed
        path.write_bytes(pickle.dumps(older))
    elif damage == "another_model":
        path.write_bytes(pickle.dumps(replace(first, model_name="opt")))
    else:
        path.write_bytes(pickle.dumps(replace(first, graphs={s: g for s, g in first.graphs.items() if s.tp == 1})))
    with caplog.at_level(logging.WARNING, logger="phaze.workload.extract"):
        rebuilt = tiny_workload(tmp_path)
    assert "damaged" in caplog.text and str(path) in caplog.text
    assert same_workload(rebuilt, first)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="phaze.workload.extract"):
        assert same_workload(tiny_workload(tmp_path), first)
    assert "damaged" not in caplog.text


def test_an_older_extractor_versions_workload_is_never_read(tmp_path, monkeypatch):
    """A workload cached under another EXTRACTOR_VERSION lies at another path: the current version never opens it."""
    path = extract.cached_path(TINY, 1, 2, (1, 2), tmp_path)
    monkeypatch.setattr(extract, "EXTRACTOR_VERSION", extract.EXTRACTOR_VERSION - 1)
    assert extract.cached_path(TINY, 1, 2, (1, 2), tmp_path) != path


def test_a_layers_bounds_are_read_back_by_a_later_run_and_checked(tmp_path, caplog, monkeypatch):
    """The split bound and the mode search's bound of a layer, computed once, are read back by a later run (a what-if)
    without computing them again; a cached bound outside what such a bound can be (here 1 s, above the 4 ms optimum and
    the split's list-schedule ceiling) is damaged: reported and computed again."""
    from phaze.placement.kept import Kept
    from phaze.schedule import layer
    from phaze.schedule.bounds import problem_lower_bound_s
    from phaze.schedule.heuristic import best_list_schedule

    problem = LayerProblem.build(*CASE.args())
    cfg = cfg_at(tmp_path)
    lower_s, upper_s = problem_lower_bound_s(problem), best_list_schedule(problem).makespan_s
    monkeypatch.setattr(layer, "_split", Kept(8))
    schedule_cache._stores.clear()
    split_s = layer.split_bound_s(problem, cfg)
    modes_s = layer.mode_bound_s(problem, lower_s, upper_s, schedule_cache.store_for(cfg))
    assert 0 < split_s <= 4e-3 * (1 + 1e-9) and lower_s <= modes_s <= upper_s

    def not_again(*args, **kwargs):
        raise AssertionError("computed again")

    with monkeypatch.context() as later:
        later.setattr(layer, "_split", Kept(8))
        later.setattr(layer, "prepare_problem", not_again)  # each side of the split
        later.setattr(layer, "ModeSearch", not_again)
        schedule_cache._stores.clear()
        assert layer.split_bound_s(problem, cfg) == split_s
        assert layer.mode_bound_s(problem, lower_s, upper_s, schedule_cache.store_for(cfg)) == modes_s
    key = schedule_cache.bound_key(problem, "split", gap=layer.SPLIT_MIP_GAP, work=layer.SPLIT_WORK_LIMIT, backend=cfg.backend)
    path = schedule_cache.ScheduleCache(tmp_path)._path(key)
    path.write_text(json.dumps({"bound_s": 1.0}))
    monkeypatch.setattr(layer, "_split", Kept(8))
    schedule_cache._stores.clear()
    with caplog.at_level(logging.WARNING, logger="phaze.schedule.cache"):
        assert layer.split_bound_s(problem, cfg) == pytest.approx(split_s, rel=1e-12)
    assert "damaged" in caplog.text and json.loads(path.read_text()) == {"bound_s": split_s}
