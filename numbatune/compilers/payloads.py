"""A compiled kernel's serialised form, for either compiler: a dict of what loading it takes,
with the format's version, pickled and compressed (the kernel store's files, exports, trial
runs)."""

from __future__ import annotations

import pickle
import types
import zlib
from typing import Any


def pack(version: int, states: dict[str, Any], pickler: types.ModuleType = pickle) -> bytes:
    """``states`` (what loading the kernel takes) with payload format ``version``, pickled by
    ``pickler`` and compressed, for :func:`unpack`. ``pickler`` may be a compiler's cloudpickle,
    which pickles a script's classes by value: :func:`unpack`'s ``pickle.loads`` reads either."""
    return zlib.compress(pickler.dumps({"version": version, **states}, protocol=5))


def unpack(payload: bytes, version: int, compiler: str) -> dict[str, Any]:
    """The states (with their ``version``) that :func:`pack` packed into ``payload``; a
    ValueError, naming the ``compiler``, where it is not one or not of format ``version``."""
    try:
        states = pickle.loads(zlib.decompress(payload))
    except Exception as error:  # zlib.error, pickle's many errors, missing classes
        raise ValueError(f"not a compiled kernel ({type(error).__name__}: {error})") from None
    if not isinstance(states, dict) or states.get("version") != version:
        raise ValueError(f"not a compiled {compiler} kernel of this numbatune")
    return states
