"""A bounded, thread-safe cache of loaded objects (models, pipelines) for servers such as the demo hub."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LoaderCache(Generic[V]):
    """Least-recently-used cache of at most ``maxsize`` loaded values.

    ``get(key, load)`` returns the cached value of ``key`` or stores and returns ``load()``.
    Concurrent requests for one key call ``load`` once (the others wait for it); different keys
    load in parallel. A ``load`` that raises caches nothing. When a new value would exceed
    ``maxsize``, the least recently used one is dropped (callers that still hold it keep it).
    """

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._loading: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    def _hit(self, key: Hashable) -> tuple[bool, V | None]:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return True, self._items[key]
            return False, None

    def get(self, key: Hashable, load: Callable[[], V]) -> V:
        found, value = self._hit(key)
        if found:
            return value
        with self._lock:
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            found, value = self._hit(key)
            if found:
                return value
            try:
                value = load()
                with self._lock:
                    self._items[key] = value
                    self._items.move_to_end(key)
                    while len(self._items) > self.maxsize:
                        self._items.popitem(last=False)
            finally:
                with self._lock:
                    if self._loading.get(key) is key_lock:
                        del self._loading[key]
            return value

    def keys(self) -> list[Hashable]:
        """Cached keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
