"""What a study's parent run says about the job: a descriptive run name and the params that tell two studies apart
(the train preset, its step model, precision and optimizer, the devices, the global batch, the budgets, the search)."""

from __future__ import annotations

def model_names(cfg) -> str:
    """The searched model, or the models of a common study joined by '+'."""
    return "+".join(m.name for m in (cfg.models or [cfg.model]))


def parent_run_name(cfg, preset: str | None) -> str:
    """Model, train preset (its step model where the preset is unknown), space and cluster as the overrides that
    choose them, e.g. `llama2 train=phaze hw=phaze_grid cluster=phaze_1024`: studies that differ in a preset differ
    in name, and the part that differs comes early (the runs table cuts long names short). `cfg`: the typed config;
    `preset`: the conf/train preset it was composed with (None where unknown: phaze.config.train_preset)."""
    train = f"train={preset}" if preset else f"train.step_model={cfg.train.step_model}"
    return f"{model_names(cfg)} {train} hw={cfg.hw.name} cluster={cfg.cluster.name}"


def study_params(cfg, preset: str | None) -> dict:
    """The parent run's params: what the study searched and under which training setup and budgets (a grid's
    area budget resolved: hw.area_budget_mm2=null means the TPUv4-like reference area; a point preset has none)."""
    from phaze.hardware import area_budget_mm2

    params = {
        "model": model_names(cfg), "hw": cfg.hw.name, "cluster": cfg.cluster.name,
        "train.step_model": cfg.train.step_model, "train.precision": cfg.train.precision,
        "train.bytes_per_elem": cfg.train.bytes_per_elem, "train.optimizer": cfg.train.optimizer,
        "train.global_batch": cfg.train.global_batch, "cluster.devices": cfg.cluster.devices,
        "hw.area_budget_mm2": area_budget_mm2(cfg.hw) if cfg.hw.kind == "grid" else None,
        "hw.power_budget_w": cfg.hw.power_budget_w,
        "search.sampler": cfg.search.sampler, "search.objective": cfg.search.objective, "search.placement": cfg.search.placement,
        "search.rel_gap": cfg.search.rel_gap, "search.top_n": cfg.search.top_n, "compat": cfg.compat.name,
    }
    if preset:
        params["train"] = preset
    return params


UI_URL = "http://127.0.0.1:5000"
"""Where `mlflow ui` serves by default (its --host and --port defaults)."""
CLASSIC_VIEW = "workflowType=machine_learning"
"""The UI's query parameter for its classic machine-learning view ("Model training"): MLflow 3.17's UI picks GenAI or
classic from its own toggle (remembered by the browser, GenAI until changed) or this parameter, not from the experiment."""


def dashboard_url(experiment_id: str, base: str = UI_URL) -> str:
    """The experiment's runs table in MLflow's classic machine-learning view."""
    return f"{base}/#/experiments/{experiment_id}/runs?{CLASSIC_VIEW}"
