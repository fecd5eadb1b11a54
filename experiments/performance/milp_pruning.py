"""Why the headline run still solves layer MILPs: for each point pruned in its evaluation, what a bound must prove.

    python -m experiments.performance.milp_pruning                 # model=llama2 hw=phaze_grid (train=phaze), --work 100

Runs the branch-and-bound study from empty caches in a temporary directory, then, for every trial pruned during its
evaluation (`ilp_bound`: by the mode search's bound or by a layer MILP), takes the pending layer its placement needs
first and reports, relative to that layer's list schedule: the closed-form lower bound, the mode search's bound (phaze.schedule.mode_bound_s), the makespan above
which the point cannot beat the study's best (the other layers held at their bounds; bisection on the placement DP),
and the MILP's makespan and bound at schedule.work_limit and at --work units. Where the MILP at --work finds a
schedule below the threshold, no valid bound can prune the point: only the work-limited MILP's schedule, which is what
the point's value is made of, settles it. Writes experiments/results/milp_pruning.{md,json}.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import pandas as pd

from experiments.harness import fresh_config, write_result
from phaze.pipeline import layer_latencies
from phaze.schedule import mode_bound_s
from phaze.schedule.bounds import problem_lower_bound_s
from phaze.schedule.heuristic import best_list_schedule
from phaze.schedule.instance import LayerProblem
from phaze.schedule.layer import solve_problem
from phaze.search.evaluator import throughput_of
from phaze.search.study import MILPS_ATTR, POINT_PARAM, run_study, trials_frame
from phaze.config import model_job, study_spec

BISECTIONS = 40
"""Halvings of the threshold's interval (lower bound to list schedule): far below the MILP's 1e-4 tolerances."""


def threshold_s(layers, place, key: tuple, best: float, lower_s: float, listed_s: float) -> float:
    """The least makespan of the `key` layer at which the point's placement cannot beat `best` (listed_s if none)."""
    vi, ti, part, direction = key
    values = layers.values[part][f"{direction}_s"]
    kept = values[vi, ti]

    def beats(makespan_s: float) -> bool:
        values[vi, ti] = makespan_s
        try:
            return throughput_of(place(layers.values)) > best
        finally:
            values[vi, ti] = kept

    lo, hi = lower_s, listed_s
    if beats(hi):
        return hi
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if beats(mid) else (lo, mid)
    return hi


def point_rows(cfg, evaluator, index: int, best: float, work: float) -> dict:
    model = evaluator.models[0]
    point = evaluator.point(index)
    place = model.placer(point, False)
    layers = layer_latencies(model.job, point, model.workloads, model.network, model.lower_bounds.at(index))  # not the study's
    layers.listed_bound(place)
    key = max(layers.pending, key=layers._pending_gap)
    args = layers.pending[key]
    problem = LayerProblem.build(*args, *layers.cores)
    listed_s = best_list_schedule(problem).makespan_s
    lower_s = problem_lower_bound_s(problem)
    row = {"point": index, "layer": f"{key[2]} {key[3]} (tp index {key[1]})", "lower": lower_s / listed_s,
           "mode bound": mode_bound_s(problem, lower_s, listed_s) / listed_s,
           "threshold": threshold_s(layers, place, key, best, layers.values[key[2]][f"{key[3]}_s"][key[0], key[1]], listed_s) / listed_s}
    settings = replace(model_job(cfg).execution.schedule, cache=False)
    for units in (settings.work_limit, work):
        found = solve_problem(problem, replace(settings, work_limit=units, time_limit_s=max(settings.time_limit_s, 20 * units)))
        row[f"MILP {units:g} makespan"] = found.makespan_s / listed_s
        row[f"MILP {units:g} bound"] = found.bound_s / listed_s
    row["verdict"] = verdict(row, work)
    return row


def verdict(row: dict, work: float) -> str:
    """What settles the point: the mode bound (no MILP ran), or which side of the threshold the layer's optimum lies
    on as far as the longer MILP shows (a schedule below it: no valid bound can prune the point)."""
    if row["mode bound"] >= row["threshold"]:
        return "mode bound prunes it"
    if row[f"MILP {work:g} makespan"] < row["threshold"]:
        return "no bound can: a schedule below the threshold"
    if row[f"MILP {work:g} bound"] >= row["threshold"]:
        return "a bound can: the longer MILP's proves it"
    return "open: the optimum lies on either side"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=["model=llama2", "hw=phaze_grid"])
    parser.add_argument("--work", type=float, default=100.0, help="Gurobi work units of the longer MILP")
    args = parser.parse_args()
    with fresh_config(*args.overrides) as cfg:
        outcome = run_study(study_spec(cfg), progress=False)
        best = outcome.best.throughput_seq_s
        trials = trials_frame(outcome)
        pruned = trials[trials.pruned_by == "ilp_bound"].point.astype(int).tolist()
        milps = {t.params[POINT_PARAM]: len(t.user_attrs.get(MILPS_ATTR) or ()) for t in outcome.study.get_trials(deepcopy=False)}
        rows = [{**point_rows(cfg, outcome.evaluator, i, best, args.work), "study MILPs": milps[i]} for i in pruned]
    table = pd.DataFrame(rows)
    counts = table.verdict.value_counts()
    write_result("milp_pruning",
        "# What a bound would have to prove to spare the headline run's MILPs\n\n"
        f"Generated by `python -m experiments.performance.milp_pruning --work {args.work:g}` ({' '.join(args.overrides)}): the {len(pruned)} "
        f"points pruned during their evaluation (`ilp_bound`: by the mode bound or by a layer MILP) in the branch-and-bound study "
        f"(best {best:.6f} seq/s). Per point, the pending layer its "
        "placement needs first; every number relative to that layer's list schedule. threshold: the makespan from which the "
        "point cannot beat the best (other layers at their bounds). A point with a schedule below its threshold (the longer MILP "
        "finds one) cannot be pruned by any valid bound; only the MILP at "
        "schedule.work_limit, whose schedule the point's value is made of, settles it. study MILPs: the layer MILPs the point's "
        "trial solved (none where the mode bound pruned it).\n\n"
        + table.to_markdown(index=False, floatfmt=".4f") + "\n\n"
        + "".join(f"- {name}: {n}\n" for name, n in counts.items()),
        overrides=args.overrides, work=args.work, best_seq_s=best, verdicts=counts, points=table)


if __name__ == "__main__":
    main()
