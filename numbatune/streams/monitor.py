"""What every tuned launch reports to, once more than one stream or a profile is in use.

While a process has launched on one stream only, none of this runs: a launch compares its
stream with that one and goes on. From the second stream on, every launch is ordered after the
last uses of its buffers (:mod:`numbatune.streams.order`). Torch and CuPy arrays launched on a
stream other than their library's current stream are kept alive until that stream has passed
the launch (an event, waited for by a background thread), so dropping them cannot hand their
memory to the caching allocator while the kernel may still read it (cubecl's deferred
release). On a stream numbatune holds, the launches that kept arrays since the thread last
looked share one event, which the thread records: a launch only adds its arrays to a list.
numba's own arrays need not be kept: numba frees them with ``cuMemFree``, which waits for the
device. While a profile is open, every tuned launch is bracketed by two events.

Only what numbatune launches is seen here: work queued by other code on a stream is ordered
only by the ``__cuda_array_interface__`` rule (see :mod:`numbatune.launch.fastpath`) or by the
caller.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import threading
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune.arrays import SIMULATOR, library_of
from numbatune.errors import ProfileError
from numbatune.streams import events as _events
from numbatune.streams.handles import current_stream
from numbatune.streams.order import StreamOrder
from numbatune.streams.profiles import Profile, ProfileToken


@dataclass(slots=True)
class _Launch:
    """One watched launch, as :meth:`Monitor.after` finishes it."""

    stream: int
    name: str | None
    cursor: int = 0
    start: Any = None
    end: Any = None
    kept: tuple[Any, ...] = ()
    profiles: list[list[_Launch]] | tuple[()] = ()


_ANY = object()  # never equal to a stream: every launch is watched


class Monitor:
    """What every tuned launch reports to, when more than one stream or a profile is in use.

    A launch compares its raw stream handle with :attr:`stream`; only when they differ does it
    call :meth:`before` and, with what that returns, :meth:`after` once it is queued.
    """

    def __init__(self, events: Any = None) -> None:
        self._events = events
        #: The one stream launched on so far; ``_ANY`` once there are several or a profile.
        self.stream: Any = None
        self._order: StreamOrder | None = None
        self._profiles: dict[ProfileToken, list[_Launch]] = {}
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._kept: collections.deque[tuple[Any, tuple[Any, ...]]] = collections.deque()
        # Arrays kept by launches on a stream numbatune holds, not yet behind an event, and the
        # event the keeper will record for them (made here: the keeper's thread has no CUDA
        # context to make one in).
        self._unfenced: dict[int, tuple[Any, list[Any]]] = {}
        self._kept_ready = threading.Condition(self._lock)
        self._keeper_waiting = False
        # Events the keeper is done with, for the next launches that keep arrays.
        self._spare_events: list[Any] = []
        self._keeper: threading.Thread | None = None
        # Each stream seen, with the object that owns it (None for raw handles and the
        # libraries' current streams, which their libraries keep).
        self._streams: dict[int, Any] = {}
        # Streams numbatune cannot keep alive (raw handles, numba's external streams, cuda.core
        # streams, which may be closed): their event is recorded right after each launch on
        # them, so that a later wait never touches the stream itself. On the others it is
        # recorded when another stream first needs to wait for them.
        self._eager: set[int] = set()
        # Each tracked stream's event.
        self._latest: dict[int, Any] = {}

    @property
    def events(self) -> Any:
        if self._events is None:
            self._events = _events.backend()
        return self._events

    # -- launches -----------------------------------------------------------------------------

    def watch(
        self, stream: int, arrays: tuple[Any, ...], name: str | None, given: Any = None
    ) -> _Launch | None:
        """:meth:`before` for a launch over ``arrays`` (any arrays numbatune knows)."""
        arrays = tuple(a for a in arrays if a is not None)
        buffers = tuple(buffer_of(a) for a in arrays)
        kept = keep(stream, arrays) if name else ()
        return self.before(stream, buffers, kept, name, given)

    def before(
        self,
        stream: int,
        buffers: tuple[Hashable, ...],
        kept: tuple[Any, ...],
        name: str | None,
        given: Any = None,
    ) -> _Launch | None:
        """Order a launch of ``name`` on ``stream`` that uses ``buffers`` (allocations) after
        their last uses; returns what :meth:`after` needs, or None when it needs nothing
        (the common case: no profile open, nothing to keep, a stream numbatune keeps alive).
        ``kept`` are arrays to keep alive until the stream passes the launch; ``given`` is
        the stream object the caller passed, kept so that ``stream`` stays valid."""
        with self._lock:
            if stream not in self._streams:
                self._see(stream, given)
            if self.stream is None:
                self.stream = stream
                return None
            order = self._order or self._start_ordering()
            cursor = order.use(stream, buffers)
            if name is None or not (self._profiles or kept or stream in self._eager):
                return None
            launch = _Launch(stream, name, cursor, kept=kept)
            if self._profiles:
                launch.start = self.events.create()
                self.events.record(launch.start, stream)
                launch.profiles = list(self._profiles.values())
            return launch

    def _see(self, stream: int, given: Any) -> None:
        """A stream met for the first time: checked, and kept (or recorded eagerly)."""
        self.events.check(stream)
        self._streams[stream] = None if isinstance(given, int) else given
        if stream not in (0, 1, 2) and _may_close(given):
            self._eager.add(stream)

    def after(self, launch: _Launch) -> None:
        """Finish a launch :meth:`before` returned, once it is queued."""
        with self._lock:
            if self._order is not None and launch.stream in self._eager:
                self._order.launched(launch.stream, launch.cursor)
            if launch.profiles:
                launch.end = self.events.create()
                self.events.record(launch.end, launch.stream)
                for records in launch.profiles:
                    records.append(launch)
            if launch.kept:
                if self._held(launch.stream):  # the keeper records its event later
                    unfenced = self._unfenced.get(launch.stream)
                    if unfenced is None:
                        unfenced = self._unfenced[launch.stream] = (self._spare_event(), [])
                    unfenced[1].extend(launch.kept)
                else:
                    self._fence(launch.stream, self._spare_event(), launch.kept)
                launch.kept = ()
                if self._keeper is None:
                    self._start_keeper()
                elif self._keeper_waiting:
                    self._kept_ready.notify()

    def _held(self, stream: int) -> bool:
        """Whether numbatune keeps ``stream`` alive (a default stream, or one whose object it
        holds), so that the keeper may record an event on it later."""
        return stream not in self._eager and (
            stream in (0, 1, 2) or self._streams.get(stream) is not None
        )

    def _fence_unfenced(self) -> None:
        """One event on each stream whose launches kept arrays since the last call (a method:
        no name of the keeper's loop holds the arrays while it waits)."""
        while self._unfenced:
            stream, (event, arrays) = self._unfenced.popitem()
            self._fence(stream, event, tuple(arrays))

    def _spare_event(self) -> Any:
        spare = self._spare_events
        return spare.pop() if spare else self.events.create(timing=False)

    def _fence(self, stream: int, event: Any, arrays: tuple[Any, ...]) -> None:
        """Keep ``arrays`` until ``stream`` passes what is queued on it now (``event``)."""
        self.events.record(event, stream)
        self._kept.append((event, arrays))

    def wait(self, waiting: int, producer: int) -> None:
        """Make stream ``waiting`` wait, on the device, for all queued so far on ``producer``."""
        with self._lock:
            self.events.wait(waiting, producer)

    def _record_event(self, stream: int) -> None:
        event = self._latest.get(stream)
        if event is None:
            event = self._latest[stream] = self.events.create(timing=False)
        self.events.record(event, stream)

    def _wait_for_event(self, waiting: int, producer: int) -> None:
        self.events.wait_event(waiting, self._latest[producer])

    def _start_ordering(self) -> StreamOrder:
        """A second stream or a profile: from now on every launch is watched and every buffer
        tracked; what the first stream queued before is waited for by each other stream's
        first launch."""
        first = self.stream
        self.stream = _ANY
        order = self._order = StreamOrder(self._wait_for_event, self._record_event)
        if first is not None:
            order.use(first, ())
            order.barrier()
        return order

    # -- deferred release ---------------------------------------------------------------------

    def _start_keeper(self) -> None:
        self._keeper = threading.Thread(
            target=self._release_kept, name="numbatune-release", daemon=True
        )
        self._keeper.start()

    def _release_kept(self) -> None:
        while True:
            with self._lock:
                while not self._kept and not self._unfenced:
                    self._keeper_waiting = True
                    self._kept_ready.wait()
                self._keeper_waiting = False
                self._fence_unfenced()
                event = self._kept[0][0]
            self.events.synchronize(event)  # without the lock: launches go on meanwhile
            with self._lock:
                self._kept.popleft()
                self._spare_events.append(event)

    def kept_arrays(self) -> int:
        """How many arrays are kept alive for launches the device has maybe not passed."""
        with self._lock:
            unfenced = sum(len(objects) for _, objects in self._unfenced.values())
            return unfenced + sum(len(objects) for _, objects in self._kept)

    # -- profiles -----------------------------------------------------------------------------

    def start_profile(self) -> ProfileToken:
        with self._lock:
            token = ProfileToken(next(self._numbers))
            self._profiles[token] = []
            if self._order is None and self.stream is not _ANY:
                self._start_ordering()
            return token

    def end_profile(self, token: ProfileToken) -> Profile:
        if not isinstance(token, ProfileToken):
            raise ProfileError(
                f"end_profile: token must be what numbatune.start_profile() returned, got {token!r}"
            )
        with self._lock:
            records = self._profiles.pop(token, None)
        if records is None:
            raise ProfileError(f"end_profile: {token!r} is not open (ended already?)")
        profile = Profile()
        for launch in records:
            self.events.synchronize(launch.end)
            seconds = self.events.elapsed_s(launch.start, launch.end)
            profile.device_s += seconds
            profile.launches += 1
            name = launch.name or "?"
            profile.by_kernel[name] = profile.by_kernel.get(name, 0.0) + seconds
            with self._lock:
                launch.profiles = [held for held in launch.profiles if held is not records]
                if not launch.profiles:  # no open profile holds its events any more
                    self.events.destroy(launch.start)
                    self.events.destroy(launch.end)
        return profile


def _may_close(given: Any) -> bool:
    """Whether the stream ``given`` names may be destroyed while numbatune holds ``given``: a
    raw handle, numba's external stream, another library's ``__cuda_stream__`` object (cuda.core
    closes its streams when asked)."""
    if isinstance(given, int):
        return True
    if _NUMBA_STREAM is not None and isinstance(given, _NUMBA_STREAM):
        return bool(given.external)
    return hasattr(given, "__cuda_stream__")


_NUMBA_STREAM = None if SIMULATOR else cuda.cudadrv.driver.Stream


def keep(stream: int, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """The torch and CuPy arrays among ``arrays`` to keep alive past a launch on ``stream``."""
    return tuple(a for a in arrays if _needs_keeping(a, stream))


def _needs_keeping(array: Any, stream: int) -> bool:
    """True for a torch or CuPy array launched on a stream other than its library's current
    one: its caching allocator would hand its memory out again on that one when it is freed."""
    library = library_of(type(array))
    return library in ("torch", "cupy") and current_stream(library, array) != stream


def buffer_of(array: Any) -> Hashable:
    """The allocation an array's data lies in: views of one allocation share it."""
    library = library_of(type(array))
    if library == "torch":
        return array.data_ptr() - array.storage_offset() * array.element_size()
    if library == "cupy":
        return array.data.mem.ptr
    if library == "numba" and not SIMULATOR:
        owner = array.gpu_data.owner
        base = getattr(owner, "device_pointer_value", None)
        if base is not None:
            return base
        if library_of(type(owner)) is not None:
            return buffer_of(owner)
        return array.device_ctypes_pointer.value
    if library == "numba":  # the simulator's: a NumPy array, maybe a view
        data = array._ary
        while data.base is not None:
            data = data.base
        return id(data)
    return array.__cuda_array_interface__["data"][0]


monitor = Monitor()


def _after_fork_in_child() -> None:
    """A forked child's monitor starts afresh: its parent's streams and events are not its."""
    monitor.__init__()  # type: ignore[misc]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def start_profile() -> ProfileToken:
    """Start measuring the device time of tuned launches; returns the token to end it with."""
    return monitor.start_profile()


def end_profile(token: ProfileToken) -> Profile:
    """End the profile ``token`` started (waiting for its launches) and return what it saw.

    Raises :class:`ProfileError` for a token that is not open: ended already, or not one
    :func:`start_profile` returned.
    """
    return monitor.end_profile(token)


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """``with numbatune.profile() as p: ...``; ``p`` holds the figures once the block ends."""
    token = start_profile()
    result = Profile()
    try:
        yield result
    finally:
        ended = end_profile(token)
        result.device_s, result.launches, result.by_kernel = (
            ended.device_s,
            ended.launches,
            ended.by_kernel,
        )
