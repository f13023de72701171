"""A call's arguments against the kernel's parameters: read once, checked, and what tuning need
not restore between runs.

The general path reads a call's arguments once (:class:`~numbatune.arrays.Arguments`, through
the array kinds) and refuses, naming the argument, what numba would fail on less clearly: the
wrong number, host arrays, arrays of a kind that refuses them (a torch tensor on the CPU), a
scalar where the kernel indexes an array, an array on another GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from numbatune import devices, references
from numbatune.arrays import Arguments


class ArgumentCheck:
    """The checks of the calls of the tuned kernel ``name`` (in messages), whose ``function``
    has the ``parameters``, in order, and whose arguments ``read_only`` are never restored."""

    def __init__(
        self,
        name: str,
        function: Callable[..., Any],
        parameters: Sequence[str],
        read_only: frozenset[str],
    ) -> None:
        self._name, self._function = name, function
        self._parameters, self._read_only = tuple(parameters), read_only
        self._array_parameters = references.array_parameters(function)
        self._defaults: tuple[Any, ...] = getattr(function, "__defaults__", None) or ()

    def completed(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with the default values of the trailing parameters a call leaves out, as
        numba takes such a call (the kernel's ``def k(out, scale=2.0)`` called ``k(out)``);
        other calls as they are."""
        missing = len(self._parameters) - len(args)
        if 0 < missing <= len(self._defaults):
            return args + self._defaults[len(self._defaults) - missing :]
        return args

    def read(self, args: tuple[Any, ...]) -> Arguments:
        """The call's arguments, read once (:class:`~numbatune.arrays.Arguments`); a
        ``TypeError`` or ``ValueError`` naming the argument for calls numba would fail on less
        clearly."""
        if len(args) != len(self._parameters):
            raise TypeError(
                f"{self._name}() takes {len(self._parameters)} arguments "
                f"({', '.join(self._parameters)}), got {len(args)}"
            )
        arguments = Arguments.read(args)
        for name, value, view in zip(self._parameters, args, arguments.views, strict=True):
            # (numba's mapped and managed arrays are NumPy arrays the device reads: a kind)
            host = view is None and isinstance(value, np.ndarray) and value.ndim > 0
            refused = "a host (NumPy) array" if host else view and view.kind.refusal(value)
            if refused:
                raise TypeError(
                    f"{self._name}: argument {name!r} is {refused}; pass a device array "
                    "(numba.cuda.to_device(x), a CuPy array or a CUDA torch tensor)"
                )
            use = self._array_parameters.get(name)
            indexed_tuple = use == "indexed" and isinstance(value, tuple)
            if use is not None and view is None and not indexed_tuple:
                expected = "a device array" + (" or a tuple" if use == "indexed" else "")
                how = "indexed" if use == "indexed" else f"read as {name}{use}"
                raise TypeError(
                    f"{self._name}: argument {name!r} is {how} in the kernel, so it must be "
                    f"{expected} (numba, CuPy or torch); got {type(value).__name__} {value!r:.60}"
                )
        if devices.several():
            self._check_devices(arguments)
        return arguments

    def _check_devices(self, arguments: Arguments) -> None:
        """Refuse arrays on another GPU than the one the kernel launches on."""
        here = devices.current_index()
        for name, value, view in zip(
            self._parameters, arguments.values, arguments.views, strict=True
        ):
            there = None if view is None else devices.array_device(value, view.kind)
            if there not in (None, here):
                raise ValueError(
                    f"{self._name}: argument {name!r} is on GPU {there}, but the kernel "
                    f"launches on GPU {here} (numba's current device); call it inside "
                    f"`with numba.cuda.gpus[{there}]:`, or move the array"
                )

    @functools.cached_property
    def _element_uses(self) -> dict[str, references.ElementUse]:
        """How the kernel's own code uses each parameter's elements (its source read once)."""
        return references.element_uses(self._function)

    def unrestored(self, arguments: Arguments) -> frozenset[str]:
        """The arguments tuning need not copy back before each run: those named ``read_only``,
        and the arrays whose elements the kernel only reads or only writes."""
        unchanged = set(self._read_only)
        for name, view in zip(self._parameters, arguments.views, strict=True):
            use = self._element_uses.get(name)
            if use is None or view is None:
                continue
            if use.rerun_changes_nothing(len(view.shape), view.record):
                unchanged.add(name)
        return frozenset(unchanged)
