"""Compose the Hydra config outside an entry point (tests, benchmarks, notebooks), as `phaze.run` would."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from phaze import schema  # noqa: F401  (registers the structured configs)

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose_config(*overrides: str):
    """The job config for these command-line style overrides, e.g. compose_config("model=gpt2", "hw=tpuv4")."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
