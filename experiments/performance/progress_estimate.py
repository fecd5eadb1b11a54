"""How far the progress lines' time left is from the real remainder, on the headline run with its output in a file.

    python -m experiments.performance.progress_estimate [--overrides model=llama2 hw=phaze_grid]

One `python -m phaze.run` from empty caches in a fresh temporary directory (search.storage=memory,
tracking.enabled=false), its stderr a pipe, in a child process that records, at every reading of the study's
progress (phaze.search.progress.StudyProgress.tick), the wall clock, the points decided, the points to decide and
whether there is a value to beat, and the wall clock when the study's loop ends. This process stamps each plain
progress line as it arrives and compares the time left it shows with the real remainder (the loop's end - the line's
arrival). The readings then give the time left phaze showed at every reading (StudyProgress.rate_text: from the kinds
of the points ahead), and the one that rates of points would have shown: since the start (tqdm's, what the issue saw),
since the first point decided, and over windows of 10 s (RATE_WINDOW_S) and 30 s.
Writes experiments/results/progress_estimate.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from experiments.harness import command_line, module_command, repository_env, write_result

MODULE = "experiments.performance.progress_estimate"
EARLY_SHARE = 0.2
"""The first 20% of the study (of its time, or of its points) is left out of the comparison (issue 45, item 6)."""
TARGET_RATIO = 3.0
"""Issue 45's bound on the estimate against the real remainder, either way."""
LINE = re.compile(r"^points: (\d+)/(\d+) decided \((\d+)%\) after ([\d:]+), (.*)$")
LEFT = re.compile(r"([\d:]+) left")


def child(readings_path: str, phaze_args: list[str]) -> None:
    """Run phaze.run here with StudyProgress's readings recorded (wall clock), written to readings_path at the loop's end."""
    import runpy

    from phaze.search import progress

    studies = []
    tick, close = progress.StudyProgress.tick, progress.StudyProgress.close

    def recorded_tick(self) -> None:
        tick(self)
        if not studies or studies[-1]["owner"] != id(self):
            studies.append({"owner": id(self), "readings": []})
        studies[-1]["readings"].append((time.time(), self.decided, self.total, self.settled, self.rate_text(self.now()),
                                        kinds_of(self)))

    def recorded_close(self) -> None:
        close(self)
        for study in studies:
            if study["owner"] == id(self):
                study["end"] = time.time()
        Path(readings_path).write_text(json.dumps([{k: v for k, v in s.items() if k != "owner"} for s in studies]))

    progress.StudyProgress.tick, progress.StudyProgress.close = recorded_tick, recorded_close
    sys.argv = ["phaze.run", *phaze_args]
    runpy.run_module("phaze.run", run_name="__main__", alter_sys=True)


def kinds_of(shown) -> dict | None:
    """What a StudyProgress knew at a reading: the kinds of the points ahead (phaze.search.progress.Ahead) and the
    costs measured so far (Costs), None without `ahead`."""
    known = shown.known
    if known is None:
        return None
    costs = shown.costs(shown.now())
    return {"fresh_signatures": float(known.fresh.sum()), "least_fresh": known.least_fresh,
            "bounded_points": int(known.bounded.sum()), "bounded_signatures": len(known.bounded_groups()),
            "evaluations_left": known.evaluations, "placement_bound_s": known.bound_s, "own_bound_s": known.own_bound_s,
            "schedule_bound_s": known.schedule_bound_s, "lookup_s": known.lookup_s, "probe_s": costs.probe_s,
            "evaluation_s": costs.evaluation_s, "milp_s": costs.milp_s, "trial_s": costs.trial_s,
            "trial_milp_s": costs.trial_milp_s, "trials": known.trials}


def readings_table(study: dict) -> pd.DataFrame:
    """Every reading: its time in the study, the real remainder, the points, the time left shown and what it came from."""
    start, end = study["readings"][0][0], study["end"]
    return pd.DataFrame([{"at_s": t - start, "real_left_s": end - t, "decided": decided, "to_decide": total,
                          "shown": text, **(kinds or {})} for t, decided, total, settled, text, kinds in study["readings"]])


def seconds_of(clock: str) -> float:
    """[H:]MM:SS as seconds."""
    parts = [int(p) for p in clock.split(":")]
    return float(sum(p * 60 ** k for k, p in enumerate(reversed(parts))))


def run(overrides: list[str]) -> tuple[list[tuple[float, str]], dict, str, float]:
    """(arrival wall time, line) of each progress line, the study's readings, stdout, wall s of the run."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        readings = tmp / "readings.json"
        command = [*module_command(MODULE, "--child", str(readings)), *overrides,
                   f"cache_dir={tmp / 'cache'}", f"schedule.cache_dir={tmp / 'cache' / 'schedule'}",
                   "search.storage=memory", "tracking.enabled=false"]
        lines = []
        start = time.perf_counter()
        with open(tmp / "stdout.txt", "w") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, text=True, cwd=tmp, env=repository_env())
            for line in proc.stderr:
                lines.append((time.time(), line.rstrip("\n")))
            if proc.wait() != 0:
                raise RuntimeError("\n".join(line for _, line in lines[-40:]))
        wall_s = time.perf_counter() - start
        studies = json.loads(readings.read_text())
        if len(studies) != 1:
            raise RuntimeError(f"{len(studies)} studies in the run; this comparison reads one")
        return lines, studies[0], (tmp / "stdout.txt").read_text(), wall_s


def line_table(lines: list[tuple[float, str]], study: dict) -> pd.DataFrame:
    """Each progress line: its time in the study, points, the time left it shows, the real remainder, their ratio."""
    start, end = study["readings"][0][0], study["end"]
    rows = []
    for arrived, text in lines:
        match = LINE.match(text)
        if not match:
            continue
        left = LEFT.search(match.group(5))
        shown = 0.0 if match.group(5).startswith("none left") else seconds_of(left.group(1)) if left else None
        real = end - arrived
        rows.append({"at_s": arrived - start, "time_share": (arrived - start) / (end - start),
                     "decided": int(match.group(1)), "to_decide": int(match.group(2)),
                     "shown_left_s": shown, "real_left_s": real,
                     "ratio": ratio(shown, real) if shown is not None else None, "text": match.group(5)})
    return pd.DataFrame(rows, columns=["at_s", "time_share", "decided", "to_decide", "shown_left_s", "real_left_s", "ratio", "text"])


def ratio(estimate_s: float, real_s: float) -> float:
    """max(estimate / real, real / estimate): how many times off, either way (a second's rounding on each side)."""
    estimate_s, real_s = max(estimate_s, 1.0), max(real_s, 1.0)
    return max(estimate_s / real_s, real_s / estimate_s)


def rate_since(readings: list, k: int, origin: int) -> float | None:
    """Points per second from reading `origin` to reading k."""
    (t0, d0), (t1, d1) = readings[origin][:2], readings[k][:2]
    return (d1 - d0) / (t1 - t0) if d1 > d0 and t1 > t0 else None


def window_rate(readings: list, k: int, window_s: float) -> float | None:
    """phaze.search.progress.RateMeter's rate at reading k over window_s."""
    from phaze.search.progress import RateMeter

    meter = RateMeter(window_s)
    for t, d, *_ in readings[:k + 1]:
        meter.add(t, d)
    return meter.per_s()


def alternatives(study: dict) -> pd.DataFrame:
    """The worst ratio, over the readings past the first 20% of the study's time or of its points, of the time left at
    each rate (none shown before there is a value to beat)."""
    readings, end = study["readings"], study["end"]
    start = readings[0][0]
    first = next((k for k, r in enumerate(readings) if r[1] > 0), 0)
    kinds = {"the kinds of the points ahead (phaze's, StudyProgress)": lambda k: shown_left_s(readings[k][4])}
    rates = {"since the start (tqdm's)": lambda k: rate_since(readings, k, 0),
             "since the first point decided": lambda k: rate_since(readings, k, first),
             "last 10 s (RATE_WINDOW_S)": lambda k: window_rate(readings, k, 10.0),
             "last 30 s": lambda k: window_rate(readings, k, 30.0)}
    rows = []
    for name, left_at in [*kinds.items(), *((n, rate_left(r, readings)) for n, r in rates.items())]:
        worst = {"time": 0.0, "points": 0.0}
        for k, (t, decided, total, settled, *_) in enumerate(readings):
            left_s = left_at(k)
            if left_s is None or decided >= total:
                continue
            off = ratio(left_s, end - t)
            if (t - start) / (end - start) >= EARLY_SHARE:
                worst["time"] = max(worst["time"], off)
            if decided / total >= EARLY_SHARE:
                worst["points"] = max(worst["points"], off)
        rows.append({"rate": name, "worst ratio after 20% of the time": worst["time"],
                     "worst ratio after 20% of the points": worst["points"]})
    return pd.DataFrame(rows)


def shown_left_s(text: str) -> float | None:
    """The time left a progress text shows (None: none shown)."""
    left = LEFT.search(text)
    return 0.0 if text.startswith("none left") else seconds_of(left.group(1)) if left else None


def rate_left(rate_at, readings: list):
    """The time left at reading k at a rate of points (reading k -> points/s), none before there is a value to beat."""
    def left_at(k: int) -> float | None:
        _, decided, total, settled, *_ = readings[k]
        rate = rate_at(k)
        return None if not settled or rate is None else (total - decided) / rate

    return left_at


def phases(study: dict) -> pd.DataFrame:
    """When the study's readings first reach given counts of points decided: where its time goes."""
    readings, end = study["readings"], study["end"]
    start = readings[0][0]
    marks, rows = [1, 10, 100, 1000], []
    total = readings[-1][2]
    for mark in [*marks, total // 2, total]:
        at = next((t for t, d, *_ in readings if d >= mark), None)
        if at is not None:
            rows.append({"points decided": mark, "at s": at - start, "share of the study's time": (at - start) / (end - start)})
    settled = next((t for t, _, _, s, *_ in readings if s), None)
    if settled is not None:
        rows.append({"points decided": "a value to beat", "at s": settled - start, "share of the study's time": (settled - start) / (end - start)})
    return pd.DataFrame(rows)


def worst_ratio(lines: pd.DataFrame) -> str:
    """The worst ratio either way among these lines against TARGET_RATIO, or that there is no line to judge."""
    if not len(lines):
        return "no line to judge"
    worst = lines.ratio.max()
    return f"worst ratio either way **{worst:.2f}x** ({'within' if worst <= TARGET_RATIO else 'NOT within'} {TARGET_RATIO:.0f}x)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=["model=llama2", "hw=phaze_grid"])
    args = parser.parse_args()
    lines, study, stdout, wall_s = run(args.overrides)
    best = re.search(r"(\d+\.\d+) seq/s", stdout)
    table = line_table(lines, study)
    late_time = table[(table.time_share >= EARLY_SHARE) & table.ratio.notna()]
    late_points = table[(table.decided / table.to_decide >= EARLY_SHARE) & table.ratio.notna()]
    study_s = study["end"] - study["readings"][0][0]
    command = command_line()
    shown = table.drop(columns=["text"]).assign(shown=table.text)
    page = "\n".join([
        "# The progress lines' time left against the real remainder", "",
        f"Generated by `{command}`: `python -m phaze.run {' '.join(args.overrides)}` from empty caches, stderr to a pipe, "
        f"2 cores shared with other work; {wall_s:.0f} s of wall, {study_s:.0f} s in the study's loop; best "
        f"{best.group(1) if best else '?'} seq/s.", "",
        f"- lines past the first 20% of the study's time with a time left: {len(late_time)}; {worst_ratio(late_time)}",
        f"- lines past the first 20% of the points to decide: {len(late_points)}; {worst_ratio(late_points)}", "",
        "## Every progress line", "", shown.to_markdown(index=False, floatfmt=".3g"), "",
        "## Where the study's time goes", "", phases(study).to_markdown(index=False, floatfmt=".3g"), "",
        "## The time left at other rates, at every reading (once a second)", "",
        alternatives(study).to_markdown(index=False, floatfmt=".3g"), "",
    ])
    write_result("progress_estimate", page, overrides=args.overrides, wall_s=wall_s, study_s=study_s, lines=table,
                 phases=phases(study), alternatives=alternatives(study), readings=readings_table(study))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
    else:
        main()
