"""What the C callbacks of Python backends and devices share: the registry
that maps the integer kvready hands back (``user``) to the live Python
object — never a pointer across the ABI — and writing a message into a
caller's error buffer."""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Live objects by user id. Callbacks run on kvready's threads, so every
    change holds the lock; a lookup of a plain dict needs none."""

    def __init__(self) -> None:
        self._live: dict[int, T] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def register(self, obj: T) -> int:
        with self._lock:
            uid = next(self._ids)
            self._live[uid] = obj
        return uid

    def get(self, uid: int) -> T | None:
        return self._live.get(uid)

    def pop(self, uid: int) -> T | None:
        with self._lock:
            return self._live.pop(uid, None)


def write_error(buf: int | None, cap: int, msg: str) -> None:
    """Write msg, NUL-terminated and cut to cap bytes, into buf (if any)."""
    if buf and cap > 0:
        b = str(msg).encode("utf-8", "replace")[:cap - 1]
        ctypes.memmove(buf, b + b"\0", len(b) + 1)
