"""Exact Pareto fronts of throughput against a cost, chip area or TDP, by branch and bound (`search=pareto`).

Points are visited by increasing cost (equal costs by decreasing work bound). A point is on the front when no point
as cheap has at least its throughput, that is when its throughput beats M, the best throughput of every point
visited before it. So a point is fully evaluated only when its work bound, then its placement bound, beat M, and
its evaluation stops as soon as its layers show it cannot (SpaceEvaluator.evaluate's `beat`). A point is dismissed
only when a point already found, as cheap or cheaper, dominates its bound: the front is exact. Each exact
evaluation is kept as a trial of an Optuna study (point -> throughput), so an interrupted run resumes without
evaluating those points again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402
import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

from phaze.search.evaluator import SpaceEvaluator  # noqa: E402
from phaze.search.resume import make_storage  # noqa: E402
from phaze.search.identity import storage_url  # noqa: E402

COSTS = ("area_mm2", "tdp_w")
"""What a front trades throughput against: the chip's area and its TDP."""


@dataclass(frozen=True)
class Front:
    """An exact front: its points (cheapest first) and how many points each stage dismissed."""

    cost: str
    table: pd.DataFrame
    """One row per front point: point index, area_mm2, tdp_w, throughput_seq_s and the chip's axes."""
    n_evaluated: int
    """Points fully evaluated by this front (their throughput known exactly); those known before are not counted."""
    n_work: int
    n_placement: int
    n_ilp: int
    """Points dismissed by their work bound, their placement bound, and during their evaluation."""
    wall_s: float


def exact_front(ev: SpaceEvaluator, cost: str, known: dict[int, float] | None = None, record=None, progress: bool = False) -> Front:
    """The exact front of throughput against `cost` over ev's points. `known` holds throughputs already evaluated
    (a resumed run); `record(point, throughput)` is called for each new exact evaluation."""
    if cost not in COSTS:
        raise ValueError(f"cost={cost!r}; allowed: {list(COSTS)}")
    start = time.perf_counter()
    known = dict(known or {})
    costs = ev.points[cost].to_numpy(dtype=np.float64)
    order = np.lexsort((-ev.work_bound, costs))
    best, rows, counts = 0.0, [], {"work": 0, "placement": 0, "ilp": 0, "evaluated": 0}
    for index in tqdm(order.tolist(), desc=f"front vs {cost}", disable=not progress, leave=False):
        if index in known:
            value = known[index]
        elif ev.work_bound[index] <= best:
            counts["work"] += 1
            continue
        elif ev.placement_bound(index, best or None) <= best:
            counts["placement"] += 1
            continue
        else:
            evaluation = ev.evaluate(index, best or None)
            if not evaluation.exact:
                counts["ilp"] += 1
                continue
            value = evaluation.throughput_seq_s
            counts["evaluated"] += 1
            if record is not None:
                record(index, value)
        if value > best:
            if rows and costs[rows[-1]["point"]] == costs[index]:
                rows.pop()  # as cheap and faster: the earlier point of this cost is dominated
            best = value
            rows.append({"point": index, "throughput_seq_s": value})
    table = pd.DataFrame(rows, columns=["point", "throughput_seq_s"])
    points = ev.points.iloc[table.point.to_numpy()].reset_index(drop=True)
    table = pd.concat([table, points[["area_mm2", "tdp_w"]], pd.DataFrame([ev.arch_params(i) for i in table.point])], axis=1)
    return Front(cost, table, counts["evaluated"], counts["work"], counts["placement"], counts["ilp"], time.perf_counter() - start)


def known_values(study: optuna.Study) -> dict[int, float]:
    """The points a study already evaluated exactly, with their throughput."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return {int(t.params["point"]): float(t.value) for t in done}


def recorder(study: optuna.Study, n_points: int):
    """record(point, throughput) for exact_front: one finished trial per exact evaluation."""
    distribution = optuna.distributions.IntDistribution(0, n_points - 1)

    def record(index: int, value: float) -> None:
        study.add_trial(optuna.trial.create_trial(params={"point": index}, distributions={"point": distribution}, value=value))

    return record


def fronts_figure(ev: SpaceEvaluator, fronts: list[Front], title: str = ""):
    """Throughput against each front's cost: every point's work bound in grey, the front as a step line."""
    fig, axes = plt.subplots(1, len(fronts), figsize=(5.5 * len(fronts), 4), squeeze=False)
    for ax, front in zip(axes[0], fronts):
        ax.scatter(ev.points[front.cost], ev.work_bound, s=2, c="lightgray", label="work bound (every point)")
        ax.step(front.table[front.cost], front.table.throughput_seq_s, where="post", c="tab:red", label="exact front")
        ax.scatter(front.table[front.cost], front.table.throughput_seq_s, s=12, c="tab:red")
        ax.set(xlabel=front.cost.replace("_mm2", " (mm²)").replace("_w", " (W)"), ylabel="sequences/s",
               title=f"{len(front.table)} front points, {front.n_evaluated} evaluated")
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def exact_fronts(spec, progress: bool = True) -> tuple[SpaceEvaluator, list[Front]]:
    """Both exact fronts of the space of `spec` (a StudySpec; throughput against area, and against TDP), resumable from
    search.storage."""
    ev = SpaceEvaluator(spec)
    search = spec.config.search
    storage = make_storage(storage_url(search), int(search.heartbeat_interval_s), int(search.grace_period_s))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    studies = {cost: optuna.create_study(study_name=f"{spec.name}-front-{cost}", storage=storage, direction="maximize",
                                         load_if_exists=True) for cost in COSTS}
    known = {}
    for study in studies.values():
        known.update(known_values(study))

    def remembered(study: optuna.Study):
        """Record in the front's study and in `known`: a point's throughput does not depend on the cost."""
        record = recorder(study, len(ev))

        def both(index: int, value: float) -> None:
            known[index] = value
            record(index, value)

        return both

    return ev, [exact_front(ev, cost, known, remembered(studies[cost]), progress) for cost in COSTS]
