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
from dataclasses import dataclass
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
"""Seconds back over which the points' rate shown is measured (RateMeter), and the recent costs of trials (Costs),
list-schedule bounds and look-ups (Ahead): the headline run decides points at rates thousands of times apart (0.1 a
second through its full evaluations, thousands a second in the walk at its end), so a rate must follow the latest;
past the first 20% of its points the time left from the points' rate over 10 s was at most 6.47x off, against 17.1x
over 30 s and 90.7x since the start, tqdm's rate (experiments/results/progress_estimate.md)."""


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
    bounds the point below its work bound yet still above the value to beat `beat` (a placement bound at its own HBM,
    and for some a trial, will decide it). The rest, known <= beat, a bound already found dismisses (the look-up that
    every point takes, Ahead.lookup_s)."""
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
    """Seconds of a fresh signature's placement bound: the mean of the DPs at a signature's largest HBM against a value
    to beat so far (bound_clock.dp_s, TOP_DP). Over the whole run, not the latest: a DP's time is its signature's, and
    the signatures the walk opens in a burst are not those it decides after (the headline run's burst took its latest
    DPs to 34 ms, those after it ran at 13-20 ms, experiments/results/progress_estimate.md); None before the first."""
    evaluations: int = 0
    """Full evaluations still needed before there is a value to beat (search.top_n less the points completed); the
    kinds are then read against the lowest value completed so far."""
    groups: np.ndarray | None = None
    """The cost signatures of the same points (HBM siblings share one, and with it every layer schedule); None: each
    point its own."""
    schedule_bound_s: float | None = None
    """Mean seconds of the list-schedule bounds against a value to beat over the last RATE_WINDOW_S; None before the
    first."""
    least_fresh: int | None = None
    """Of the fresh signatures, those no other open point dominates (phaze.search.ahead.least_fresh): the fewest
    placement bounds they can take, since a bound on a point bounds every point it dominates. None: each its own."""
    evaluated: np.ndarray | None = None
    """Over the same points, whether a point of its signature had a full evaluation: every layer schedule of the
    signature is then known, and its bounded points are decided by their placement bounds, not trials (the headline
    run's first 5 evaluations left 6 such signatures open, all passed over without a trial). None: none had."""
    own_bound_s: float | None = None
    """Seconds of a bounded point's placement bound: the mean of the DPs at a point's own HBM so far (as bound_s,
    OWN_DP); None before the first (then at bound_s)."""
    lookup_s: float | None = None
    """Mean seconds of the walk's latest look-ups of a point's bound in the bounds found so far (bound_clock's LOOKUP,
    as bound_s), one for every point it passes; None before the first (then counted as free)."""
    trials: float | None = None
    """How many of bounded_groups' signatures will take a trial: the sum of their trial_chance; None: not known, half
    of them (trial_chance before any list-schedule bound)."""

    def bounded_groups(self) -> np.ndarray:
        """The distinct signatures of the bounded points not evaluated: those a trial may decide; without `groups`, the
        points' places in the order."""
        bounded = self.bounded if self.evaluated is None else self.bounded & ~self.evaluated
        if self.groups is None:
            return self.cursor + np.flatnonzero(bounded)
        return np.unique(self.groups[bounded])


@dataclass(frozen=True)
class Costs:
    """What each kind of decision has cost in this run so far (StudyProgress measures them; time_left_s reads them)."""

    evaluation_s: float | None = None
    """Mean seconds of a full evaluation; None before the first ends."""
    running_s: float = 0.0
    """Seconds the evaluation under way has run."""
    probe_s: float | None = None
    """Mean seconds of a placement bound against the lowest value completed, timed on a signature still to bound after
    each full evaluation while there is no value to beat (StudyProgress's `probe`, phaze.search.ahead.bound_probe): the
    cost of a placement bound before any is asked for."""
    milp_s: float | None = None
    """Mean seconds of a layer MILP in the trials so far: a bounded signature's trial before any trial against a value
    to beat has run (each such trial of the headline run ran one MILP and was pruned by it,
    experiments/results/progress_estimate.md)."""
    trial_s: float | None = None
    """Mean seconds of the trials against a value to beat that ended over the last RATE_WINDOW_S (the latest one where
    none did); None before the first. Recent, not since the start: the first trials after the value to beat each
    solve a new layer MILP (5 s on the headline run), later ones find most of theirs solved (1-2 s)."""
    trial_milp_s: float = 0.0
    """Mean seconds of the layer MILPs of the same trials (the part of trial_s a trial that needs no new MILP skips)."""


def fresh_bounds(ahead: Ahead) -> float:
    """Placement bounds the fresh signatures will take: between Ahead.least_fresh (those no other open point dominates)
    and all of them (none bounded by a neighbour's bound), how many depends on values not found yet, so their geometric
    mean, the estimate whose worst ratio to any count in that range is the least (the square root of their ratio). The
    headline run's walk ran 905 placement DPs for 3,711 fresh signatures, 226 of them undominated
    (experiments/results/progress_estimate.md)."""
    signatures = float(ahead.fresh.sum())
    return signatures if ahead.least_fresh is None else float(np.sqrt(ahead.least_fresh * signatures))


def trial_cost_s(costs: Costs) -> float | None:
    """Seconds a bounded signature's trial will take: between the recent trials' part outside their layer MILPs (its
    layers' schedules proven by list schedules or solved already) and their whole (a MILP as theirs), which of the two
    is unknown until its list schedules run, so their geometric mean (as fresh_bounds). The headline run's first trials
    against a value each ran a 5-7 s MILP, its later ones none, at about 1 s (experiments/results/progress_estimate.md).
    Before the first such trial, the mean layer MILP; None without either."""
    if costs.trial_s is None:
        return costs.milp_s
    return float(np.sqrt(max(costs.trial_s - costs.trial_milp_s, 0.0) * costs.trial_s))


def trial_chance(thresholds: np.ndarray, tightenings: np.ndarray) -> np.ndarray:
    """Per bounded signature, the chance that its list-schedule bound leaves it above the value to beat, so that it takes
    a trial: its threshold is the value to beat over its bound now, and of the list-schedule bounds of this run so far
    (bound_clock.tightenings, each the ratio of the bound to the one before it) the share above it would keep it open,
    by Laplace's rule of succession, (above + 1) / (n + 2): one half before any. The headline run's walk opens up to 185
    bounded signatures at once, at bounds closer to the value than the 21 before, all of which took a trial; few or none
    of them take one (experiments/results/progress_estimate.md)."""
    ratios = np.sort(np.asarray(tightenings, dtype=float))
    above = len(ratios) - np.searchsorted(ratios, np.asarray(thresholds, dtype=float), side="right")
    return (above + 1.0) / (len(ratios) + 2.0)


def time_left_s(ahead: Ahead, costs: Costs) -> tuple[float, bool] | None:
    """(seconds left, whether every kind with points left had a measured cost), kind by kind: the full evaluations
    before a value to beat at their mean (less the time the current one has run), the fresh signatures' placement
    bounds (fresh_bounds, at Ahead.bound_s; before one is asked for, at the probe's) and one per bounded point (at
    Ahead.own_bound_s), a look-up per point (Ahead.lookup_s); then each bounded signature not evaluated
    (Ahead.bounded_groups) its list-schedule bound (Ahead.schedule_bound_s), and those of them that it leaves open
    (Ahead.trials) a trial (trial_cost_s; before the first trial against a value, a layer MILP). Where a kind with
    points left has no cost yet: before a value to beat, the rest is at least what is left (whole False); after, None,
    as before the first evaluation ends."""
    left_s, whole = 0.0, True
    if ahead.evaluations:
        if costs.evaluation_s is None:
            return None
        left_s += max(ahead.evaluations * costs.evaluation_s - costs.running_s, 0.0)
    left_s += len(ahead.fresh) * (ahead.lookup_s or 0.0)
    bound_s = ahead.bound_s if ahead.bound_s is not None else costs.probe_s
    own_s = ahead.own_bound_s if ahead.own_bound_s is not None else bound_s
    fresh, bounded = fresh_bounds(ahead), float(ahead.bounded.sum())
    if fresh + bounded > 0:
        if bound_s is None:
            whole = False
        else:
            left_s += fresh * bound_s + bounded * own_s
    signatures = len(ahead.bounded_groups())
    if signatures:
        left_s += signatures * (ahead.schedule_bound_s or 0.0)
        trial_s = trial_cost_s(costs)
        if trial_s is None:
            whole = False
        else:
            left_s += (signatures / 2 if ahead.trials is None else ahead.trials) * trial_s
    if not whole and not ahead.evaluations:
        return None
    return left_s, whole


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
    time left comes from their kinds instead (kinds_ahead, time_left_s), each at its cost measured in this run (Costs):
    the full evaluations before a value to beat, the placement bounds still to run, the trials of the signatures
    bounded but still open (`trial` records each trial's seconds and its layer MILPs'). While there is no value to beat,
    `probe` (called after each full evaluation, in the study's thread) times one placement bound against the lowest
    value completed, so the bounds to come have a cost before the first is asked for."""

    def __init__(self, total: int, unit: str, enabled: bool = True, stream: TextIO | None = None,
                 now: Callable[[], float] = time.monotonic, position: Callable[[], int] | None = None, settled: bool = True,
                 ahead: Callable[[], Ahead] | None = None, probe: Callable[[], float | None] | None = None):
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
        self.probe = probe if enabled else None
        self.probes_s: list[float] = []
        """The probes' seconds (their mean: Costs.probe_s)."""
        self.evaluations_s: list[float] = []
        self.milps_s: list[float] = []
        """Seconds of every layer MILP the trials ran."""
        self.against: list[tuple[float, float, float]] = []
        """(when it ended, seconds, its layer MILPs' seconds) of each trial against a value to beat."""
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

    def trial(self, seconds: float, evaluated: bool, milps_s: tuple[float, ...] = ()) -> None:
        """A trial took `seconds` (`evaluated`: a full evaluation that completed), its layer MILPs `milps_s`."""
        probe_s = self.probe() if self.probe is not None and evaluated and not self.settled else None
        with self.lock:
            if self.settled:
                self.against.append((self.now(), seconds, float(sum(milps_s))))
            self.milps_s.extend(milps_s)
            if probe_s is not None:
                self.probes_s.append(probe_s)
            if evaluated:
                self.evaluations_s.append(seconds)
                self.last_evaluation_s = self.now()

    def recent_trials(self, time_s: float) -> int:
        """How many trials against a value to beat ended over the last RATE_WINDOW_S before `time_s`."""
        return sum(end_s > time_s - RATE_WINDOW_S for end_s, _, _ in self.against)

    def costs(self, time_s: float) -> Costs:
        """What each kind of decision has cost so far (Costs), at `time_s`."""
        recent = self.against[-max(self.recent_trials(time_s), 1):]
        return Costs(evaluation_s=float(np.mean(self.evaluations_s)) if self.evaluations_s else None,
                     running_s=time_s - self.last_evaluation_s,
                     probe_s=float(np.mean(self.probes_s)) if self.probes_s else None,
                     milp_s=float(np.mean(self.milps_s)) if self.milps_s else None,
                     trial_s=float(np.mean([seconds for _, seconds, _ in recent])) if recent else None,
                     trial_milp_s=float(np.mean([milps_s for _, _, milps_s in recent])) if recent else 0.0)

    def tick(self) -> None:
        """Read the points decided, measure the rate, and redraw the bar or write a line when one is due."""
        with self.lock:
            if self.position is not None:
                self.decided = self.position()
            self.decided = min(self.decided, self.total)
            time_s = self.now()
            self.meter.add(time_s, self.decided)
            if self.ahead is not None:
                self.known = self.ahead()
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
        left = time_left_s(self.known, self.costs(time_s))
        if left is None:
            return f"{shown}, {'no value to beat yet' if self.known.evaluations else 'time left not measured yet'}"
        left_s, whole = left
        text = f"{shown}, {'' if whole else 'at least '}{clock(left_s)} left"
        return f"{text} ({self.known.evaluations} full evaluation(s) before a value to beat)" if self.known.evaluations else text

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
