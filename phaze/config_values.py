"""The rules of config values that the structured-config types cannot express (each error names its field), shared by
the schema's own checks (phaze/schema/) and the cross-group checks (phaze/checks/)."""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and the allowed values."""


def as_list(value) -> list:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]


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


def recompute_mode(value, field: str = "train.recompute", given=None) -> str:
    """One recompute setting as one of RECOMPUTE_VALUES; booleans keep PHAZE's meaning (false = none, true = full).
    `given`: the whole value the setting came from, for the message (default: the setting)."""
    if isinstance(value, bool):
        return "full" if value else "none"
    if value in RECOMPUTE_VALUES:
        return str(value)
    raise ConfigError(f"{field}={value if given is None else given!r}: allowed values are {', '.join(RECOMPUTE_VALUES)}, "
                      "true (= full), false (= none), or a list of them")


def recompute_options(value, field: str = "train.recompute") -> list[str]:
    """A recompute setting or list of them as modes, without repeats, in RECOMPUTE_VALUES order."""
    out = {recompute_mode(v, field, value) for v in as_list(value)}
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
