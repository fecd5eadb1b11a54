"""A bounded map of recent results, the least recently used dropped: for values that every placement DP of a search
asks for again (they depend on a few inputs, not on the layer latencies)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")


class Kept:
    """At most `size` values by key; `get` makes a missing one and marks the one it returns as the most recent."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The value kept under `key`, else make() kept under it (dropping the least recently used beyond `size`)."""
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key]
        value = self._values[key] = make()
        if len(self._values) > self.size:
            self._values.popitem(last=False)
        return value

    def values(self) -> list:
        """The values kept, the least recently used first."""
        return list(self._values.values())
