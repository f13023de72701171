"""What a stream argument means: numba, torch, CuPy or cuda.core streams and raw handles.

With ``stream=None`` a launch goes to the current stream of the arguments' array library
(torch's or CuPy's, as Triton does for torch), or numba's default stream for numba arrays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from numba import cuda

from numbatune.arraykinds import SIMULATOR, ArrayKind, kind_of
from numbatune.errors import StreamError

#: The default streams' handles: the legacy default stream (0, ``CU_STREAM_LEGACY``) and the
#: per-thread one (``CU_STREAM_PER_THREAD``). They belong to every context and never close.
DEFAULT_STREAMS = (0, 1, 2)
#: The legacy default stream's handles.
LEGACY = (0, 1)

#: The attribute under which a numba, torch or CuPy stream object keeps its handle, once read
#: (their handles are fixed for their lives; cuda.core's may be closed, so are read each time).
HANDLE_MEMO = "_numbatune_handle"
_FIXED_HANDLES = ("numba", "numba_cuda", "torch", "cupy")  # the stream classes' top modules


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of a numba, torch or CuPy stream, a ``__cuda_stream__`` object or an
    integer handle (0 is the legacy default stream)."""
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, HANDLE_MEMO, None)
    if handle is None:
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


def stream_getter(kind: ArrayKind) -> Callable[..., Any]:
    """An array library's function for its current stream (its kind must have one)."""
    assert kind.stream is not None
    return kind.stream.getter()


def numba_stream(stream: Any, args: tuple[Any, ...] = ()) -> Any:
    """What numba's launch takes for ``stream`` (see the module for what None means)."""
    if stream is None:
        for value in args:
            kind = kind_of(type(value))
            if kind is not None and kind.stream is not None:
                stream = kind.stream.of(value)
                break
        else:
            return 0
    if SIMULATOR:
        if not isinstance(stream, int | type(cuda.default_stream())):
            _read_handle(stream)  # what is not a stream is refused, as on a GPU
        return stream
    if isinstance(stream, cuda.cudadrv.driver.Stream):
        return stream
    handle = stream_handle(stream)
    return 0 if handle == 0 else cuda.external_stream(handle)


def raw_stream(stream: Any) -> int:
    """The raw handle of what :func:`numba_stream` returns (under the simulator, a number that
    tells its streams apart)."""
    if SIMULATOR:
        return id(stream) if stream else 0
    return stream_handle(stream)


def synchronize(stream: Any) -> None:
    """Wait until ``stream`` (numba's, or 0 / None for the default stream) has done its work."""
    (stream or cuda.default_stream()).synchronize()


def wait_for(stream: Any) -> None:
    """Wait until the work queued on ``stream`` so far is done, on an event: other threads
    launch meanwhile (a copy to the host that waits as long holds their launches up)."""
    done = cuda.event()
    done.record(stream or cuda.default_stream())
    done.synchronize()


def check_stream(stream: int) -> None:
    """Raise :class:`StreamError` unless ``stream`` is a live stream of the current context
    (0, 1 and 2, the default streams, always are)."""
    if SIMULATOR or stream in DEFAULT_STREAMS:
        return
    from cuda.bindings import driver

    error, context = driver.cuStreamGetCtx(driver.CUstream(stream))
    if error:
        raise StreamError(
            f"stream {stream:#x} is not a live CUDA stream (destroyed, or not a stream): {error!r}"
        )
    current = int(cuda.current_context().handle)
    if int(context) != current:
        raise StreamError(
            f"stream {stream:#x} belongs to another CUDA context (another device, or a context "
            f"numba does not use) than the one numbatune launches in ({current:#x})"
        )
