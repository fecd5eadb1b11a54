"""`python -m phaze.run`: compose the config, extract (or load) the workload, summarise and log it.

Later stages (hardware space, schedule, placement, search) extend this same entry point.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import OmegaConf

from phaze import schema  # noqa: F401  (registers the structured configs)
from phaze.summary import workload_summary
from phaze.tracking import log_summary_run, resolve_tracking_uri
from phaze.workload.extract import extract_workload

log = logging.getLogger("phaze")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg) -> None:
    workload = extract_workload(
        cfg.model, mbs=cfg.train.mbs[0], bytes_per_elem=cfg.train.bytes_per_elem,
        tp_widths=cfg.train.tp_widths, cache_dir=cfg.cache_dir,
    )
    summary = workload_summary(workload)
    print(summary.to_string())
    if cfg.tracking.enabled:
        uri = resolve_tracking_uri(cfg.tracking.uri)
        run_id = log_summary_run(
            uri, cfg.tracking.experiment, run_name=f"workload-{cfg.model.name}",
            params={"model": cfg.model.name, "hw": cfg.hw.name, "cluster": cfg.cluster.name, "train.mbs": workload.mbs},
            metrics={"model.params": float(workload.params), "model.train_flops_per_seq": summary.train_flops_per_seq},
            config_yaml=OmegaConf.to_yaml(cfg, resolve=True), tags={"stage": "workload"},
        )
        print(f"logged MLflow run {run_id} to {uri}")


if __name__ == "__main__":
    main()
