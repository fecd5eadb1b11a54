"""A bounded map of recent results, the least recently used dropped: for values that every placement DP of a search
asks for again (they depend on a few inputs, not on the layer latencies)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")


class Kept:
    """At most `size` values by key; `get` makes a missing one (`find` only looks, `put` stores one) and marks the one
    it returns as the most recent."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The value kept under `key`, else make() kept under it (dropping the least recently used beyond `size`)."""
        if key in self._values:
            return self.find(key)
        value = make()
        self.put(key, value)
        return value

    def find(self, key: Hashable):
        """The value kept under `key`, marked the most recent; None when there is none."""
        if key not in self._values:
            return None
        self._values.move_to_end(key)
        return self._values[key]

    def put(self, key: Hashable, value) -> None:
        """Keep `value` under `key` as the most recent, dropping the least recently used beyond `size`."""
        self._values[key] = value
        self._values.move_to_end(key)
        if len(self._values) > self.size:
            self._values.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        """Forget the value under `key`, if any."""
        self._values.pop(key, None)

    def values(self) -> list:
        """The values kept, the least recently used first."""
        return list(self._values.values())
