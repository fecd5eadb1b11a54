"""search.*: the study's storage, which the workers must be able to share (the study's own rules: phaze.schema.search)."""

from __future__ import annotations

from phaze.checks.storage import check_storage
from phaze.schema.search import MEMORY
from phaze.search.study import storage_url


def check_search(cfg) -> None:
    """A storage the workers can share."""
    s = cfg.search
    check_storage(storage_url(s) if s.storage != MEMORY else None)
