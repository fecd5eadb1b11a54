"""Take back what Hydra wrote for a job refused on bad input, so that a refused job leaves nothing behind.

Hydra creates the job's output folder, saves the composed config in it (hydra.output_subdir) and opens the job's
log file before the entry point runs; the config check comes after. Only those files are removed (the log only
while empty, so a reused folder keeps its earlier logs), then each folder they leave empty up to the launch
directory.
"""

from __future__ import annotations

import logging
from pathlib import Path

SAVED_CONFIGS = ("config.yaml", "hydra.yaml", "overrides.yaml")
"""The files Hydra saves under hydra.output_subdir for every job (hydra/core/utils.py, run_job)."""


def discard_job_output() -> None:
    """Remove the running Hydra job's saved config and empty log, and the folders that leaves empty; no-op outside a job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    out = Path(hydra_cfg.runtime.output_dir)
    log_file = out / f"{hydra_cfg.job.name}.log"
    close_file_logs(log_file)
    if log_file.is_file() and log_file.stat().st_size == 0:
        log_file.unlink()
    folders = [out]
    if hydra_cfg.output_subdir is not None:
        saved = out / hydra_cfg.output_subdir
        for name in SAVED_CONFIGS:
            (saved / name).unlink(missing_ok=True)
        folders.insert(0, saved)
    launch_dir = Path(hydra_cfg.runtime.cwd).resolve()
    for folder in folders:
        remove_empty_up_to(folder.resolve(), launch_dir)


def close_file_logs(path: Path) -> None:
    """Close and detach the root logger's file handlers writing to path."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename) == path.resolve():
            handler.close()
            root.removeHandler(handler)


def remove_empty_up_to(folder: Path, stop: Path) -> None:
    """Remove folder and then each parent while empty, never stop itself nor anything outside it."""
    while folder != stop and folder.is_relative_to(stop) and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
