"""The search: an Optuna study over an accelerator space with exact bound-based pruning."""

from phaze.search.evaluator import Evaluation, SpaceEvaluator
from phaze.search.samplers import SAMPLERS, ClaimedOrderSampler, make_sampler
from phaze.search.study import OBJECTIVES, StudyOutcome, run_study, study_name, trials_frame

__all__ = [
    "OBJECTIVES", "SAMPLERS", "ClaimedOrderSampler", "Evaluation", "SpaceEvaluator", "StudyOutcome",
    "make_sampler", "run_study", "study_name", "trials_frame",
]
