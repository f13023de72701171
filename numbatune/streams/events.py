"""CUDA events on raw stream handles: through cuda-bindings on a GPU, wall times under the
simulator (which runs each launch to its end before returning)."""

from __future__ import annotations

import time
from typing import Any

from numbatune.native import native
from numbatune.streams.handles import check_stream


class _DriverEvents:
    """CUDA events through cuda-bindings, on raw stream handles."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._driver = driver
        self._native = native()
        self._wait_event = self.create(timing=False)

    def _checked(self, result: Any) -> Any:
        if result[0]:
            from numba.cuda.cudadrv.driver import CudaAPIError

            raise CudaAPIError(int(result[0]), f"CUDA driver call failed: {result[0]!r}")
        return result[1] if len(result) > 1 else None

    def create(self, timing: bool = True) -> Any:
        flags = 0 if timing else self._driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
        return self._checked(self._driver.cuEventCreate(flags))

    def record(self, event: Any, stream: int) -> None:
        if error := self._native.record(int(event), stream):
            self._raise(error, "cuEventRecord")

    def wait(self, waiting: int, producer: int) -> None:
        """``waiting`` waits for what is queued on ``producer`` (callers hold the monitor lock)."""
        self.record(self._wait_event, producer)
        self.wait_event(waiting, self._wait_event)

    def wait_event(self, waiting: int, event: Any) -> None:
        """``waiting`` waits for the work before ``event``'s latest record."""
        if error := self._native.wait(waiting, int(event)):
            self._raise(error, "cuStreamWaitEvent")

    def _raise(self, error: int, call: str) -> None:
        from numba.cuda.cudadrv.driver import CudaAPIError

        raise CudaAPIError(error, f"{call} failed")

    def synchronize(self, event: Any) -> None:
        self._checked(self._driver.cuEventSynchronize(event))

    def check(self, stream: int) -> None:
        check_stream(stream)

    def elapsed_s(self, start: Any, end: Any) -> float:
        return self._checked(self._driver.cuEventElapsedTime(start, end)) / 1e3

    def destroy(self, event: Any) -> None:
        self._driver.cuEventDestroy(event)


class _SimulatorEvents:
    """The simulator runs each launch to its end before returning: an event is a wall time."""

    def create(self, timing: bool = True) -> list[float]:
        return [0.0]

    def record(self, event: list[float], stream: int) -> None:
        event[0] = time.perf_counter()

    def wait(self, waiting: int, producer: int) -> None:
        pass

    def wait_event(self, waiting: int, event: Any) -> None:
        pass

    def synchronize(self, event: Any) -> None:
        pass

    def check(self, stream: int) -> None:
        pass

    def elapsed_s(self, start: list[float], end: list[float]) -> float:
        return end[0] - start[0]

    def destroy(self, event: Any) -> None:
        pass


def backend() -> Any:
    """The events of this process: the driver's on a GPU, wall times under the simulator."""
    from numbatune.arrays import SIMULATOR

    return _SimulatorEvents() if SIMULATOR else _DriverEvents()
