"""Shared fixtures: configs composed by Hydra exactly as the entry points compose them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phaze.config import compose_config as compose_cfg  # noqa: F401  (re-exported for the tests)


@pytest.fixture(scope="session")
def workload_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("workload-cache")


def require_services() -> bool:
    """True where the service tests must run (CI sets PHAZE_REQUIRE_SERVICES=1 after installing them)."""
    return os.environ.get("PHAZE_REQUIRE_SERVICES") == "1"


def need_executable(path: str, package: str) -> str:
    """`path` if it exists; else skip the test, or fail it where services are required."""
    if Path(path).exists():
        return path
    message = f"{path} not found: install the Debian package {package}"
    if require_services():
        pytest.fail(message)
    pytest.skip(message)
