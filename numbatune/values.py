"""Plain values as numbatune compares, rounds and writes them: integers (a bool is not one), powers
of two, the stable text of a value (the same in every process: for variant labels, stored keys
and checksums), canonical keys, and enums whose members are their text.
"""

from __future__ import annotations

import ast
import enum
import math
import re
from typing import Any

import numpy as np

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def is_integer(value: Any) -> bool:
    """True for Python and NumPy integers, False for bools (and everything else)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def next_power_of_two(n: int) -> int:
    """The least power of two >= ``n``; 1 for 0 and 1."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def plain(value: Any) -> Any:
    """``value`` with NumPy scalars that numba types like Python's (int64, float64, bool)
    made Python numbers; other values unchanged."""
    return value.item() if isinstance(value, np.int64 | np.float64 | np.bool_) else value


def stable_text(value: Any) -> str:
    """Text for ``value`` that is the same in every process and tells apart values that
    numba would type or compile differently.

    Numbers and strings as ``repr`` writes them; tuples and lists item by item; sets and
    frozensets sorted; NumPy scalars of other types than int64, float64 and bool with their
    type; numba dispatchers and functions by qualified name; anything else by ``repr`` with
    memory addresses removed.
    """
    value = plain(value)
    if isinstance(value, tuple):
        inner = ", ".join(stable_text(item) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(stable_text(item) for item in value) + "]"
    if isinstance(value, set | frozenset):
        items = sorted(stable_text(item) for item in value)
        return f"{type(value).__name__}({{{', '.join(items)}}})"
    if isinstance(value, dict):
        items = sorted(f"{stable_text(k)}: {stable_text(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    function = getattr(value, "py_func", None)
    if function is not None:
        return f"<device function {function.__module__}.{function.__qualname__}>"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"<{getattr(value, '__module__', '?')}.{value.__qualname__}>"
    return _ADDRESS.sub("", repr(value))


#: The one NaN object keys are made to hold: dictionaries find a key by identity first, so
#: keys holding it are found again, where a fresh NaN never equals itself.
NAN = float("nan")


def parse_stable_text(text: str) -> Any:
    """The value :func:`stable_text` wrote as ``text``, where it is a literal (numbers, bools,
    None, strings, and tuples and lists of them); ``text`` itself for any other value."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def canonical_key(key: Any) -> Any:
    """``key`` with NumPy scalars made Python numbers and every NaN made :data:`NAN`, so that
    equal calls give equal keys and a key's text is the same in every process."""
    if isinstance(key, tuple | list):
        return tuple(canonical_key(part) for part in key)
    if isinstance(key, frozenset):
        return frozenset(canonical_key(part) for part in key)
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, float) and math.isnan(key):
        return NAN
    return key


def key_text(key: Any) -> str:
    """The text a key is stored under: :func:`stable_text` of its canonical form."""
    return stable_text(canonical_key(key))


class TextEnum(str, enum.Enum):
    """An enum whose members are their text: they compare equal to it and print as it."""

    def __str__(self) -> str:
        return self.value
