"""A small thread-safe LRU cache: the api-server answers requests from several threads at once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``size`` values; the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            if key not in self._values:
                return None
            self._values.move_to_end(key)
            return self._values[key]

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

    def discard(self, key: K) -> None:
        with self._lock:
            self._values.pop(key, None)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value, or ``compute()`` cached (two threads may both compute it once)."""
        found = self.get(key)
        return found if found is not None else self.put(key, compute())
