"""What identifies a study: its name (with a hash of all that changes its answer), its storage, its MLflow tracker."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import optuna

from phaze.compat import switches_on
from phaze.search.ranking import top_n_of
from phaze.search.strategies import strategy_of
from phaze.tracking import StudyTracker, parent_run_name, resolve_tracking_uri, study_params

STORAGE_FILE = "studies.db"
"""Default Optuna storage: an SQLite file next to mlruns/, so a killed study resumes."""


def study_name(cfg) -> str:
    """Model, space, cluster, sampler and objective, plus a hash of everything that changes the answer (`cfg`: the typed
    config, phaze.schema.Config)."""
    if cfg.search.study_name:
        return cfg.search.study_name
    keyed = {k: _plain(getattr(cfg, k)) for k in ("model", "models", "hw", "cluster", "train", "schedule")}
    keyed["objective"] = cfg.search.objective
    keyed["placement"] = cfg.search.placement
    if cfg.search.rel_gap:
        keyed["rel_gap"] = float(cfg.search.rel_gap)
    if top_n_of(cfg.search) != 1:  # a study pruned against its best is not a top-N study: they must not share a storage
        keyed["top_n"] = top_n_of(cfg.search)
    if switches_on(cfg.compat):
        keyed["compat"] = asdict(cfg.compat)
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:8]
    models = "+".join(m.name for m in cfg.models) if cfg.models else cfg.model.name
    placement = "" if cfg.search.placement == "searched" else f"-{cfg.search.placement}"
    return f"{models}-{cfg.hw.name}-{cfg.cluster.name}-{cfg.search.sampler}-{cfg.search.objective}{placement}-{digest}"


def _plain(value):
    """A config group as plain data (the dataclasses as dicts, a list of them as a list)."""
    return [asdict(v) for v in value] if isinstance(value, list) else asdict(value)


def storage_url(search) -> str | None:
    """search.storage, 'memory' for none, or by default the SQLite file next to mlruns/ (`search`: SearchCfg)."""
    if search.storage == "memory":
        return None
    if search.storage:
        return search.storage
    return f"sqlite:///{(Path.cwd() / STORAGE_FILE).resolve()}"


def open_study(spec, storage, sampler=None) -> optuna.Study:
    """Create the study of `spec` (a StudySpec), or load it when it exists (a resumed or shared study)."""
    return optuna.create_study(study_name=spec.name, storage=storage, sampler=sampler, load_if_exists=True,
                               directions=strategy_of(spec.config.search.sampler).directions)


def tracker_for(spec) -> StudyTracker | None:
    """The study's MLflow tracker (None with tracking.enabled=false): its parent run named after the model, space, cluster
    and train preset, with the study's params and the resolved config (config.yaml). `spec`: a StudySpec."""
    if not spec.config.tracking.enabled:
        return None
    return StudyTracker(resolve_tracking_uri(spec.config.tracking.uri), spec.config.tracking.experiment, spec.name, flush_every=1,
                        run_name=parent_run_name(spec.config, spec.train_preset), params=study_params(spec.config, spec.train_preset),
                        config_yaml=spec.config_yaml)
