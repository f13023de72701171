"""The stream order of :mod:`numbatune.streams.order` written in Python: the tests' oracle for
the C extension's ``Order`` (``numbatune/_order.c``), which takes the same steps and makes the
same calls to its events, in the same order."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from numbatune.streams.order import LIMIT

Entry = tuple[int, int]  # (stream, epoch)


class StreamOrder:
    """Which streams a launch must wait for, from where each buffer was last used.

    ``events`` (set before the first use) makes, records and waits for the streams' events:
    ``create(timing, stream)``, ``record(event, stream)``, ``wait_event(waiting, event)``. After
    ``limit`` buffers are remembered they are all forgotten at once, and each stream's next
    launch waits for what the others queued before (a barrier), so memory stays bounded and no
    ordering is lost.
    """

    def __init__(self, events: Any = None, limit: int = LIMIT) -> None:
        self.events = events
        self._limit = limit
        #: Each stream's open epoch, as the entry its buffers' last uses hold.
        self._open: dict[int, Entry] = {}
        #: Each stream's event, recorded when one of its epochs ends.
        self._event: dict[int, Any] = {}
        #: Each buffer's last use.
        self.last_use: dict[Hashable, Entry] = {}
        #: The open epochs of the streams whose launches may skip :meth:`use` while their
        #: buffers' last uses are that epoch; emptied by a barrier.
        self.quick: dict[int, Entry] = {}
        self._waited: dict[tuple[int, int], int] = {}
        self._barrier: dict[int, int] = {}
        self._past_barrier: set[int] = set()
        #: The streams whose open epoch a use noted (quick streams' are taken as noted).
        self._used: set[int] = set()
        # What the C order keeps for its monitor (streams.monitor), which sets ``monitor``.
        self.stream, self.ordering, self.monitor = None, False, None
        self.lock, self.pending, self.blocking = threading.Lock(), {}, {}

    def use(self, stream: int, buffers: Iterable[Hashable], quick: bool = False) -> None:
        """Queue the waits a launch on ``stream`` that uses ``buffers`` needs, and note the use.
        ``quick``: later launches on ``stream`` may skip this while their buffers stay in its
        open epoch (:meth:`quick_use`)."""
        if stream not in self._past_barrier:
            skipped = False
            for producer, epoch in self._barrier.items():
                skipped |= self._wait_for(stream, producer, epoch)
            if not skipped:
                self._past_barrier.add(stream)
        entry = self._open.get(stream)
        if entry is None:
            entry = self._open[stream] = (stream, 1)
        self._used.add(stream)
        last_use, waited = self.last_use, self._waited
        for buffer in buffers:
            last = last_use.get(buffer)
            if last is not entry:
                if (
                    last is not None
                    and last[0] != stream
                    and waited.get((stream, last[0]), 0) < last[1]
                    and self._wait_for(stream, *last)
                ):
                    continue  # skipped for a capture: its last use stays the work that runs
                last_use[buffer] = entry
        if len(last_use) > self._limit:
            self.barrier()
        elif quick:
            self.quick[stream] = entry

    def quick_use(
        self, stream: int, buffers: tuple[Hashable, ...], lock: AbstractContextManager[Any]
    ) -> Entry | None:
        """:meth:`use` for a launch on a stream whose launches may skip it (in :attr:`quick`):
        nothing where each of ``buffers`` was last used in the stream's open epoch, or never
        (it is noted so now), and fewer than the limit are remembered; else :meth:`use`,
        under ``lock``. Returns the stream's open entry as it was first read, or None (and
        does nothing) where the stream is not quick."""
        entry = self.quick.get(stream)
        if entry is None:
            return None
        last_use = self.last_use
        if len(last_use) >= self._limit or any(
            last_use.setdefault(buffer, entry) is not entry for buffer in buffers
        ):
            with lock:
                self.use(stream, buffers)
        return entry

    def launched(self, stream: int) -> None:
        """A launch on ``stream`` is queued: record the stream's event now, ending its epoch
        (for streams that may be destroyed, which are touched only right after a launch);
        nothing while ``stream`` is captured into a graph."""
        if not self._captured(stream):
            self._end_epoch(stream)

    def barrier(self) -> None:
        """Forget every buffer; each stream's next launch waits for all queued on the others:
        up to their open epoch, or, where no use noted it (a stream whose event is recorded
        right after each launch, which may be gone), the last one recorded."""
        self._barrier = {
            stream: epoch if stream in self._used or stream in self.quick else epoch - 1
            for stream, (_, epoch) in self._open.items()
        }
        self._past_barrier = set()
        self.last_use.clear()
        self.quick.clear()

    def _end_epoch(self, stream: int) -> None:
        """Record ``stream``'s event after all queued on it so far, ending its open epoch."""
        event = self._event.get(stream)
        if event is None:
            event = self._event[stream] = self.events.create(timing=False, stream=stream)
        self.events.record(event, stream)
        _, epoch = self._open.get(stream, (stream, 0))
        entry = self._open[stream] = (stream, epoch + 1)
        self._used.discard(stream)
        if stream in self.quick:
            self.quick[stream] = entry

    def _captured(self, stream: int) -> bool:
        """Whether work queued on ``stream`` now goes into a CUDA graph being captured (the
        events' ``capturing``, where they have one)."""
        capturing = getattr(self.events, "capturing", None)
        return capturing is not None and bool(capturing(stream))

    def _wait_for(self, stream: int, producer: int, epoch: int) -> bool:
        """``stream`` waits for ``producer``'s launches up to the end of ``epoch``; True
        where it was skipped, as one of the two is being captured into a graph."""
        if producer == stream or self._waited.get((stream, producer), 0) >= epoch:
            return False
        record = self._open.get(producer, (producer, 0))[1] <= epoch  # not recorded since
        if self._captured(stream) or (record and self._captured(producer)):
            return True  # (a producer's capture matters only where its event is recorded now)
        if record:
            self._end_epoch(producer)
        self.events.wait_event(stream, self._event[producer])
        self._waited[(stream, producer)] = self._open[producer][1] - 1
        return False
