"""Shared fixtures: configs composed by Hydra exactly as the entry points compose them."""

from __future__ import annotations

from pathlib import Path

import pytest

from phaze.config import compose_config as compose_cfg  # noqa: F401  (re-exported for the tests)


@pytest.fixture(scope="session")
def workload_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("workload-cache")
