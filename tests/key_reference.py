"""The default key of :mod:`numbatune.keys` written in Python: the tests' oracle for the C
extension's ``default_key`` and ``key_part`` (``numbatune/_native.c``), which compose it for
the general path, and for its ``Reader``, which composes it on a fast path's hit."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from numbatune import arrays
from numbatune.values import next_power_of_two


def key_part(found: tuple[tuple[int, ...], str, str]) -> tuple[tuple[int, ...], str, str]:
    """An array's part: its shape anchored to powers of two, its dtype name and layout."""
    shape, dtype, layout = found
    return tuple(next_power_of_two(n) for n in shape), dtype, layout


def default_key(args: tuple[Any, ...]) -> Hashable:
    """Each array argument's part and each boolean argument's value, in order."""
    key: list[Any] = []
    for value in args:
        found = arrays.read(value)
        if found is not None:
            key.append(key_part(found))
        elif isinstance(value, bool | np.bool_):
            key.append(bool(value))
    return tuple(key)
