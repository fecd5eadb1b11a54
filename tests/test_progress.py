"""Progress a person can trust (phaze.search.progress): a plain line at most every PLAIN_INTERVAL_S in a file or pipe,
the time left from the points still to decide over their measured rate, a live bar on a terminal (a pseudo-terminal
that reports no size included), and a real run piped to a file printing its lines."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time

import numpy as np
import pytest

from phaze.config import compose_config, study_spec
from phaze.search import progress
from phaze.search.bound_clock import OWN_DP, PLACEMENT, TOP_DP, BoundClock, dp_s, dps_run
from phaze.search.ahead import least_fresh, trials_ahead
from phaze.search.dominance import HBM_AXIS, undominated
from phaze.search.progress import (PLAIN_INTERVAL_S, Ahead, Costs, RateMeter, StudyProgress, fresh_bounds, kinds_ahead,
                                   terminal_shape, time_left_s, trial_chance, trial_cost_s)
from phaze.search.study import run_study
from tests.test_search_study import TINY_MODEL


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.time_s = 100.0

    def __call__(self) -> float:
        return self.time_s


LINE = re.compile(r"^points: (\d+)/(\d+) decided \((\d+)%\) after (\d\d:\d\d), (.*)$")


def test_plain_lines_at_most_one_per_interval():
    out, now = io.StringIO(), FakeClock()
    shown = StudyProgress(total=1000, unit="points", stream=out, now=now)
    starts = [3.0, 9.9, 10.0, 12.0, 19.9, 20.5, 21.0, 30.4, 30.5, 55.0]  # seconds after the start
    for k, offset in enumerate(starts, start=1):
        now.time_s = 100.0 + offset
        shown.update(10 * k, 1000)
    lines = out.getvalue().splitlines()
    # 10.0 (10 s after the start), 20.5 (10.5 after), 30.5 (10.0 after), 55.0: the others come too soon after a line
    assert [LINE.match(line).group(1) for line in lines] == ["30", "60", "90", "100"]
    assert [LINE.match(line).group(4) for line in lines] == ["00:10", "00:20", "00:30", "00:55"]
    assert PLAIN_INTERVAL_S == 10.0


def test_estimate_is_points_left_over_the_rate_of_the_last_window():
    meter = RateMeter(window_s=10.0)
    meter.add(0.0, 0)
    assert meter.per_s() is None and meter.left_s(1000) is None
    meter.add(4.0, 40)  # within the first window: from the first reading, 40 points in 4 s
    assert meter.per_s() == pytest.approx(10.0)
    assert meter.left_s(500) == pytest.approx(46.0)  # 460 points at 10/s
    meter.add(12.0, 100)  # from the latest reading at least 10 s old (0 s): 100 points in 12 s
    assert meter.per_s() == pytest.approx(100 / 12)
    assert meter.left_s(400) == pytest.approx(36.0)
    meter.add(20.0, 300)  # from 4 s: 260 points in 16 s
    assert meter.per_s() == pytest.approx(16.25)
    assert meter.left_s(400) == pytest.approx(100 / 16.25)
    meter.add(40.0, 300)  # 20 s without a decision: from the latest reading 10 s old with fewer (12 s), 200 in 28 s
    assert meter.per_s() == pytest.approx(200 / 28)
    assert meter.left_s(400) == pytest.approx(14.0)
    meter.add(45.0, 400)
    assert meter.left_s(400) == 0.0


def test_plain_line_carries_rate_and_time_left():
    out, now = io.StringIO(), FakeClock()
    shown = StudyProgress(total=88080, unit="points", stream=out, now=now)
    now.time_s = 105.0
    shown.update(1, 12000, pruned=0, best="111.183")
    now.time_s = 125.0  # 20 s after the first decision, 2000 points more: 100 points/s, 9999 left -> 99.99 s
    shown.update(2001, 12000, pruned=3, best="111.183")
    assert out.getvalue().splitlines() == [
        "points: 2001/12000 decided (17%) after 00:25, 100 points/s, 01:39 left, pruned=3, best=111.183"]


def test_no_time_left_before_a_value_to_beat():
    out, now = io.StringIO(), FakeClock()
    shown = StudyProgress(total=88080, unit="points", stream=out, now=now, settled=False)
    now.time_s = 120.0
    shown.update(4, 88080, settled=False)
    assert out.getvalue() == "points: 4/88080 decided (0%) after 00:20, 0.2 points/s, no value to beat yet\n"


def test_points_decided_are_read_between_trials(monkeypatch):
    """A proposal's walk over passed-over points ends no trial: the thread reads the count and writes the lines."""
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    out, cursor = io.StringIO(), {"at": 0}

    def position() -> int:
        cursor["at"] += 5
        return cursor["at"]

    shown = StudyProgress(total=1000, unit="points", stream=out, position=position)
    while len(shown.meter.readings) < 20:
        time.sleep(0.01)
    shown.close()
    decided = [int(LINE.match(line).group(1)) for line in out.getvalue().splitlines()]
    assert len(decided) >= 19 and decided == sorted(decided) and decided[0] >= 5 and decided[-1] <= 1000


def test_kinds_of_the_points_ahead():
    """Dismissed (known <= beat), bounded below the work bound but open, or bounded by the work bound only: one share
    of a placement bound per point of a signature."""
    known = np.array([5.0, 12.0, 20.0, 20.0, 20.0, 15.0, 10.0, 30.0])
    work = np.array([30.0, 20.0, 20.0, 20.0, 20.0, 15.0, 40.0, 30.0])
    signatures = np.array([0, 1, 2, 2, 2, 3, 4, 2])
    fresh, bounded = kinds_ahead(known, work, np.full(8, 10.0), signatures)
    # signature 2 has 4 points bounded by their work bound only (indices 2, 3, 4, 7): a quarter each
    assert fresh.tolist() == [0.0, 0.0, 0.25, 0.25, 0.25, 1.0, 0.0, 0.25]
    assert bounded.tolist() == [False, True, False, False, False, False, False, False]  # 10.0 ties the beat: dismissed
    assert fresh.sum() == 2.0  # signatures 2 and 3 to bound


def test_time_left_kind_by_kind():
    """A placement bound per fresh signature and per bounded point; then, for each bounded signature, its list-schedule
    bound, and a trial for those Ahead.trials says will take one (half of them where it says nothing)."""
    ahead = Ahead(cursor=40, fresh=np.array([0.5, 0.5, 1.0, 0.0, 0.0, 0.0]), bounded=np.array([False, False, False, True, True, True]),
                  bound_s=0.02, groups=np.array([7, 7, 8, 9, 9, 5]))
    assert ahead.bounded_groups().tolist() == [5, 9]
    # 2 fresh signatures + 3 bounded points at 0.02 s: 0.1 s; one of the two bounded signatures' 4 s trials, 4.1 s
    assert time_left_s(ahead, Costs(trial_s=4.0, milp_s=30.0)) == pytest.approx((4.1, True))
    assert time_left_s(ahead, Costs(milp_s=5.0)) == pytest.approx((5.1, True))  # no trial against a value: a MILP each
    # the list schedules will leave 0.25 of a signature open, each taking its 0.5 s list-schedule bound first: 2.1 s
    sure = Ahead(cursor=40, fresh=ahead.fresh, bounded=ahead.bounded, bound_s=0.02, groups=ahead.groups, schedule_bound_s=0.5,
                 trials=0.25)
    assert time_left_s(sure, Costs(trial_s=4.0)) == pytest.approx((0.1 + 2 * 0.5 + 0.25 * 4.0, True))
    assert time_left_s(ahead, Costs()) is None  # a kind without a cost, after a value to beat: nothing shown
    # signature 9 had a full evaluation: its layer schedules are known, its bounded points take no trial
    evaluated = Ahead(cursor=40, fresh=ahead.fresh, bounded=ahead.bounded, bound_s=0.02, groups=ahead.groups,
                      evaluated=np.array([False, False, False, True, True, False]))
    assert evaluated.bounded_groups().tolist() == [5]
    assert time_left_s(evaluated, Costs(trial_s=1.5)) == pytest.approx((0.1 + 0.75, True))
    no_groups = Ahead(cursor=40, fresh=np.zeros(3), bounded=np.array([True, False, True]), bound_s=0.5)
    assert no_groups.bounded_groups().tolist() == [40, 42]  # each point its own
    assert time_left_s(no_groups, Costs(trial_s=1.5)) == pytest.approx((1.0 + 1.5, True))
    # a bounded point's DP at its own HBM timed apart (1.25 s): 2.5 s of bounds, then one of the two 1.5 s trials
    own = Ahead(cursor=40, fresh=np.zeros(3), bounded=np.array([True, False, True]), bound_s=0.5, own_bound_s=1.25)
    assert time_left_s(own, Costs(trial_s=1.5)) == pytest.approx((2.5 + 1.5, True))
    # before a value to beat: 3 evaluations of 30 s, the current one 12 s in: 78 s, then the kinds read against the
    # lowest value completed, the bounds at the probe's 0.5 s
    early = Ahead(cursor=2, fresh=np.array([1.0, 1.0]), bounded=np.array([False, False]), evaluations=3)
    assert time_left_s(early, Costs(evaluation_s=30.0, running_s=12.0, probe_s=0.5)) == pytest.approx((78.0 + 1.0, True))
    assert time_left_s(early, Costs(running_s=12.0, probe_s=0.5)) is None  # no evaluation has finished
    assert time_left_s(early, Costs(evaluation_s=30.0, running_s=12.0)) == pytest.approx((78.0, False))  # at least
    assert time_left_s(Ahead(3, np.zeros(2), np.zeros(2, bool)), Costs()) == (0.0, True)  # all dismissed
    # ... each by a look-up of 1 ms once the walk has timed one: 2,000 points, 2 s
    assert time_left_s(Ahead(3, np.zeros(2000), np.zeros(2000, bool), lookup_s=1e-3), Costs()) == pytest.approx((2.0, True))


def test_fresh_signatures_take_between_the_undominated_and_all_bounds():
    """8 fresh signatures, 2 of them undominated: between 2 and 8 placement bounds, the geometric mean 4, whose worst
    ratio to either end is 2."""
    ahead = Ahead(cursor=0, fresh=np.ones(8), bounded=np.zeros(8, bool), bound_s=0.5, least_fresh=2)
    assert fresh_bounds(ahead) == pytest.approx(4.0)
    assert time_left_s(ahead, Costs()) == pytest.approx((2.0, True))  # 4 bounds at 0.5 s
    assert fresh_bounds(Ahead(cursor=0, fresh=np.ones(8), bounded=np.zeros(8, bool))) == 8.0  # none known: each its own


def test_a_trial_takes_between_its_part_outside_the_milps_and_its_whole():
    """Recent trials of 8 s, 6 s of them in layer MILPs: an upcoming trial takes between 2 s (no new MILP) and 8 s, the
    geometric mean 4 s; without MILPs, the trials' mean; before a trial against a value, a MILP."""
    assert trial_cost_s(Costs(trial_s=8.0, trial_milp_s=6.0)) == pytest.approx(4.0)
    assert trial_cost_s(Costs(trial_s=1.5)) == pytest.approx(1.5)
    assert trial_cost_s(Costs(milp_s=5.0)) == 5.0 and trial_cost_s(Costs()) is None
    ahead = Ahead(cursor=0, fresh=np.zeros(2), bounded=np.ones(2, bool), bound_s=0.25, groups=np.array([4, 6]),
                  schedule_bound_s=2.0)
    # their placement bounds 0.5 s, both signatures' schedule bounds (2 s each), one of their trials (4 s): 8.5 s
    assert time_left_s(ahead, Costs(trial_s=8.0, trial_milp_s=6.0)) == pytest.approx((8.5, True))
    now = FakeClock()
    shown = StudyProgress(total=3, unit="points", stream=io.StringIO(), now=now)
    now.time_s = 105.0
    shown.trial(8.0, False, milps_s=(2.0, 4.0))
    now.time_s = 107.0
    shown.trial(4.0, False)
    costs = shown.costs(now.time_s)  # both within the last 10 s: 6 s, of which 3 s in MILPs
    assert (costs.trial_s, costs.trial_milp_s) == (6.0, 3.0)


def test_a_trial_counts_only_the_milps_it_solved():
    """A layer schedule the cache answered cost the trial nothing: its recorded seconds are an earlier trial's."""
    from phaze.search.objective import solved_milps_s

    assert solved_milps_s([["optimal", 0.0, 2.0, False], ["optimal", 0.0, 5.0, True], ["refuted", 0.3, 0.5, False]]) == (2.0, 0.5)
    assert solved_milps_s(None) == ()


def test_undominated_counts_rows_no_row_of_their_group_strictly_dominates():
    more = np.array([[2.0, 2.0], [1.0, 2.0], [2.0, 2.0], [3.0, 1.0], [1.0, 2.0]])
    everyone = np.ones(5, bool)
    # one group: (1, 2) twice is below (2, 2); the two (2, 2) tie (neither strictly above) and (3, 1) is beside them
    assert undominated(more, np.zeros(5, int), everyone) == 3
    # rows 1 and 3 alone in a group: (1, 2) and (3, 1) neither dominates the other; row 4 is still below rows 0 and 2
    assert undominated(more, np.array([0, 1, 0, 1, 0]), everyone) == 4
    # only row 4 a candidate: rows that are not candidates still dominate it
    assert undominated(more, np.zeros(5, int), np.array([False, False, False, False, True])) == 0


def test_line_from_the_kinds_ahead():
    """The line's time left from the kinds read at each tick, the trials' cost over the last RATE_WINDOW_S."""
    out, now = io.StringIO(), FakeClock()
    groups = np.array([3, 3, 4, 5])
    readings = iter([Ahead(10, np.array([0.0, 0.0, 0.5, 0.5]), np.array([True, True, False, False]), 0.25, groups=groups),
                     Ahead(12, np.array([0.5, 0.5]), np.array([False, False]), 0.25, groups=groups[2:]),
                     Ahead(12, np.array([0.5, 0.5]), np.array([False, True]), 0.25, groups=groups[2:])])
    shown = StudyProgress(total=14, unit="points", stream=out, now=now, ahead=lambda: next(readings))
    now.time_s = 102.0
    shown.update(10, 14)  # 1 fresh signature + 2 bounded points at 0.25 s, 1 bounded signature without a cost
    assert shown.rate_text(now.time_s) == "5 points/s, time left not measured yet"
    now.time_s = 106.0
    shown.trial(8.0, False)  # a trial against the value, 8 s
    shown.update(12, 14)  # 1 fresh signature left: 0.25 s
    assert shown.rate_text(now.time_s) == "2 points/s, 00:00 left"
    now.time_s = 112.0  # the points' rate from 102 s, 10 s back: 2 points in 10 s; signature 5 bounded
    shown.update(12, 14)  # 0.5 s of bounds, and its 8 s trial at a chance of one half: 4.5 s
    assert out.getvalue().splitlines() == ["points: 12/14 decided (86%) after 00:12, 0.2 points/s, 00:04 left"]


def test_bound_clock_reads_the_latest_bounds(monkeypatch):
    """A kind's recent cost is the mean of the bounds that ended within the window of the latest one (the list-schedule
    bounds and look-ups are read so), its cost so far the mean of all."""
    from phaze.search import bound_clock

    ticks = iter([100.0, 101.0, 130.0, 135.0])
    monkeypatch.setattr(bound_clock.time, "monotonic", lambda: next(ticks))
    clock = BoundClock()
    clock.add(PLACEMENT, None, 9.0)  # no value to beat: not counted
    clock.add(PLACEMENT, 1.0, 0.02)
    clock.add(PLACEMENT, 1.0, 0.04)
    assert clock.recent_mean_s(PLACEMENT, 10.0) == pytest.approx(0.03)  # 100 s and 101 s: both recent
    clock.add(PLACEMENT, 1.0, 0.005)
    clock.add(PLACEMENT, 1.0, 0.007)
    assert clock.recent_mean_s(PLACEMENT, 10.0) == pytest.approx(0.006)  # 130 s and 135 s
    assert clock.mean_s(PLACEMENT) == pytest.approx(0.018) and clock.recent_mean_s("lookup", 10.0) is None


def test_line_before_a_value_to_beat_counts_the_evaluations_left():
    """Before a value to beat: the evaluations left, and the bounds at the probe's cost, timed after each evaluation."""
    out, now = io.StringIO(), FakeClock()
    reading = Ahead(1, np.array([1.0, 1.0]), np.array([False, False]), evaluations=4)
    probes = iter([3.0])
    shown = StudyProgress(total=88080, unit="points", stream=out, now=now, settled=False, ahead=lambda: reading,
                          probe=lambda: next(probes))
    shown.tick()
    assert shown.rate_text(100.0) == "rate not measured yet, no value to beat yet"  # no evaluation has ended
    now.time_s = 140.0
    shown.trial(40.0, True, milps_s=(12.0, 13.0))  # the first full evaluation took 40 s, ended at 140 s; probe: 3 s
    assert shown.costs(140.0).probe_s == 3.0 and shown.costs(140.0).milp_s == 12.5
    now.time_s = 150.0  # 4 left at 40 s, the next 10 s in: 150 s; 2 signatures at 3 s: 156 s = 02:36
    shown.update(1, 88080, settled=False)
    assert out.getvalue() == ("points: 1/88080 decided (0%) after 00:50, 0.02 points/s, 02:36 left "
                              "(4 full evaluation(s) before a value to beat)\n")
    shown.probes_s = []  # no cost for a bound yet: the evaluations alone, at least
    assert shown.rate_text(150.0) == "0.02 points/s, at least 02:30 left (4 full evaluation(s) before a value to beat)"
    shown.settled = True
    shown.trial(2.0, False)  # a trial against a value runs no probe
    assert shown.probes_s == []


def test_known_bounds_are_known_bound_of_every_point(tmp_path):
    """The progress's vectorised read equals the study's own one point at a time, after a study has found bounds."""
    cache = tmp_path / "cache"
    out = run_study(study_spec(compose_config(*TINY_MODEL, "hw=tiny_grid", "hw.inter_op_parallel=false", f"cache_dir={cache}",
                                   f"schedule.cache_dir={cache}/schedule", "search.storage=memory", "tracking.enabled=false")),
                    progress=False)
    ev, points = out.evaluator, np.arange(len(out.evaluator))
    one_by_one = np.array([ev.known_bound(int(i)) for i in points])
    assert np.array_equal(ev.known_bounds(points), one_by_one)
    assert (one_by_one < ev.work_bound).sum() > 0 and ev.bound_clock.count[PLACEMENT] > 0 and ev.bound_clock.mean_s(PLACEMENT) > 0
    # every placement bound that ran a DP ran one at a signature's largest HBM or at the point's own
    dp_clock = ev.models[0].dp_clock
    assert dp_clock.count[TOP_DP] > 0 and dps_run(ev.models) == dp_clock.count[TOP_DP] + dp_clock.count[OWN_DP]
    assert dp_s(ev.models, TOP_DP, 1e9) == pytest.approx(dp_clock.mean_s(TOP_DP))
    # least_fresh against a count point by point: a fresh signature counts unless an open point of its cost group has
    # at least each MORE_IS_FASTER column of the signature's point at the largest HBM, and more of one
    fresh, bounded, signatures = np.ones(len(points)), np.zeros(len(points), bool), ev.sibling_groups()
    bounded[::3] = True
    fresh[bounded] = 0.0
    dominance, max_hbm = ev.models[0].dominance, ev.models[0].max_hbm_gib
    firsts = [int(np.flatnonzero((signatures == g) & ~bounded)[0]) for g in np.unique(signatures[~bounded])]
    count = 0
    for i in firsts:
        mine = dominance.more[i].copy()
        mine[HBM_AXIS] = max_hbm
        others = [dominance.more[j] if bounded[j] else np.where(np.arange(len(mine)) == HBM_AXIS, max_hbm, dominance.more[j])
                  for j in firsts + np.flatnonzero(bounded).tolist() if j != i and dominance.group[j] == dominance.group[i]]
        count += not any((o >= mine).all() and (o > mine).any() for o in others)
    assert 0 < count < len(firsts)
    assert least_fresh(ev, points, fresh, bounded, signatures) == count


def test_terminal_draws_a_bar_on_a_pseudo_terminal_without_a_size(monkeypatch):
    """stderr on a fresh pseudo-terminal, which reports 0 x 0 as under `script` without a terminal of its own: tqdm asks
    sys.stderr's size, counts -1 lines and drew nothing there (issue 45)."""
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as stream:
        assert os.get_terminal_size(stream.fileno()) == os.terminal_size((0, 0))
        assert terminal_shape(stream)[0] > 0 and terminal_shape(stream)[1] > 0
        monkeypatch.setattr(sys, "stderr", stream)
        shown = StudyProgress(total=50, unit="points")
        shown.update(7, 40, pruned=2)
        stream.flush()
        drawn = b""
        while select.select([master], [], [], 0.5)[0]:
            drawn += os.read(master, 65536)
        shown.close()
    os.close(master)
    assert shown.bar is not None
    text = drawn.decode()
    assert "points:  18%|" in text and "7/40" in text and "pruned=2" in text


def test_an_error_in_the_study_stops_the_thread(monkeypatch):
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    with pytest.raises(RuntimeError), StudyProgress(total=10, unit="points", stream=io.StringIO(), position=lambda: 1) as shown:
        raise RuntimeError("a trial failed")
    assert not shown.watcher.is_alive()


def test_disabled_writes_nothing():
    out = io.StringIO()
    shown = StudyProgress(total=10, unit="points", enabled=False, stream=out, now=FakeClock())
    shown.update(5, 10)
    shown.close()
    assert out.getvalue() == "" and shown.bar is None


@pytest.mark.slow
def test_tiny_run_piped_to_a_file_prints_progress_lines(tmp_path):
    """A real run with stderr to a file, the interval at 0 s so that its short study prints a line per update."""
    stderr_path = tmp_path / "stderr.txt"
    script = ("import runpy, sys; import phaze.search.progress as p; p.PLAIN_INTERVAL_S = 0.0; "
              "sys.argv = ['phaze.run', *sys.argv[1:]]; runpy.run_module('phaze.run', run_name='__main__', alter_sys=True)")
    cache = tmp_path / "cache"
    with open(stderr_path, "w") as err:
        proc = subprocess.run([sys.executable, "-c", script, *TINY_MODEL, "hw=tiny_grid", "hw.inter_op_parallel=false",
                               f"cache_dir={cache}", f"schedule.cache_dir={cache}/schedule", "search.storage=memory",
                               "tracking.enabled=false"], stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, stderr_path.read_text()[-3000:]
    lines = [LINE.match(line) for line in stderr_path.read_text().splitlines() if line.startswith("points")]
    assert lines and all(lines)  # a line per finished trial and per reading of the sampler, each in the format
    decided = [int(m.group(1)) for m in lines]
    totals = [int(m.group(2)) for m in lines]
    assert decided == sorted(decided) and all(d <= t for d, t in zip(decided, totals))
    assert decided[-1] == totals[-1] and lines[-1].group(5).startswith("none left")
    assert "\r" not in stderr_path.read_text()  # no bar redraws in a file
    assert progress.PLAIN_INTERVAL_S == 10.0  # the child's setting stays in the child


def test_a_bounded_signature_takes_a_trial_as_often_as_the_list_schedules_so_far_would_leave_it_open():
    """Four list-schedule bounds so far took their bounds to 0.8, 0.9, 0.95 and 0.99 of the bound before: a signature
    whose bound lies 1/0.85 above the value to beat stays open under three of them, (3 + 1) / (4 + 2); one at the value
    itself under none, 1/6; before any list-schedule bound, one half."""
    ratios = [0.8, 0.9, 0.95, 0.99]
    assert trial_chance(np.array([0.85, 0.97, 1.0]), np.array(ratios)) == pytest.approx([4 / 6, 2 / 6, 1 / 6])
    assert trial_chance(np.array([0.5]), np.array([])) == pytest.approx([0.5])
    # signature 1's points at thresholds 0.9 and 0.9, signature 2's at 0.97; the point of signature 3 is not open
    beat, known = np.array([9.0, 9.0, 9.7, 9.0]), np.array([10.0, 10.0, 10.0, 20.0])
    open_ = np.array([True, True, True, False])
    assert trials_ahead(beat, known, open_, np.array([1, 1, 2, 3]), ratios) == pytest.approx(3 / 6 + 2 / 6)
    assert trials_ahead(beat, known, np.zeros(4, bool), np.array([1, 1, 2, 3]), ratios) == 0.0
    clock = BoundClock()
    clock.tightened(3, None, 5.0, 10.0)  # no value to beat: not kept
    clock.tightened(3, 1.0, 0.0, 0.0)  # no plan fits the point (its bounds are 0): not kept
    clock.tightened(3, 1.0, 5.0, float("inf"))  # no bound before it: not kept
    clock.tightened(3, 1.0, 9.0, 10.0)
    clock.tightened(3, 1.0, 9.0, 9.0)  # a trial asking point 3's bound again: its first is kept
    clock.tightened(4, 1.0, 7.0, 10.0)
    assert clock.tightenings == [0.9, 0.7]
