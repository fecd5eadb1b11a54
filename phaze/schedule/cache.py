"""Solved layers on disk (one JSON file per problem) with an in-process copy in front.

The key is the problem's content, not its origin: edges, units, both latencies of every operator,
the core counts as far as they matter (a 1-core unit differs from a multi-core one; beyond the
number of operators on a unit, more cores cannot change which single-mode operators may overlap),
and the requested MIP gap. So the same layer on an equivalent chip is never solved twice, whichever
backend solved it first. An entry that cannot be read back whole (a truncated file, another version's fields) or
that does not fit its problem is reported and solved again, and the next save replaces its file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from phaze.atomic_file import write_atomic
from phaze.placement.kept import Kept
from phaze.schedule.checker import check_times
from phaze.schedule.instance import RESOURCES, LayerProblem
from phaze.schedule.result import LayerSchedule

log = logging.getLogger(__name__)

CACHE_VERSION = 2
"""Bump when the model or the meaning of a cached schedule changes, so stale entries are ignored (2: the split bound
proves schedules that version 1 left open, status time_limit)."""


def effective_cores(problem: LayerProblem) -> list[int]:
    """Per resource: 1 stays 1; otherwise min(cores, max(2, operators that hold the resource))."""
    holders = np.bincount(problem.resource[problem.holds], minlength=len(RESOURCES))
    return [int(c) if c == 1 else int(min(c, max(2, h))) for c, h in zip(problem.capacity.tolist(), holders.tolist())]


def problem_key(problem: LayerProblem, mip_gap: float, mode_search: bool = False) -> str:
    """The cache key; a schedule found with the mode search is keyed apart (the keys without it are unchanged)."""
    return _key(problem, {"v": CACHE_VERSION, "n": problem.n, "cores": effective_cores(problem), "gap": float(mip_gap),
                          **({"modes": True} if mode_search else {})})


def list_key(problem: LayerProblem) -> str:
    """The key of the problem's list schedule, apart from its solved schedules: the list scheduler reads the exact core
    counts, not only as far as they matter to an optimum."""
    return _key(problem, {"v": CACHE_VERSION, "n": problem.n, "list": [problem.n_tc, problem.n_vc]})


def bound_key(problem: LayerProblem, kind: str, **settings) -> str:
    """The key of a lower bound on the problem's makespan of one `kind` (split, modes) computed with these `settings`,
    apart from its schedules; the exact core counts are in it, as its list schedules read them."""
    return _key(problem, {"v": CACHE_VERSION, "n": problem.n, "bound": kind, "cores": [problem.n_tc, problem.n_vc], **settings})


def _key(problem: LayerProblem, head: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(head).encode())
    h.update(",".join(problem.unit.tolist()).encode())
    for arr in (problem.src, problem.dst, problem.single_s, problem.parallel_s):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


ENTRY_FIELDS = ("makespan_s", "start_s", "parallel", "backend", "status", "mip_gap", "solve_s", "bound_s", "fallback",
                "time_limit_s")
"""The fields every entry of this CACHE_VERSION holds (`work_limit` is optional: entries from before it had none)."""

BOUND_FIELDS = ("bound_s",)
"""The field of a lower bound's entry (ScheduleCache.load_bound)."""

SCHEDULES_KEPT = 4096
"""Entries of one cache directory kept in this process (the least recently used dropped): a search asks again for the
same few layers (HBM siblings, twins), while a long one writes thousands of list schedules and their files stay."""


class ScheduleCache:
    """load/save LayerSchedules by problem key, and lower bounds on their makespans by bound key, under one directory."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._memory = Kept(SCHEDULES_KEPT)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def load(self, key: str, problem: LayerProblem, time_limit_s: float, work_limit: float | None = None) -> LayerSchedule | None:
        """The cached schedule of `problem`, unless it stopped on a shorter time or work limit than the ones asked for
        now, or its entry is damaged (then None, and the caller's save replaces it)."""
        entry = self._entry(key, ENTRY_FIELDS)
        if entry is None:
            return None
        try:
            if entry["status"] == "time_limit" and (float(entry["time_limit_s"]) < time_limit_s
                                                    or _unlimited(entry.get("work_limit")) < _unlimited(work_limit)):
                return None
            schedule = LayerSchedule(
                makespan_s=float(entry["makespan_s"]), start_s=np.array(entry["start_s"], dtype=np.float64),
                parallel=np.array(entry["parallel"], dtype=bool), backend=entry["backend"], status=entry["status"],
                mip_gap=entry["mip_gap"], solve_s=entry["solve_s"], from_cache=True, bound_s=entry["bound_s"],
                fallback=entry["fallback"],
            )
            check_times(problem, schedule.start_s, schedule.parallel, schedule.makespan_s)
        except (TypeError, ValueError) as err:  # ScheduleError is a ValueError: the entry does not fit its problem
            self._memory.drop(key)
            return self._damaged(key, err)
        return schedule

    def load_bound(self, key: str, lowest_s: float, highest_s: float) -> float | None:
        """A cached lower bound (s) under `key` (bound_key), when it lies in [lowest_s, highest_s], the range such a bound
        can take (else its entry is damaged: None, and the caller's save_bound replaces it)."""
        entry = self._entry(key, BOUND_FIELDS)
        if entry is None:
            return None
        bound = entry["bound_s"]
        if isinstance(bound, (int, float)) and not isinstance(bound, bool) and lowest_s <= bound <= highest_s:
            return float(bound)
        self._memory.drop(key)
        return self._damaged(key, f"bound {bound!r} s outside [{lowest_s!r}, {highest_s!r}] s")

    def save_bound(self, key: str, bound_s: float) -> None:
        entry = {"bound_s": float(bound_s)}
        self._memory.put(key, entry)
        write_atomic(self._path(key), json.dumps(entry).encode())

    def _entry(self, key: str, required: tuple[str, ...]) -> dict | None:
        """The entry under `key`, from this process's copy or else from disk (then kept): None when there is none or
        it is damaged."""
        entry = self._memory.find(key)
        if entry is None:
            entry = self._read(key, required)
            if entry is not None:
                self._memory.put(key, entry)
        return entry

    def _read(self, key: str, required: tuple[str, ...]) -> dict | None:
        """The entry on disk: None when there is none or it is damaged (not whole JSON, or without this version's
        `required` fields)."""
        path = self._path(key)
        try:
            entry = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:  # a truncated or garbled file (JSONDecodeError, UnicodeDecodeError)
            return self._damaged(key, err)
        missing = [name for name in required if not isinstance(entry, dict) or name not in entry]
        return self._damaged(key, f"no field {missing[0]!r}") if missing else entry

    def _damaged(self, key: str, why: object) -> None:
        """Report a damaged entry; None, as for a miss."""
        log.warning("schedule cache entry %s is damaged (%s): computing it again", self._path(key), why)
        return None

    def save(self, key: str, schedule: LayerSchedule, time_limit_s: float, work_limit: float | None = None) -> None:
        entry = {
            "makespan_s": float(schedule.makespan_s), "start_s": schedule.start_s.tolist(),
            "parallel": schedule.parallel.tolist(), "backend": schedule.backend, "status": schedule.status,
            "mip_gap": float(schedule.mip_gap), "solve_s": float(schedule.solve_s), "bound_s": float(schedule.bound_s),
            "fallback": schedule.fallback, "time_limit_s": float(time_limit_s), "work_limit": work_limit,
        }
        self._memory.put(key, entry)
        write_atomic(self._path(key), json.dumps(entry).encode())


def stored_bound(store: ScheduleCache | None, key: str, lowest_s: float, highest_s: float, compute=None) -> float | None:
    """The lower bound under `key` read back from `store` (ScheduleCache.load_bound), else compute() written there;
    None where neither is there (no compute given)."""
    hit = store.load_bound(key, lowest_s, highest_s) if store is not None else None
    if hit is not None or compute is None:
        return hit
    bound = compute()
    if store is not None:
        store.save_bound(key, bound)
    return bound


def _unlimited(work_limit: float | None) -> float:
    return float("inf") if work_limit is None else float(work_limit)


_stores: dict[str, ScheduleCache] = {}


def cache_for(directory: str | Path) -> ScheduleCache:
    """One ScheduleCache per directory per process."""
    key = str(Path(directory).resolve())
    if key not in _stores:
        _stores[key] = ScheduleCache(key)
    return _stores[key]


def store_for(cfg) -> ScheduleCache | None:
    """The schedule cache a ScheduleCfg names (one per directory per process), None when it turns caching off."""
    return cache_for(cfg.cache_dir) if cfg is not None and cfg.cache else None
