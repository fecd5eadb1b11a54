"""Optuna samplers by name (`search.sampler`): bound-ordered branch and bound, exhaustive grid, TPE, NSGA-II."""

from __future__ import annotations

import numpy as np
import optuna

SAMPLERS = ("bound", "grid", "tpe", "nsga2")


class BoundOrderedSampler(optuna.samplers.BaseSampler):
    """Proposes the points in decreasing work bound, skipping those already tried (branch and bound).

    With the study's pruning this is exact: once a point's bound cannot beat the best value, no later
    point can, and the study stops. The order is deterministic, so a resumed study continues it.
    """

    def __init__(self, order: np.ndarray, param: str = "point"):
        self.order = [int(i) for i in order]
        self.param = param

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        tried = {t.params.get(self.param) for t in study.get_trials(deepcopy=False) if t.number != trial.number}
        for index in self.order:
            if index not in tried:
                return index
        return self.order[-1]


def make_sampler(search_cfg, evaluator) -> optuna.samplers.BaseSampler:
    name = search_cfg.sampler
    seed = int(search_cfg.seed)
    if name == "bound":
        return BoundOrderedSampler(evaluator.order_by_bound())
    if name == "grid":
        return optuna.samplers.GridSampler({"point": list(range(len(evaluator)))}, seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ValueError(f"search.sampler={name!r}; allowed: {list(SAMPLERS)}")
