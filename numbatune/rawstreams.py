"""The raw ``CUstream`` handle of a stream object: numba's, torch's, CuPy's, cuda.core's (any
``__cuda_stream__`` object) or an integer handle."""

from __future__ import annotations

import contextlib
import numbers
from typing import Any

from numbatune.errors import StreamError

#: The attribute under which a numba, torch or CuPy stream object keeps its handle, once read
#: (their handles are fixed for their lives; cuda.core's may be closed, so are read each time).
HANDLE_MEMO = "_numbatune_handle"
_FIXED_HANDLES = ("numba", "numba_cuda", "torch", "cupy")  # the stream classes' top modules


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of a numba, torch or CuPy stream, a ``__cuda_stream__`` object or an
    integer handle (0 is the legacy default stream).

    Raises
    ------
    TypeError
        ``stream`` is none of those.
    StreamError
        A ``__cuda_stream__`` object that cannot say its handle (closed).
    """
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, HANDLE_MEMO, None)
    if handle is None:
        if isinstance(stream, numbers.Integral):  # NumPy's integers (an ABC: looked at last)
            return int(stream)
        handle = _read_handle(stream)
        if type(stream).__module__.partition(".")[0] in _FIXED_HANDLES:
            with contextlib.suppress(AttributeError, TypeError):  # a class without __dict__
                setattr(stream, HANDLE_MEMO, handle)
    return handle


def _read_handle(stream: Any) -> int:
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        try:
            return int(protocol()[1])
        except Exception as error:  # e.g. cuda.core's stream, once closed
            raise StreamError(f"stream {stream!r} cannot be used: {error}") from error
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch, CuPy, numba
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(getattr(handle, "value", handle) or 0)
    raise TypeError(
        f"stream must be a numba, torch or CuPy stream or an integer CUstream handle, "
        f"got {stream!r}"
    )
