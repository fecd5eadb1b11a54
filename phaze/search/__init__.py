"""The search: an Optuna study over an accelerator space with exact bound-based pruning."""

from phaze.search.evaluator import Evaluation, SpaceEvaluator
from phaze.search.strategies import SAMPLERS, Strategy, make_sampler, strategy_of
from phaze.search.strategies.claimed_order import ClaimedOrderSampler
from phaze.search.study import OBJECTIVES, StudyOutcome, run_study, study_name, trials_frame

__all__ = [
    "OBJECTIVES", "SAMPLERS", "ClaimedOrderSampler", "Evaluation", "SpaceEvaluator", "Strategy", "StudyOutcome",
    "make_sampler", "run_study", "strategy_of", "study_name", "trials_frame",
]
