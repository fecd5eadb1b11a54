"""Shared fixtures: configs composed by Hydra exactly as the entry points compose them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from phaze import schema  # noqa: F401  (registers the structured configs)

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture(scope="session")
def workload_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("workload-cache")
