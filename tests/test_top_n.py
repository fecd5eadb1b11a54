"""search.top_n: branch and bound against the N-th best value found reports the space's N best designs, checked against
every point of hw=tiny_grid evaluated; N=1 is the study of the best alone."""

import numpy as np
import optuna
import pytest

from phaze.config import compose_config, preset_hw, study_spec
from phaze.hardware import enumerate_space
from phaze.report.study import MISSING, display_table, final_table, headline, study_summary, top_table
from phaze.search import run_study, trials_frame
from phaze.search.study import POINT_PARAM, progress_total, top_trials, value_to_beat
from tests.test_search_study import TINY_MODEL

REL = 1e-9
"""Throughputs of the same point from two studies agree to this (the same schedules and DP, other cut-offs)."""


def trial(number: int, point: int, value: float) -> optuna.trial.FrozenTrial:
    """A completed trial of `point` with objective `value`."""
    made = optuna.trial.create_trial(params={POINT_PARAM: point}, distributions={POINT_PARAM: optuna.distributions.IntDistribution(0, 99)},
                                     value=value)
    made.number = number
    return made


def test_the_value_to_beat_is_the_nth_best_of_distinct_points():
    """Point 7 proposed twice counts once; nothing to beat until n distinct points completed; ties are kept in place."""
    done = [trial(0, 7, 5.0), trial(1, 3, 2.0), trial(2, 7, 5.0), trial(3, 4, 4.0), trial(4, 9, 4.0)]
    assert value_to_beat(done[:3], 1) == 5.0
    assert value_to_beat(done[:3], 2) == 2.0  # points 7 and 3: the repeat of 7 is not a second design
    assert value_to_beat(done[:3], 3) is None
    assert value_to_beat(done, 3) == 4.0 and value_to_beat(done, 4) == 2.0 and value_to_beat(done, 5) is None
    # the ranking: one trial per point, best first, the earlier of two equal values first
    assert [t.params[POINT_PARAM] for t in top_trials(done, 3)] == [7, 4, 9]
    assert [t.number for t in top_trials(done, 5)] == [0, 3, 4, 1]
    assert [t.number for t in top_trials([trial(0, 1, 0.0), trial(1, 2, 3.0)], 2)] == [1]  # a point where nothing fits is no design


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    cache = tmp_path_factory.mktemp("top-n-cache")
    return TINY_MODEL + ["hw=tiny_grid", "hw.inter_op_parallel=false", f"cache_dir={cache}", f"schedule.cache_dir={cache}/schedule",
                         "search.storage=memory", "tracking.enabled=false", "search.seed=3"]


def study(base, *overrides):
    return run_study(study_spec(compose_config(*base, *overrides)), progress=False)


@pytest.fixture(scope="module")
def exhaustive(base):
    """Every point evaluated in full, without pruning: its throughput by point, best first (the ground truth)."""
    out = study(base, "search=grid", "search.prune=false", "search.top_n=1")
    df = trials_frame(out)
    assert (df.state == "COMPLETE").all() and len(df) == len(out.evaluator)
    return df.set_index("point").value.sort_values(ascending=False, kind="stable")


def assert_exact_top(top, truth, n: int) -> None:
    """The top n's values are truth's n best; its points are truth's, but for points tied at the n-th place (the rule
    of phaze.search.study.value_to_beat: the one completed first stays)."""
    indices = [i for i, _ in top]
    values = [e.throughput_seq_s for _, e in top]
    assert len(set(indices)) == len(indices) == n
    assert values == pytest.approx(truth.iloc[:n].tolist(), rel=REL)
    assert values == pytest.approx(truth.loc[indices].tolist(), rel=REL)
    nth = truth.iloc[n - 1]
    above = set(truth[truth > nth * (1 + REL)].index)
    tied = set(truth[np.isclose(truth, nth, rtol=REL, atol=0)].index)
    assert above <= set(indices) and set(indices) - above <= tied


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3, 5])
def test_branch_and_bound_finds_the_grids_top_n(base, exhaustive, n):
    out = study(base, "search=bound", f"search.top_n={n}")
    assert_exact_top(out.top, exhaustive, n)
    assert (out.best_index, out.best) == out.top[0]
    assert out.best.throughput_seq_s == pytest.approx(exhaustive.iloc[0], rel=REL)
    nth = out.top[-1][1].throughput_seq_s
    df = trials_frame(out)
    pruned = df[df.state == "PRUNED"]
    # what it pruned or never proposed could not enter the top n, and each recorded bound bounds its point
    assert (exhaustive.loc[pruned.point].to_numpy() <= nth * (1 + REL)).all()
    assert (exhaustive.loc[pruned.point].to_numpy() <= pruned.bound.to_numpy() * (1 + REL)).all()
    unvisited = sorted(set(range(len(out.evaluator))) - set(df.point))
    assert (exhaustive.loc[unvisited].to_numpy() <= nth * (1 + REL)).all()
    assert set(pruned.pruned_by) <= {"work_bound", "ilp_bound"}
    # the counts against the n-th best: points passed over, and the progress total the order visits before it stops
    ev = out.evaluator
    above = np.flatnonzero(ev.work_bound > nth)
    assert out.n_skipped == len(set(above.tolist()) & set(unvisited))
    assert progress_total(ev.spec.config.search, ev, nth) == len(above) and out.study.sampler.cursor == len(above) + 1


@pytest.mark.slow
def test_more_designs_cost_more_evaluations_and_only_the_top_n_study_is_resumed_as_one(base):
    """N=5 evaluates at least the points N=1 does (a new best is always evaluated), and the two are different studies:
    a study pruned against its best cannot be resumed as a top-5 one."""
    one, five = study(base, "search=bound", "search.top_n=1"), study(base, "search=bound", "search.top_n=5")
    assert one.n_full_evals < five.n_full_evals
    assert study_spec(compose_config(*base, "search.top_n=1")).name != study_spec(compose_config(*base, "search.top_n=5")).name


@pytest.mark.slow
def test_a_tie_at_the_nth_place_keeps_the_point_completed_first(base, exhaustive):
    """HBM siblings of equal throughput tie: with n where the n-th and (n+1)-th best tie, the top holds the n best
    values and, of the tied points the study completed, the one completed first."""
    values = exhaustive.to_numpy()
    n = next(k for k in range(2, len(values)) if np.isclose(values[k - 1], values[k], rtol=REL, atol=0))
    out = study(base, "search=bound", f"search.top_n={n}")
    assert_exact_top(out.top, exhaustive, n)
    tied = set(exhaustive[np.isclose(exhaustive, values[n - 1], rtol=REL, atol=0)].index)
    kept = [i for i, _ in out.top if i in tied]
    done = sorted((t for t in out.study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE and t.params[POINT_PARAM] in tied),
                  key=lambda t: t.number)
    assert 0 < len(kept) < len(tied) and kept == [t.params[POINT_PARAM] for t in done[:len(kept)]]


@pytest.mark.slow
def test_tpe_ranks_its_distinct_points(base, exhaustive):
    """TPE proposes points again: a repeat is no second design, and its top 3 are the 3 best of the points it visited."""
    out = study(base, "search=tpe", "search.n_trials=80", "search.top_n=3")
    trials = out.study.get_trials(deepcopy=False)
    assert any(t.user_attrs.get("duplicate_of") is not None for t in trials)
    visited = sorted({t.params[POINT_PARAM] for t in trials if POINT_PARAM in t.params})
    assert_exact_top(out.top, exhaustive.loc[visited].sort_values(ascending=False, kind="stable"), 3)


@pytest.mark.slow
def test_the_answer_is_a_headline_and_a_ranked_table_with_the_baselines_specs(base):
    """The headline names the best chip, plan, throughput and MFU in %; the table ranks the top 3, then the baseline
    chip (hw.baseline=tpuv4_modern, with both placements) with its specs filled; the summary's counts add up."""
    expert = ["model.expert.pp=2", "model.expert.dp=8", "model.expert.tp=1"]
    out = study(base, "search=bound", "search.top_n=3", *expert, "hw.baseline=tpuv4_modern")
    best = out.best.result
    line = headline(out)
    assert line.startswith("best: n_tc=") and f"{best.throughput_seq_s:.6f} seq/s" in line and f"MFU {100 * best.mfu:.1f}%" in line
    assert f"{out.speedup:.2f}x over tpuv4_modern + expert placement" in line and "searched placement" in line
    table = top_table(out)
    assert table["rank"].tolist()[:3] == [1, 2, 3] and table["rank"].iloc[3:].isna().all()
    assert list(table.design) == ["searched"] * 3 + ["tpuv4_modern + expert placement", "tpuv4_modern + searched placement"]
    assert table.throughput_seq_s.iloc[:3].tolist() == [e.throughput_seq_s for _, e in out.top]
    assert table.mfu_pct.iloc[0] == pytest.approx(100 * best.mfu, rel=1e-12)
    preset = enumerate_space(preset_hw("tpuv4_modern")).iloc[0]
    baseline_rows = table.iloc[3:]
    for column in [c for c in table.columns if c.startswith("hw.")]:
        assert (baseline_rows[column] == preset[column.removeprefix("hw.")]).all(), column
    # conf/hw/tpuv4.yaml and tpuv4_modern.yaml: 8 tensor cores of 128x128, 32 GiB of HBM2 in 4 stacks
    assert (baseline_rows[["hw.n_tc", "hw.tc_rows", "hw.hbm_gib", "hw.hbm_stacks"]].to_numpy() == [8, 128, 32, 4]).all()
    assert baseline_rows.area_mm2.tolist() == pytest.approx([float(preset.area_mm2)] * 2, rel=1e-12)
    shown = display_table(table).to_string(index=False, na_rep=MISSING)
    assert "<NA>" not in shown and "NaN" not in shown
    assert list(final_table(out).design) == ["searched", "tpuv4_modern + expert placement", "tpuv4_modern + searched placement"]
    df = trials_frame(out)
    n_pruned = int((df.state == "PRUNED").sum())
    summary = study_summary(out, "s")
    assert f"{out.n_trials} trials: {int((df.state == 'COMPLETE').sum())} evaluated, {n_pruned} pruned (" in summary
    assert f"the layer MILPs ran for {out.n_full_evals} of them" in summary
