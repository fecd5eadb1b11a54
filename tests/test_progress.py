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

from phaze.config import compose_config
from phaze.search import progress
from phaze.search.progress import PLAIN_INTERVAL_S, Ahead, RateMeter, StudyProgress, kinds_ahead, terminal_shape, time_left_s
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
    ahead = Ahead(cursor=40, fresh=np.array([0.5, 0.5, 1.0, 0.0]), bounded=np.array([False, False, False, True]),
                  bound_s=0.02, evaluations=0)
    # 2 signatures x 0.02 s, 1 bounded point at 0.5 per s: 0.04 + 2.0
    assert time_left_s(ahead, 0.5, None, 0.0, 7.0) == pytest.approx(2.04)
    assert time_left_s(ahead, None, None, 0.0, 7.0) == pytest.approx(7.04)  # no rate yet: at the mean trial, 7 s
    assert time_left_s(ahead, None, None, 0.0, None) is None
    # before a value to beat: 3 evaluations of 30 s, the current one 12 s in: 78 s, then the kinds as read
    early = Ahead(cursor=2, fresh=np.array([1.0, 1.0]), bounded=np.array([False, False]), bound_s=0.5, evaluations=3)
    assert time_left_s(early, None, 30.0, 12.0, 30.0) == pytest.approx(78.0 + 1.0)
    assert time_left_s(early, None, None, 12.0, None) is None  # no evaluation has finished
    unbounded = Ahead(cursor=2, fresh=np.array([1.0, 1.0]), bounded=np.array([False, False]), bound_s=None, evaluations=3)
    assert time_left_s(unbounded, None, 30.0, 12.0, 30.0) == pytest.approx(78.0)  # no bound against a value yet
    assert time_left_s(Ahead(3, np.zeros(2), np.zeros(2, bool)), None, None, 0.0, None) == 0.0  # all dismissed


def test_line_from_the_kinds_ahead():
    """A bounded point passed counts at the rate of bounded points; a fresh signature at the mean placement bound."""
    out, now = io.StringIO(), FakeClock()
    readings = iter([Ahead(10, np.array([0.0, 1.0, 0.5, 0.5]), np.array([True, False, False, False]), 0.25),
                     Ahead(11, np.array([1.0, 0.5, 0.5]), np.array([False, False, False]), 0.25),
                     Ahead(11, np.array([1.0, 0.5, 0.5]), np.array([False, False, False]), 0.25)])
    shown = StudyProgress(total=14, unit="points", stream=out, now=now, ahead=lambda: next(readings))
    now.time_s = 102.0
    shown.update(10, 14)
    assert shown.rate_text(now.time_s) == "5 points/s, time left not measured yet"  # a bounded point, no trial yet
    now.time_s = 106.0
    shown.update(11, 14)  # the bounded point passed in 4 s: 0.25 per s; 2 signatures left at 0.25 s: 0.5 s
    assert shown.bounded_decided == 1 and shown.bounded_meter.per_s() == pytest.approx(0.25)
    assert shown.rate_text(now.time_s) == "1.83 points/s, 00:00 left"  # the points: 11 in 6 s
    now.time_s = 112.0  # the points' rate from 102 s, 10 s back: 1 point in 10 s
    shown.update(11, 14)
    assert out.getvalue().splitlines() == ["points: 11/14 decided (79%) after 00:12, 0.1 points/s, 00:00 left"]


def test_line_before_a_value_to_beat_counts_the_evaluations_left():
    out, now = io.StringIO(), FakeClock()
    reading = Ahead(1, np.array([1.0, 1.0]), np.array([False, False]), 3.0, evaluations=4)
    shown = StudyProgress(total=88080, unit="points", stream=out, now=now, settled=False, ahead=lambda: reading)
    now.time_s = 140.0
    shown.trial(40.0, True)  # the first full evaluation took 40 s, ended at 140 s
    now.time_s = 150.0  # 4 left at 40 s, the next 10 s in: 150 s; 2 signatures at 3 s: 156 s = 02:36
    shown.update(1, 88080, settled=False)
    assert out.getvalue() == ("points: 1/88080 decided (0%) after 00:50, 0.02 points/s, 02:36 left "
                              "(4 full evaluation(s) before a value to beat)\n")
    reading = Ahead(1, np.array([1.0, 1.0]), np.array([False, False]), None, evaluations=4)  # no bound against a value
    shown.tick()
    assert shown.rate_text(150.0) == "0.02 points/s, at least 02:30 left (4 full evaluation(s) before a value to beat)"


def test_known_bounds_are_known_bound_of_every_point(tmp_path):
    """The progress's vectorised read equals the study's own one point at a time, after a study has found bounds."""
    cache = tmp_path / "cache"
    out = run_study(compose_config(*TINY_MODEL, "hw=tiny_grid", "hw.inter_op_parallel=false", f"cache_dir={cache}",
                                   f"schedule.cache_dir={cache}/schedule", "search.storage=memory", "tracking.enabled=false"),
                    progress=False)
    ev, points = out.evaluator, np.arange(len(out.evaluator))
    one_by_one = np.array([ev.known_bound(int(i)) for i in points])
    assert np.array_equal(ev.known_bounds(points), one_by_one)
    assert (one_by_one < ev.work_bound).sum() > 0 and ev.placement_bounds > 0 and ev.placement_bound_s > 0


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
    script = (f"import runpy, sys; import phaze.search.progress as p; p.PLAIN_INTERVAL_S = 0.0; "
              f"sys.argv = ['phaze.run', *sys.argv[1:]]; runpy.run_module('phaze.run', run_name='__main__', alter_sys=True)")
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
