"""A study's progress in a form a person can trust: a live bar on a terminal, a plain line at most every
PLAIN_INTERVAL_S when the output is a file or a pipe, and a time left that comes from the points still to decide, not
from tqdm's count over elapsed time on a bar whose total shrinks and whose count jumps as the branch and bound passes
points over. For a branch-and-bound study the points ahead are split by what deciding them will cost (kinds_ahead: a
look-up for those a bound already found dismisses, a placement bound per cost signature not bounded yet, a DP or a
trial for those bounded but still open), each kind at its measured cost (time_left_s); the headline run decides its
points at costs 10,000x apart, so a rate of points alone is hundreds of times off (experiments/results/progress_estimate.md)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, TextIO

import numpy as np
from tqdm import tqdm

PLAIN_INTERVAL_S = 10.0
"""Seconds at least between two plain lines (output to a file or a pipe): a log of a seven-minute search keeps some
forty lines, and a person reading it sees one at most 10 s old (issue 45)."""
POLL_S = 1.0
"""Seconds between two readings of the points decided: the sampler decides thousands of points within one proposal,
where no trial ends (the walk over the points its bounds pass over: 11,033 of the headline run's 11,133 in the last
25% of its study, experiments/results/progress_estimate.md)."""
RATE_WINDOW_S = 10.0
"""Seconds back over which a rate is measured (RateMeter: the points' rate shown, and the bounded points' in
time_left_s): the headline run decides points at rates thousands of times apart (0.1 a second through its full
evaluations, thousands a second in the walk at its end), so a rate must follow the latest; past the first 20% of its
points the time left from the points' rate over 10 s was at most 6.47x off, against 17.1x over 30 s and 90.7x since
the start, tqdm's rate (experiments/results/progress_estimate.md)."""


def clock(seconds: float) -> str:
    """Seconds as [H:]MM:SS, as tqdm writes them."""
    return tqdm.format_interval(seconds)


class RateMeter:
    """Points decided per second over the last RATE_WINDOW_S, and the time left to decide the rest at that rate.

    The rate runs from the latest reading at least window_s old whose count is below the current one (the first reading
    in the first window_s): through a long trial that decides nothing it falls as the trial goes on, instead of
    dropping to zero or staying at the walk's pace."""

    def __init__(self, window_s: float = RATE_WINDOW_S):
        self.window_s = window_s
        self.readings: list[tuple[float, int]] = []
        """(time s, points decided), in time order."""

    def add(self, time_s: float, decided: int) -> None:
        self.readings.append((time_s, decided))

    def per_s(self) -> float | None:
        """Points decided per second (see the class); None before a second reading has decided more than the first."""
        if len(self.readings) < 2:
            return None
        now_s, decided = self.readings[-1]
        start_s, before = self.readings[0]
        for time_s, count in reversed(self.readings[:-1]):
            if time_s <= now_s - self.window_s and count < decided:
                start_s, before = time_s, count
                break
        if decided <= before or now_s <= start_s:
            return None
        return (decided - before) / (now_s - start_s)

    def left_s(self, total: int) -> float | None:
        """Seconds left to decide the points up to `total` at the measured rate: 0 once none is left, None without a rate."""
        if self.readings and self.readings[-1][1] >= total:
            return 0.0
        rate = self.per_s()
        return None if rate is None else (total - self.readings[-1][1]) / rate


def kinds_ahead(known: np.ndarray, work: np.ndarray, beat: np.ndarray, signatures: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points still to decide by what deciding them will cost: (fresh, bounded), an array each over the points.
    fresh: for a point bounded by its work bound only, 1/(such points of its cost signature), since one placement bound
    at the largest HBM bounds them all (ModelEvaluator.placement_bound); else 0. bounded: whether a bound found so far
    bounds the point below its work bound yet still above the value to beat `beat` (its own DP, schedule bound or a
    trial). The rest, known <= beat, a bound already found dismisses (a look-up each, counted as free)."""
    fresh = np.zeros(len(known))
    open_ = known > beat
    unbounded = open_ & (known >= work)
    if unbounded.any():
        _, where, counts = np.unique(signatures[unbounded], return_inverse=True, return_counts=True)
        fresh[unbounded] = 1.0 / counts[where]
    return fresh, open_ & ~unbounded


@dataclass(frozen=True)
class Ahead:
    """What is known cheaply about the points still to decide (a branch-and-bound study, StudyProgress's `ahead`)."""

    cursor: int
    """The sampler's cursor: the points before it in the order are decided."""
    fresh: np.ndarray
    """kinds_ahead's fresh shares of the points from the cursor to the total (their sum: signatures to bound)."""
    bounded: np.ndarray
    """kinds_ahead's bounded points, over the same points."""
    bound_s: float | None = None
    """Mean seconds of a placement bound against a value to beat so far (SpaceEvaluator.placement_bound_s over
    placement_bounds); None before the first."""
    evaluations: int = 0
    """Full evaluations still needed before there is a value to beat (search.top_n less the points completed); the
    kinds are then read against the lowest value completed so far."""


def time_left_s(ahead: Ahead, bounded_rate: float | None, evaluation_s: float | None, running_s: float,
                trial_s: float | None) -> float | None:
    """Seconds left, kind by kind at its measured cost: the full evaluations before a value to beat at their mean
    `evaluation_s` (less the `running_s` the current one has run), a placement bound per fresh signature at the mean
    `bound_s`, the bounded points at the rate they were passed over the last RATE_WINDOW_S (`bounded_rate`, per s),
    before that at the mean trial `trial_s`. None where a kind with points left has no measured cost yet, except
    before a value to beat: then the evaluations' seconds alone, at least what is left (StudyProgress says so)."""
    left_s = 0.0
    if ahead.evaluations:
        if evaluation_s is None:
            return None
        left_s += max(ahead.evaluations * evaluation_s - running_s, 0.0)
    signatures = float(ahead.fresh.sum())
    if signatures > 0:
        if ahead.bound_s is None:
            return left_s if ahead.evaluations else None
        left_s += signatures * ahead.bound_s
    bounded = int(ahead.bounded.sum())
    if bounded:
        if bounded_rate is None and trial_s is None:
            return left_s if ahead.evaluations else None
        left_s += bounded / bounded_rate if bounded_rate is not None else bounded * trial_s
    return left_s


def terminal_shape(stream: TextIO) -> tuple[int, int]:
    """(columns, lines) of the terminal on `stream`. A pseudo-terminal that reports no size (0 x 0: `script` run without
    a terminal of its own, some CI runners) takes shutil's ($COLUMNS/$LINES, else 80 x 24): tqdm counts -1 lines on
    such a stderr and draws nothing at all."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        size = os.terminal_size((0, 0))
    fallback = shutil.get_terminal_size()
    return size.columns or fallback.columns, size.lines or fallback.lines


class StudyProgress:
    """Progress of a study's loop: `update(decided, total, settled, **stats)` after each trial, `close()` at its end.

    On a terminal (`stream.isatty()`) a tqdm bar; otherwise a plain line at most every PLAIN_INTERVAL_S with the points
    decided out of those to decide, the rate and the time left (RateMeter). `position` (the sampler's count of points
    decided) is read every POLL_S by a thread, so the bar moves and the lines come while a proposal walks over
    thousands of points or a trial runs for minutes. A total that is not `settled` (no value to beat yet: the whole
    space) gives no time left. Disabled (the other workers of search.n_workers) it writes nothing and starts no thread.

    With `ahead` (a branch-and-bound study: what is known of the points still to decide, read at every reading) the
    time left comes from their kinds instead (kinds_ahead, time_left_s), each at its measured cost: the full
    evaluations before a value to beat, the signatures still to bound, the points bounded but still open (`trial`
    records each trial's seconds)."""

    def __init__(self, total: int, unit: str, enabled: bool = True, stream: TextIO | None = None,
                 now: Callable[[], float] = time.monotonic, position: Callable[[], int] | None = None, settled: bool = True,
                 ahead: Callable[[], Ahead] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.unit = unit
        self.enabled = enabled
        self.now = now
        self.position = position
        self.start_s = now()
        self.last_line_s = self.start_s
        self.decided, self.total, self.settled, self.stats = 0, total, settled, {}
        self.meter = RateMeter()
        self.meter.add(self.start_s, 0)
        self.ahead = ahead if enabled else None
        self.known: Ahead | None = None
        """The latest reading of `ahead`."""
        self.bounded_decided = 0
        """Bounded points (kinds_ahead) the cursor has passed, each of that kind when last read."""
        self.bounded_meter = RateMeter()
        self.evaluations_s: list[float] = []
        self.trials_s: list[tuple[float, bool]] = []
        """(seconds, whether there was a value to beat) of every trial."""
        self.last_evaluation_s = self.start_s
        self.lock = threading.Lock()
        self.bar = None
        if enabled and self.stream.isatty():
            columns, lines = terminal_shape(self.stream)
            self.bar = tqdm(total=total, desc=unit, file=self.stream, leave=False, ncols=columns - 1, nrows=lines - 1,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")
        self.stopped = threading.Event()
        self.watcher = None
        if enabled and position is not None:
            self.watcher = threading.Thread(target=self.watch, name="phaze-progress", daemon=True)
            self.watcher.start()

    def watch(self) -> None:
        while not self.stopped.wait(POLL_S):
            self.tick()

    def update(self, decided: int, total: int, settled: bool = True, **stats) -> None:
        """`decided` points decided out of `total` to decide now (`settled`: total counts against a value to beat), with
        the study's `stats` (pruned, best...) shown beside."""
        with self.lock:
            self.decided, self.total, self.settled, self.stats = decided, total, settled, stats
        self.tick()

    def trial(self, seconds: float, evaluated: bool) -> None:
        """A trial took `seconds` (`evaluated`: a full evaluation that completed)."""
        with self.lock:
            self.trials_s.append((seconds, self.settled))
            if evaluated:
                self.evaluations_s.append(seconds)
                self.last_evaluation_s = self.now()

    def read_ahead(self, time_s: float) -> None:
        """Read `ahead`, count the bounded points the cursor passed since the last reading, and measure their rate."""
        known, self.known = self.known, self.ahead()
        if known is not None:
            self.bounded_decided += int(known.bounded[:max(self.known.cursor - known.cursor, 0)].sum())
        self.bounded_meter.add(time_s, self.bounded_decided)

    def tick(self) -> None:
        """Read the points decided, measure the rate, and redraw the bar or write a line when one is due."""
        with self.lock:
            if self.position is not None:
                self.decided = self.position()
            self.decided = min(self.decided, self.total)
            time_s = self.now()
            self.meter.add(time_s, self.decided)
            if self.ahead is not None:
                self.read_ahead(time_s)
            if not self.enabled:
                return
            shown = ", ".join([self.rate_text(time_s), *(f"{key}={value}" for key, value in self.stats.items())])
            if self.bar is not None:
                self.bar.total, self.bar.n = self.total, self.decided
                self.bar.set_postfix_str(shown, refresh=False)
                self.bar.refresh()
            elif time_s - self.last_line_s >= PLAIN_INTERVAL_S:
                self.last_line_s = time_s
                share = self.decided / self.total if self.total else 1.0
                self.stream.write(f"{self.unit}: {self.decided}/{self.total} decided ({share:.0%}) after "
                                  f"{clock(time_s - self.start_s)}, {shown}\n")
                self.stream.flush()

    def rate_text(self, time_s: float) -> str:
        """The measured rate and the time left, or why there is no time left to show."""
        rate, left_s = self.meter.per_s(), self.meter.left_s(self.total)
        if left_s == 0.0:
            return "none left"
        if self.known is not None:
            return self.kinds_text(rate, time_s)
        if rate is None:
            return "rate not measured yet"
        if not self.settled:
            return f"{rate:.3g} {self.unit}/s, no value to beat yet"
        return f"{rate:.3g} {self.unit}/s, {clock(left_s)} left"

    def kinds_text(self, rate: float | None, time_s: float) -> str:
        """The rate and the time left from the kinds of the points ahead (time_left_s)."""
        shown = "rate not measured yet" if rate is None else f"{rate:.3g} {self.unit}/s"
        evaluation_s = float(np.mean(self.evaluations_s)) if self.evaluations_s else None
        against = [seconds for seconds, settled in self.trials_s if settled]  # a trial pruned against a value costs less
        trial_s = float(np.mean(against or [seconds for seconds, _ in self.trials_s])) if self.trials_s else None
        left_s = time_left_s(self.known, self.bounded_meter.per_s(), evaluation_s, time_s - self.last_evaluation_s, trial_s)
        if self.known.evaluations:
            if left_s is None:
                return f"{shown}, no value to beat yet"
            whole = time_left_s(replace(self.known, evaluations=0), self.bounded_meter.per_s(), None, 0.0, trial_s) is not None
            return (f"{shown}, {'' if whole else 'at least '}{clock(left_s)} left ({self.known.evaluations} full "
                    f"evaluation(s) before a value to beat)")
        if left_s is None:
            return f"{shown}, time left not measured yet"
        return f"{shown}, {clock(left_s)} left"

    def __enter__(self) -> StudyProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the thread and take the bar away; a second call does nothing more."""
        self.stopped.set()
        if self.watcher is not None:
            self.watcher.join()
        if self.bar is not None:
            self.bar.close()
