"""What identifies a study: its name (with a hash of all that changes its answer), its storage, its MLflow tracker."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import optuna
from omegaconf import OmegaConf

from phaze.compat import compat_of, switches_on
from phaze.search.ranking import top_n_of
from phaze.search.strategies import strategy_of
from phaze.tracking import StudyTracker, parent_run_name, resolve_tracking_uri, study_params

STORAGE_FILE = "studies.db"
"""Default Optuna storage: an SQLite file next to mlruns/, so a killed study resumes."""


def study_name(cfg) -> str:
    """Model, space, cluster, sampler and objective, plus a hash of everything that changes the answer."""
    if cfg.search.study_name:
        return cfg.search.study_name
    keyed = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "models", "hw", "cluster", "train", "schedule")}
    keyed["objective"] = cfg.search.objective
    keyed["placement"] = cfg.search.placement
    if cfg.search.rel_gap:
        keyed["rel_gap"] = float(cfg.search.rel_gap)
    if top_n_of(cfg) != 1:  # a study pruned against its best is not a top-N study: they must not share a storage
        keyed["top_n"] = top_n_of(cfg)
    if switches_on(compat_of(cfg)):
        keyed["compat"] = OmegaConf.to_container(cfg.compat, resolve=True)
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:8]
    models = "+".join(m.name for m in cfg.models) if cfg.models else cfg.model.name
    placement = "" if cfg.search.placement == "searched" else f"-{cfg.search.placement}"
    return f"{models}-{cfg.hw.name}-{cfg.cluster.name}-{cfg.search.sampler}-{cfg.search.objective}{placement}-{digest}"


def storage_url(cfg) -> str | None:
    """search.storage, 'memory' for none, or by default the SQLite file next to mlruns/."""
    if cfg.search.storage == "memory":
        return None
    if cfg.search.storage:
        return cfg.search.storage
    return f"sqlite:///{(Path.cwd() / STORAGE_FILE).resolve()}"


def open_study(cfg, storage, sampler=None) -> optuna.Study:
    """Create the study, or load it when it exists (a resumed or shared study)."""
    return optuna.create_study(study_name=study_name(cfg), storage=storage, sampler=sampler, load_if_exists=True,
                               directions=strategy_of(cfg.search.sampler).directions)


def tracker_for(cfg) -> StudyTracker | None:
    """The study's MLflow tracker (None with tracking.enabled=false): its parent run named after the model, space, cluster
    and train preset, with the study's params and the resolved config (config.yaml)."""
    if not cfg.tracking.enabled:
        return None
    return StudyTracker(resolve_tracking_uri(cfg.tracking.uri), cfg.tracking.experiment, study_name(cfg), flush_every=1,
                        run_name=parent_run_name(cfg), params=study_params(cfg), config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
