"""CUDA events on raw stream handles: through cuda-bindings on a GPU, wall times under the
simulator (which runs each launch to its end before returning)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from numba import cuda

from numbatune import _native
from numbatune.arraykinds import SIMULATOR
from numbatune.streams.handles import DEFAULT_STREAMS, check_stream

_NOT_READY = 600  # CUDA_ERROR_NOT_READY


def checked(result: Any) -> Any:
    """The value a cuda-bindings driver call returned with its status, or numba's
    ``CudaAPIError`` where the call failed."""
    if result[0]:
        from numba.cuda.cudadrv.driver import CudaAPIError

        raise CudaAPIError(int(result[0]), f"CUDA driver call failed: {result[0]!r}")
    return result[1] if len(result) > 1 else None


class _DriverEvents:
    """CUDA events through cuda-bindings, on raw stream handles."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._driver = driver
        #: ``record(event, stream)``, and ``wait_event(waiting, event)`` for the work before
        #: ``event``'s latest record: the C extension's, raising numba's CudaAPIError.
        self.record = _native.record
        self.wait_event = _native.wait
        self._wait_event = self.create(timing=False)

    def create(self, timing: bool = True, stream: int | None = None) -> int:
        """A new event, as its raw handle, in the context of ``stream`` (a thread that launches
        may have no current context: numba's launch makes one current only for itself)."""
        flags = 0 if timing else self._driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
        with self._context_of(stream):
            return int(checked(self._driver.cuEventCreate(flags)))

    @contextlib.contextmanager
    def _context_of(self, stream: int | None) -> Iterator[None]:
        """``stream``'s context current for the block; for a default stream (or none), the
        thread's own, numba's where the thread has none."""
        driver = self._driver
        if stream is None or stream in DEFAULT_STREAMS:
            if not int(checked(driver.cuCtxGetCurrent())):
                cuda.current_context()  # a thread that never used CUDA: numba's context
            yield
            return
        context = checked(driver.cuStreamGetCtx(driver.CUstream(stream)))
        checked(driver.cuCtxPushCurrent(context))
        try:
            yield
        finally:
            driver.cuCtxPopCurrent()

    def context(self, stream: int) -> int:
        """The raw handle of the context of ``stream``, checked (``check_stream``)."""
        return check_stream(stream)

    def synchronize_context(self, context: int) -> None:
        """Wait on the host for all queued in ``context``, on every stream of it."""
        driver = self._driver
        checked(driver.cuCtxPushCurrent(driver.CUcontext(context)))
        try:
            checked(driver.cuCtxSynchronize())
        finally:
            driver.cuCtxPopCurrent()

    def wait(self, waiting: int, producer: int) -> None:
        """``waiting`` waits for what is queued on ``producer`` (callers hold the monitor lock)."""
        self.record(self._wait_event, producer)
        self.wait_event(waiting, self._wait_event)

    def synchronize(self, event: int) -> None:
        checked(self._driver.cuEventSynchronize(self._driver.CUevent(event)))

    def capturing(self, stream: int) -> bool:
        """Whether work queued on ``stream`` now goes into a CUDA graph being captured, or the
        driver cannot say (the legacy stream while a blocking stream is captured): then no
        event may be recorded or waited for on it, and its flags may not be asked."""
        error, status = self._driver.cuStreamIsCapturing(self._driver.CUstream(stream))
        return bool(error) or bool(int(status))

    def relax_capture(self) -> None:
        """Let the calling thread query events while another thread captures a graph: in a
        capture's default (global) mode, CUDA refuses an event query from any thread, and the
        refusal invalidates the capture."""
        self._driver.cuThreadExchangeStreamCaptureMode(
            self._driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        )

    def passed(self, event: int) -> bool:
        """Whether the device passed ``event``'s latest record, without waiting. An error (the
        context destroyed, a device fault) counts as passed: nothing queued will run."""
        return _native.query(event) != _NOT_READY

    def blocking(self, stream: int) -> bool:
        """Whether ``stream`` waits for the legacy default stream (created without
        ``CU_STREAM_NON_BLOCKING``); the default streams do."""
        if stream in DEFAULT_STREAMS:
            return True
        flags = checked(self._driver.cuStreamGetFlags(self._driver.CUstream(stream)))
        return not int(flags) & int(self._driver.CUstream_flags.CU_STREAM_NON_BLOCKING)

    def elapsed_s(self, start: int, end: int) -> float:
        cu_event = self._driver.CUevent
        return checked(self._driver.cuEventElapsedTime(cu_event(start), cu_event(end))) / 1e3

    def destroy(self, event: int) -> None:
        self._driver.cuEventDestroy(self._driver.CUevent(event))


class _SimulatorEvents:
    """The simulator runs each launch to its end before returning: an event is a wall time, and
    no stream is ever captured or waited for."""

    @staticmethod
    def wait(*args: Any) -> None:
        """What the calls that wait, relax a capture or free do: nothing."""

    wait_event = synchronize = relax_capture = synchronize_context = destroy = wait

    def create(self, timing: bool = True, stream: int | None = None) -> list[float]:
        return [0.0]

    def record(self, event: list[float], stream: int) -> None:
        event[0] = time.perf_counter()

    def capturing(self, stream: int) -> bool:
        return False

    def context(self, stream: int) -> int:
        return 0

    def passed(self, event: Any) -> bool:
        return True

    def blocking(self, stream: int) -> bool:
        return False

    def elapsed_s(self, start: list[float], end: list[float]) -> float:
        return end[0] - start[0]


def backend() -> Any:
    """The events of this process: the driver's on a GPU, wall times under the simulator."""
    return _SimulatorEvents() if SIMULATOR else _DriverEvents()
