"""Opaque handles for ONNXIFI objects.

A handle is an int that is never dereferenced and never reused, so a NULL, foreign,
stale (released) or wrong-kind handle is simply absent from the table of its kind and
the caller gets the matching INVALID_* status instead of a crash.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Optional

KIND_BACKEND_ID = 1
KIND_BACKEND = 2
KIND_GRAPH = 3
KIND_EVENT = 4

# High bits make handles look like nothing a C host would allocate; the low nibble is the kind.
_BASE = 0x0C16_0000_0000


def as_int(handle: Any) -> Optional[int]:
    """The integer value of a handle given as int, None or a cffi/ctypes pointer; None if NULL/odd."""
    if handle is None:
        return None
    if isinstance(handle, bool):
        return None
    if isinstance(handle, int):
        return handle or None
    value = getattr(handle, "value", None)  # ctypes.c_void_p
    if isinstance(value, int):
        return value or None
    return None


class HandleRegistry:
    """Thread-safe tables kind -> {handle: object}."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tables: dict[int, dict[int, Any]] = {}
        self._counter = itertools.count(1)

    def new_handle(self, kind: int) -> int:
        """A fresh handle value of `kind` (not yet registered)."""
        return _BASE | (next(self._counter) << 4) | kind

    def add(self, kind: int, obj: Any, handle: Optional[int] = None) -> int:
        """Register `obj` and return its handle (a fresh one unless `handle` is given)."""
        with self._lock:
            h = self.new_handle(kind) if handle is None else handle
            self._tables.setdefault(kind, {})[h] = obj
            return h

    def get(self, kind: int, handle: Any) -> Any:
        """The object for `handle`, or None when it is not a live handle of `kind`."""
        h = as_int(handle)
        if h is None:
            return None
        with self._lock:
            return self._tables.get(kind, {}).get(h)

    def remove(self, kind: int, handle: Any) -> Any:
        """Unregister and return the object, or None when it was not live."""
        h = as_int(handle)
        if h is None:
            return None
        with self._lock:
            return self._tables.get(kind, {}).pop(h, None)

    def live(self, kind: int) -> dict[int, Any]:
        """A snapshot of the live handles of `kind`."""
        with self._lock:
            return dict(self._tables.get(kind, {}))


REGISTRY = HandleRegistry()
