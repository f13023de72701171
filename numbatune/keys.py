"""Tuning keys: which calls share a tuning result.

A key is computed from a call's arguments on every call, so it is built once per decorated
kernel into a plain function of the arguments. Every form of key holds the dtype, layout and
number of dimensions of each array argument: a float64 call never reuses a float32 winner.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from numbatune import _native, arrays
from numbatune.arraykinds import Read
from numbatune.errors import TuningKeyError
from numbatune.values import is_integer, next_power_of_two

KeyFunction = Callable[[tuple[Any, ...]], Hashable]


def anchor(x: int, max: int | None = None, min: int | None = None, base: int = 2) -> int:
    """Round ``x`` up to a power of ``base``, then clamp it to ``[min, max]``.

    Sizes that round to the same anchor share a tuning result, so a kernel is tuned once for
    1000 and 1024 elements (cubecl's ``anchor``). The default key anchors every array's shape
    this way; use it in a key function of your own.

    Parameters
    ----------
    x
        A size, an integer >= 0. ``anchor(0)`` and ``anchor(1)`` are 1.
    max
        The largest anchor to return, an integer, or None for no limit.
    min
        The smallest anchor to return, an integer no larger than ``max``, or None for no
        limit.
    base
        The base of the powers, an integer >= 2.

    Returns
    -------
    int
        The anchor.

    Raises
    ------
    TypeError
        ``x``, or ``max`` or ``min`` where given, is not an integer.
    ValueError
        ``x`` is negative, ``min`` is larger than ``max``, or ``base`` is not an integer >= 2.

    Examples
    --------
    >>> anchor(1000), anchor(1025), anchor(5000, max=4096), anchor(10, base=4)
    (1024, 2048, 4096, 16)
    """
    if not is_integer(x):
        raise TypeError(f"anchor: x must be a non-negative integer, got {x!r}")
    if x < 0:
        raise ValueError(f"anchor: x must be a non-negative integer, got {x}")
    if not is_integer(base) or base < 2:
        raise ValueError(f"anchor: base must be an integer >= 2, got {base!r}")
    if base == 2:
        power = next_power_of_two(x)
    else:
        power = 1
        while power < x:
            power *= base
    if max is not None:
        if type(max) is not int and not is_integer(max):  # the test of a plain int first: fast
            raise TypeError(f"anchor: max must be an integer or None, got {max!r}")
        power = power if power < max else max
    if min is not None:
        if type(min) is not int and not is_integer(min):
            raise TypeError(f"anchor: min must be an integer or None, got {min!r}")
        if max is not None and min > max:
            raise ValueError(f"anchor: min must not be larger than max, got {min} > {max}")
        power = power if power > min else min
    return power


#: An array's part of the default key from what :func:`numbatune.arrays.read` gives (its
#: anchored shape, dtype and layout), made in C: equal parts are one object, compared by identity.
default_key_part: Callable[[Read], tuple[tuple[int, ...], str, str]] = _native.key_part

#: The classes of the arguments that are mode flags, whose value is part of the default key (a
#: boolean: it selects a code path).
_FLAGS = (bool, np.bool_)


class KeyParts(dict):
    """The default-key parts of arrays of one dtype and layout, by shape, which a fast path
    looks up (``parts[shape]``, in its generated code and in C) rather than anchor the shape on
    every call; the part of a new shape is made here. At most :attr:`LIMIT` are kept."""

    LIMIT = 1024

    def __init__(self, dtype: str, layout: str) -> None:
        super().__init__()
        self._dtype = dtype
        self._layout = layout

    def __missing__(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], str, str]:
        if len(self) >= self.LIMIT:
            self.clear()
        shape = tuple(shape)  # not torch's Size: keep no object of the array's library
        part = self[shape] = default_key_part((shape, self._dtype, self._layout))
        return part


def is_flag(value: Any) -> bool:
    """Whether an argument is a mode flag, whose value is part of the default key."""
    return isinstance(value, _FLAGS)


def _types_of(args: tuple[Any, ...]) -> tuple[tuple[str, str, int], ...]:
    """Dtype, layout and number of dimensions of each array argument."""
    reads = [arrays.read(value) for value in args]
    return tuple((read[1], read[2], len(read[0])) for read in reads if read is not None)


def default_key(args: tuple[Any, ...]) -> Hashable:
    """The key of ``key=None`` (:func:`numbatune.autotune`), composed in C as a fast path's hit
    composes it (``_native.Reader``)."""
    return _native.default_key(args, tuple(map(arrays.read, args)), _FLAGS)


def default_key_of(arguments: arrays.Arguments) -> Hashable:
    """:func:`default_key` of a call's arguments as read once (their views)."""
    reads = tuple(None if v is None else (v.shape, v.dtype, v.layout) for v in arguments.views)
    return _native.default_key(arguments.values, reads, _FLAGS)


def build_key(
    key: str | Sequence[str] | Callable[..., Hashable] | None,
    signature: inspect.Signature,
    kernel_name: str,
) -> KeyFunction:
    """Turn the ``key=`` argument of :func:`numbatune.autotune`, whose docstring says what each
    form of it holds, into a function of the arguments."""
    if key is None:
        return default_key
    if isinstance(key, str):
        key = [key]
    if callable(key):
        return _function_key(key, kernel_name)
    if isinstance(key, Sequence) and all(isinstance(name, str) for name in key):
        return _named_key(list(key), signature, kernel_name)
    raise TypeError(
        f"autotune({kernel_name}): key must be None, an argument name, a list of argument "
        f"names or a function of the arguments, got {key!r}"
    )


def _named_key(names: list[str], signature: inspect.Signature, kernel_name: str) -> KeyFunction:
    parameters = list(signature.parameters)
    unknown = [name for name in names if name not in parameters]
    if unknown:
        raise ValueError(
            f"autotune({kernel_name}): key names {unknown} are not arguments of the kernel; "
            f"its arguments are {parameters}"
        )
    positions = [parameters.index(name) for name in names]

    def named_key(args: tuple[Any, ...]) -> Hashable:
        reads = [(args[i], arrays.read(args[i])) for i in positions]
        picked = [value if read is None else default_key_part(read) for value, read in reads]
        return (*picked, *_types_of(args))

    return named_key


def _function_key(function: Callable[..., Hashable], kernel_name: str) -> KeyFunction:
    def function_key(args: tuple[Any, ...]) -> Hashable:
        try:
            user_part = function(*args)
        except Exception as error:
            raise TuningKeyError(
                f"autotune({kernel_name}): the key function raised {type(error).__name__}: {error}"
            ) from error
        return (user_part, *_types_of(args))

    return function_key


def is_array_part(part: Any) -> bool:
    """Whether ``part`` of a key is an array's part of the default key: (shape, dtype, layout)."""
    return (
        isinstance(part, tuple)
        and len(part) == 3
        and isinstance(part[0], tuple)
        and isinstance(part[1], str)
        and part[2] in ("C", "F", "A")
    )


def describe(key: Any) -> str:
    """A short text for a key: ``(1024, 'float32', 'C')`` array parts read ``1024 float32 C``."""
    if is_array_part(key):
        return f"{'x'.join(map(str, key[0]))} {key[1]} {key[2]}"
    if (
        isinstance(key, tuple)
        and len(key) == 3
        and isinstance(key[0], str)
        and key[1] in ("C", "F", "A")
        and isinstance(key[2], int)
    ):
        return f"{key[0]} {key[1]} {key[2]}d"
    if isinstance(key, tuple):
        return "(" + ", ".join(describe(part) for part in key) + ")"
    return repr(key)


def check_hashable(key: Any, kernel_name: str) -> None:
    """Raise a clear error when a key cannot be used as a cache key."""
    try:
        hash(key)
    except TypeError as error:
        raise TuningKeyError(
            f"autotune({kernel_name}): the key {key!r} is not hashable ({error}); "
            "a key function must return numbers, strings and tuples of them"
        ) from None


_TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|[A-Za-z_]\w*")


def distance(first: str, second: str) -> float:
    """How far apart two keys are, from their stored texts (to find the nearest tuned key):
    over their numbers and words in order, the doublings between each pair of positive numbers
    that differ, plus one for each other pair that differs; infinite for texts of other forms."""
    ours, theirs = _TOKEN.findall(first), _TOKEN.findall(second)
    if len(ours) != len(theirs):
        return math.inf
    total = 0.0
    for a, b in zip(ours, theirs, strict=True):
        if a == b:
            continue
        try:
            x, y = float(a), float(b)
        except ValueError:
            total += 1
            continue
        total += abs(math.log2(x / y)) if x > 0 and y > 0 else 1
    return total
