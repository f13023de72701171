"""What a stream argument means: numba, torch, CuPy or cuda.core streams and raw handles.

With ``stream=None`` a launch goes to the current stream of the arguments' array library
(torch's or CuPy's, as Triton does for torch), or numba's default stream for numba arrays.
"""

from __future__ import annotations

from typing import Any

from numba import cuda

from numbatune.arraykinds import SIMULATOR, kind_of
from numbatune.errors import StreamError
from numbatune.rawstreams import stream_handle

#: The default streams' handles: the legacy default stream (0, ``CU_STREAM_LEGACY``) and the
#: per-thread one (``CU_STREAM_PER_THREAD``). They belong to every context and never close.
DEFAULT_STREAMS = (0, 1, 2)
#: The legacy default stream's handles.
LEGACY = (0, 1)


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
            stream_handle(stream)  # what is not a stream is refused, as on a GPU
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


def check_stream(stream: int) -> int:
    """The raw handle of the context ``stream`` belongs to (0 for the default streams, which
    belong to every context, and under the simulator).

    Raises
    ------
    StreamError
        ``stream`` is not a live stream of the current context.
    """
    if SIMULATOR or stream in DEFAULT_STREAMS:
        return 0
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
    return current
