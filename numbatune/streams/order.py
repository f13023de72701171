"""Which streams a tuned launch must wait for, from where each buffer was last used.

Modelled on cubecl-runtime's multi-stream layer. Each stream has a *cursor*, the number of tuned
launches queued on it; each buffer (an allocation: a torch storage, a CuPy memory block, a numba
allocation) remembers the stream and cursor of its last use. A launch on stream B that uses a
buffer last used on stream A at a cursor B has not yet waited for makes B wait for A on the
device (an event recorded on A, ``cuStreamWaitEvent`` on B); the host never waits. Buffers used
on one stream only add no waits.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable


class StreamOrder:
    """Which streams a launch must wait for, from where each buffer was last used.

    ``record(stream)`` records the stream's event after its latest launch (:meth:`launched`
    calls it, so a stream is touched only right after numbatune launched on it);
    ``wait(waiting, producer)`` makes stream ``waiting`` wait, on the device, for the producer's
    event. After ``limit`` buffers are remembered they are all forgotten at once, and each
    stream's next launch waits for what the others queued before (a barrier), so memory stays
    bounded and no ordering is lost.
    """

    def __init__(
        self,
        wait: Callable[[int, int], None],
        record: Callable[[int], None],
        limit: int = 1 << 16,
    ) -> None:
        self._wait = wait
        self._record = record
        self._limit = limit
        self._cursors: dict[int, int] = {}
        self._recorded: dict[int, int] = {}
        self._last_use: dict[Hashable, tuple[int, int]] = {}
        self._waited: dict[tuple[int, int], int] = {}
        self._barrier: dict[int, int] = {}
        self._past_barrier: set[int] = set()

    def use(self, stream: int, buffers: Iterable[Hashable]) -> int:
        """Queue the waits a launch on ``stream`` that uses ``buffers`` needs, and note the use;
        returns the launch's cursor, for :meth:`launched`."""
        if stream not in self._past_barrier:
            for producer, cursor in self._barrier.items():
                self._wait_for(stream, producer, cursor)
            self._past_barrier.add(stream)
        cursor = self._cursors.get(stream, 0) + 1
        last_use = self._last_use
        for buffer in buffers:
            last = last_use.get(buffer)
            if last is not None and last[0] != stream:
                self._wait_for(stream, *last)
            last_use[buffer] = (stream, cursor)
        self._cursors[stream] = cursor
        if len(self._last_use) > self._limit:
            self.barrier()
        return cursor

    def launched(self, stream: int, cursor: int) -> None:
        """The launch :meth:`use` gave ``cursor`` is queued: record the stream's event."""
        self._record(stream)
        self._recorded[stream] = max(self._recorded.get(stream, 0), cursor)

    def barrier(self) -> None:
        """Forget every buffer; each stream's next launch waits for all queued on the others."""
        self._barrier = dict(self._cursors)
        self._past_barrier = set()
        self._last_use.clear()

    def _wait_for(self, stream: int, producer: int, cursor: int) -> None:
        if producer == stream or self._waited.get((stream, producer), 0) >= cursor:
            return
        if self._recorded.get(producer, 0) < cursor:  # the first stream, or a launch in flight
            self._record(producer)
            self._recorded[producer] = self._cursors.get(producer, 0)
        self._wait(stream, producer)
        self._waited[(stream, producer)] = self._recorded[producer]
