"""Per-layer operator scheduling: start times and single-core / all-core modes minimising the makespan.

The exact MILP (ilp.py) is solved by Gurobi or HiGHS (backends/); a list schedule (heuristic.py)
gives its upper bound and warm start, bounds.py the lower bound the search prunes with, split.py a
stronger one from smaller problems, and checker.py replays any schedule and fails on a violation.
"""

from phaze.schedule.bounds import lower_bound_batch_s, lower_bound_s
from phaze.schedule.cache import store_for
from phaze.schedule.checker import ScheduleError, check_schedule
from phaze.schedule.instance import InfeasibleLayerError, LayerProblem
from phaze.schedule.layer import Prepared, listed_for, mode_bound_s, prepare_layer, schedule_layer, split_bound_s, split_ceiling_s
from phaze.schedule.result import LayerSchedule
from phaze.schema import ScheduleCfg


def heuristic_schedule(graph, unit, single_s, parallel_s, n_tc: int, n_vc: int, cfg: ScheduleCfg | None = None) -> LayerSchedule:
    """The best list schedule (feasible; status "optimal" only when it meets the lower bound), kept by content (on disk
    too, in cfg's schedule cache when it has one)."""
    return listed_for(LayerProblem.build(graph, unit, single_s, parallel_s, n_tc, n_vc), store_for(cfg))


__all__ = [
    "InfeasibleLayerError", "LayerSchedule", "Prepared", "ScheduleError", "check_schedule", "heuristic_schedule",
    "lower_bound_batch_s", "lower_bound_s", "mode_bound_s", "prepare_layer", "schedule_layer", "split_bound_s",
    "split_ceiling_s",
]
