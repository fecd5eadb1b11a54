"""The single-field rules every config check shares: a number above (or at) zero, a fraction, one of a list."""

from __future__ import annotations

from phaze.config_values import ConfigError


def positive(value, field: str, allow_zero: bool = False) -> None:
    """A number > 0 (or >= 0 with allow_zero); not a boolean."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{field}={value!r}: allowed values are numbers {'>= 0' if allow_zero else '> 0'}")


def fraction(value, field: str) -> None:
    """A number in (0, 1]."""
    if not 0 < value <= 1:
        raise ConfigError(f"{field}={value!r}: allowed values are in (0, 1]")


def choice(value, field: str, allowed) -> None:
    """One of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"{field}={value!r}: allowed values are {', '.join(map(str, allowed))}")
