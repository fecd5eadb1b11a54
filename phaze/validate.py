"""Checks of config values that the structured-config types cannot express; each error names its field."""

from __future__ import annotations

from omegaconf import ListConfig


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and the allowed values."""


def as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple, ListConfig)) else [value]


def positive_ints(value, field: str, powers_of_two: bool = False) -> list[int]:
    """A scalar or list of positive integers (optionally powers of two), as a sorted list."""
    out = []
    for v in as_list(value):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or (powers_of_two and v & (v - 1)):
            kind = "positive powers of two" if powers_of_two else "positive integers"
            raise ConfigError(f"{field}={value!r}: allowed values are {kind}, one or a list")
        out.append(v)
    if not out:
        raise ConfigError(f"{field} is empty: give at least one value")
    return sorted(set(out))


def bools(value, field: str) -> list[bool]:
    """A scalar or list of booleans, as a list without repeats (False first)."""
    out = as_list(value)
    if not out or any(not isinstance(v, bool) for v in out):
        raise ConfigError(f"{field}={value!r}: allowed values are true, false, or a list of them")
    return sorted(set(out))
