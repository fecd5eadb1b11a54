"""Database URLs (search.storage, a database tracking.uri): a dialect and driver that are installed."""

from __future__ import annotations

from phaze.config_values import ConfigError


def check_storage(url: str | None) -> None:
    """An Optuna storage URL: any SQLAlchemy database URL whose dialect and driver are installed."""
    if url is not None:
        check_database_url(url, "search.storage", "memory, sqlite:///path.db, postgresql://user:password@host:port/db, mysql+pymysql://...")


def check_database_url(url: str, field: str, allowed: str) -> None:
    """A SQLAlchemy database URL whose dialect and driver (DBAPI module) are installed; nothing is connected to."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect().import_dbapi()
    except ImportError as e:
        raise ConfigError(f"{field}={url!r}: its database driver is not installed ({e}; `pip install -e '.[cluster]'` installs "
                          f"PostgreSQL's); allowed: {allowed}") from None
    except (ArgumentError, NoSuchModuleError, ValueError) as e:
        raise ConfigError(f"{field}={url!r}: not a usable database URL ({e}); allowed: {allowed}") from None
