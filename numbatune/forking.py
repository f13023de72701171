"""What a forked child starts afresh: the package's one fork hook.

A child forked while other threads of its parent held a lock finds it held forever, and what
those threads were changing (keys being tuned, worker processes, streams) is not the child's.
An object that must be renewed in a child registers itself here, weakly (:func:`renew_in_child`);
the one ``os.register_at_fork`` hook calls each live one's ``after_fork_in_child``. Most modules
need only :class:`ForkSafeLock` and :class:`PerProcess`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class Renewable(Protocol):
    """An object a forked child renews."""

    def after_fork_in_child(self) -> None:
        """Start afresh in a forked child."""


_renewed: weakref.WeakSet[Any] = weakref.WeakSet()


def renew_in_child(renewable: Renewable) -> None:
    """Call ``renewable.after_fork_in_child()`` in every forked child, for as long as it lives
    (it is referenced weakly)."""
    _renewed.add(renewable)


def _after_fork_in_child() -> None:
    for renewable in list(_renewed):
        renewable.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ForkSafeLock:
    """A lock (a ``threading.RLock`` where ``reentrant``, else a ``threading.Lock``) that a
    forked child gets anew, free."""

    def __init__(self, reentrant: bool = False) -> None:
        self._make = threading.RLock if reentrant else threading.Lock
        self._lock = self._make()
        renew_in_child(self)

    def after_fork_in_child(self) -> None:
        """A new lock: a thread of the parent may have held the old one."""
        self._lock = self._make()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As ``threading.Lock.acquire``."""
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """As ``threading.Lock.release``."""
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class PerProcess(Generic[T]):
    """Values made on first use (one per key), under a lock, and forgotten in a forked child:
    a child makes its own (worker processes, the ranks of a job are not the child's)."""

    def __init__(self) -> None:
        self._values: dict[Hashable, T] = {}
        self._lock = threading.Lock()
        renew_in_child(self)

    def after_fork_in_child(self) -> None:
        """Forget the parent's values (and its lock)."""
        self._values, self._lock = {}, threading.Lock()

    def get(self, make: Callable[[], T], key: Hashable = None) -> T:
        """The value for ``key`` (one pool per size, say), made by ``make()`` if this process
        has none yet."""
        with self._lock:
            value = self._values.get(key)
            if value is None:
                value = self._values[key] = make()
            return value
