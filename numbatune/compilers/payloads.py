"""A compiled kernel's serialised form, for either compiler: a dict of what loading it takes,
with the format's version, pickled and compressed (the kernel store's files, exports, trial
runs)."""

from __future__ import annotations

import pickle
import types
import zlib
from typing import Any


def pack(version: int, states: dict[str, Any], pickler: types.ModuleType = pickle) -> bytes:
    """``states`` with the format's ``version``, pickled and compressed.

    Parameters
    ----------
    version
        The compiler's payload format.
    states
        What loading the kernel takes.
    pickler
        The module whose ``dumps`` pickles them (a compiler's cloudpickle, which pickles
        classes of a script by value; :func:`unpack`'s ``pickle.loads`` reads either).

    Returns
    -------
    bytes
        What :func:`unpack` reads.
    """
    return zlib.compress(pickler.dumps({"version": version, **states}, protocol=5))


def unpack(payload: bytes, version: int, compiler: str) -> dict[str, Any]:
    """The states :func:`pack` packed, of format ``version``.

    Parameters
    ----------
    payload
        The bytes.
    version
        The format expected.
    compiler
        The compiler's name, for the message.

    Returns
    -------
    dict
        The states, with their ``version``.

    Raises
    ------
    ValueError
        ``payload`` is not one, or of another format.
    """
    try:
        states = pickle.loads(zlib.decompress(payload))
    except Exception as error:  # zlib.error, pickle's many errors, missing classes
        raise ValueError(f"not a compiled kernel ({type(error).__name__}: {error})") from None
    if not isinstance(states, dict) or states.get("version") != version:
        raise ValueError(f"not a compiled {compiler} kernel of this numbatune")
    return states
