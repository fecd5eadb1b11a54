"""The search against the exhaustive grid: same optimum, how many points each fully evaluates, how long.

    python -m experiments.validation.search_vs_grid                                 # model=llama2 hw=phaze_grid
    python -m experiments.validation.search_vs_grid --overrides hw.n_tc=[4,8,16] hw.n_vc=[1,2,4]
    python -m experiments.validation.search_vs_grid --storages sqlite:///studies.db sqlite:///grid.db   # studies run by phaze.run

Runs `python -m phaze.run`'s study twice on the same space, as separate studies: the default
(`search=bound`, branch and bound in decreasing work bound with exact pruning) and `search=grid`
(every point proposed, pruned only by the same true bounds). The grid study uses in-memory
storage and no MLflow logging, so its time is the search's own. With --storages it reads the two
studies that `python -m phaze.run` left (the full space takes the grid about an hour: run it in its
own process). Appends one section per run to experiments/results/search_vs_grid.{md,json}.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone

import optuna
import pandas as pd

from experiments.harness import append_result, command_line
from phaze.config import compose_config, study_spec
from phaze.search.evaluator import point_table
from phaze.search.study import FULL_EVAL_ATTR, POINT_PARAM, run_study

MAX_FULL_EVAL_FRACTION = 0.05
"""Issue 6: the search fully evaluates (ILP + DP) at most 5% of the grid's points."""


def arch(row) -> str:
    return f"{int(row.n_tc)}x{int(row.tc_rows)}x{int(row.tc_cols)} TC, {int(row.n_vc)} VC, {int(row.glb_mib)} MiB, {int(row.hbm_gib)} GiB"


def one(label: str, overrides: list[str]) -> dict:
    cfg = compose_config(*overrides)
    start = time.perf_counter()
    out = run_study(study_spec(cfg), progress=False)
    wall_s = time.perf_counter() - start
    return {
        "study": label, "best_seq_s": out.best.throughput_seq_s, "best_point": int(out.best_index),
        "best_arch": arch(out.evaluator.points.iloc[out.best_index]),
        "grid_size": len(out.evaluator), "trials": out.n_trials, "pruned": out.n_pruned, "full_evals": out.n_full_evals,
        "full_eval_fraction": out.n_full_evals / len(out.evaluator), "wall_s": wall_s,
    }


def stored(label: str, overrides: list[str], url: str) -> dict:
    """The same numbers for a study that `python -m phaze.run` ran into `url` (wall: first trial start to last trial end)."""
    cfg = compose_config(*overrides)
    study = optuna.load_study(study_name=study_spec(cfg).name, storage=url)
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = max(done, key=lambda t: t.value)
    points = point_table(cfg.hw)
    row = points.iloc[best.params[POINT_PARAM]]
    full = sum(bool(t.user_attrs.get(FULL_EVAL_ATTR)) for t in trials)
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    return {
        "study": label, "best_seq_s": best.value, "best_point": int(best.params[POINT_PARAM]), "best_arch": arch(row),
        "grid_size": len(points), "trials": len(trials), "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in trials),
        "full_evals": full, "full_eval_fraction": full / len(points), "wall_s": (max(ends) - min(t.datetime_start for t in trials)).total_seconds(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=["model=llama2", "hw=phaze_grid"])
    parser.add_argument("--storages", nargs=2, metavar=("BOUND_URL", "GRID_URL"),
                        help="read the two finished studies (run with `python -m phaze.run ... search=bound|grid`) instead of running them")
    args = parser.parse_args()
    labels = ("search=bound (default)", "search=grid (exhaustive)")
    if args.storages:
        rows = [stored(label, [*args.overrides, f"search={name}"], url) for label, name, url in zip(labels, ("bound", "grid"), args.storages)]
    else:
        common = [*args.overrides, "search.storage=memory", "tracking.enabled=false"]
        rows = [one(labels[0], [*common, "search=bound"]), one(labels[1], [*common, "search=grid"])]
    df = pd.DataFrame(rows)
    same = abs(rows[0]["best_seq_s"] - rows[1]["best_seq_s"]) <= 1e-9 * rows[1]["best_seq_s"]
    text = "\n".join([
        f"## {' '.join(args.overrides)} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"`{command_line()}`",
        "",
        df.to_markdown(index=False, floatfmt=".4g"),
        "",
        f"Same optimum: **{'yes' if same else 'NO'}**; the default search fully evaluated "
        f"{rows[0]['full_eval_fraction']:.2%} of the grid (target at most {MAX_FULL_EVAL_FRACTION:.0%}).",
        "",
    ])
    append_result("search_vs_grid", "The search against the exhaustive grid", text, overrides=args.overrides, same_optimum=same, table=df)


if __name__ == "__main__":
    main()
