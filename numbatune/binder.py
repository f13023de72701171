"""A tuned kernel's entry: the first thing a call runs.

A tuned kernel is a :data:`Called`: calling it, ``kernel(*args, stream=None)``, calls its
binder's ``entry(args, stream)``. While one set of argument classes has a fast path, the entry
is that fast path itself (its generated code checks the classes); once several have one, it is
a function generated for the kernel's arity that looks the fast path up by the classes of the
arguments (one dictionary lookup), and hands the call to the general path where there is none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numbatune import _native
from numbatune.eager import run_as_written

#: A fast path's entry, or the general path: ``call(args, stream)``.
Call = Callable[[tuple[Any, ...], Any], None]


#: The base class of a tuned kernel (the C extension's): calling one, ``kernel(*args,
#: stream=None)``, calls ``kernel._binder.entry(args, stream)``, with no Python frame between.
Called: type = _native.Called


class Binder:
    """A tuned kernel's entry, ``entry(args, stream)`` (the module says which it is)."""

    def __init__(self, arity: int, general: Call) -> None:
        self.paths: dict[tuple[type, ...], Call] = {}
        names = "".join(f"a{i}, " for i in range(arity))
        classes = "".join(f"type(a{i}), " for i in range(arity))
        code = "\n".join(
            [
                "def by_classes(args, stream):",
                f"    if len(args) != {arity}:",
                "        return _general(args, stream)",
                *([f"    {names}= args"] if arity else []),
                f"    path = _binder.paths.get(({classes}))",
                "    if path is None:",
                "        return _general(args, stream)",
                "    return path(args, stream)",
            ]
        )
        namespace = {"_binder": self, "_general": general}
        exec(compile(code, "<numbatune binder>", "exec"), namespace)
        self.by_classes: Call = namespace["by_classes"]
        self.entry = self.by_classes
        run_as_written(self.by_classes)  # (general: the tuned kernel's, which it marks)

    def point(self, paths: dict[tuple[type, ...], Call]) -> None:
        """Take the fast paths of a device (after one was added, or on another device)."""
        self.paths = paths
        only = list(paths.values())  # one read, while another thread may add a path
        self.entry = only[0] if len(only) == 1 else self.by_classes
