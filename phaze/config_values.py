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


RECOMPUTE_VALUES = ("none", "selective", "full")
"""train.recompute: activation recompute (booleans keep PHAZE's meaning: false = none, true = full)."""
ZERO_VALUES = (0, 1, 2, 3)
"""placement.zero / train.zero: ZeRO stages (1 = Megatron's distributed optimizer, 3 = FSDP full shard)."""


def recompute_options(value, field: str = "train.recompute") -> list[str]:
    """A recompute setting or list of them as modes, without repeats, in RECOMPUTE_VALUES order."""
    out = set()
    for v in as_list(value):
        if isinstance(v, bool):
            out.add("full" if v else "none")
        elif v in RECOMPUTE_VALUES:
            out.add(v)
        else:
            raise ConfigError(f"{field}={value!r}: allowed values are {', '.join(RECOMPUTE_VALUES)}, true (= full), false (= none), or a list of them")
    if not out:
        raise ConfigError(f"{field} is empty: give at least one of {', '.join(RECOMPUTE_VALUES)}")
    return [m for m in RECOMPUTE_VALUES if m in out]


def zero_stages(value, field: str) -> list[int]:
    """ZeRO stages (one or a list), sorted."""
    out = []
    for v in as_list(value):
        if isinstance(v, bool) or v not in ZERO_VALUES:
            raise ConfigError(f"{field}={value!r}: allowed values are {', '.join(map(str, ZERO_VALUES))}, one or a list")
        out.append(int(v))
    if not out:
        raise ConfigError(f"{field} is empty: give at least one of {', '.join(map(str, ZERO_VALUES))}")
    return sorted(set(out))
