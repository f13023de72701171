"""Tuned launches on several streams: device-side ordering, deferred release and profiles.

Modelled on cubecl-runtime's multi-stream layer. Each stream has a *cursor*, the number of tuned
launches queued on it; each buffer (an allocation: a torch storage, a CuPy memory block, a numba
allocation) remembers the stream and cursor of its last use. A launch on stream B that uses a
buffer last used on stream A at a cursor B has not yet waited for makes B wait for A on the
device (an event recorded on A, ``cuStreamWaitEvent`` on B); the host never waits. Buffers used
on one stream only add no waits, and while a process has launched on one stream only none of
this runs at all: the launch compares its stream with that one and goes on.

Torch and CuPy arrays launched on a stream other than their library's current stream are kept
alive until that stream has passed the launch (an event, waited for by a background thread),
so dropping them cannot hand their memory to the caching allocator while the kernel may still
read it (cubecl's deferred release). numba's own arrays need not be: numba frees them with
``cuMemFree``, which waits for the device.

Profiles (cubecl's ``start_profile``/``end_profile``): while one is open every tuned launch is
bracketed by two events; ending it sums the device time of the launches made while it was open.
Profiles may nest and overlap.

Only what numbatune launches is seen here: work queued by other code on a stream is ordered
only by the ``__cuda_array_interface__`` rule (see :mod:`numbatune.launch`) or by the caller.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from numbatune.arrays import SIMULATOR, library_of


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
        for buffer in buffers:
            last = self._last_use.get(buffer)
            if last is not None:
                self._wait_for(stream, *last)
            self._last_use[buffer] = (stream, cursor)
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


class _DriverEvents:
    """CUDA events through cuda-bindings, on raw stream handles."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._driver = driver
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
        self._checked(self._driver.cuEventRecord(event, stream))

    def wait(self, waiting: int, producer: int) -> None:
        """``waiting`` waits for what is queued on ``producer`` (callers hold the monitor lock)."""
        self.record(self._wait_event, producer)
        self.wait_event(waiting, self._wait_event)

    def wait_event(self, waiting: int, event: Any) -> None:
        """``waiting`` waits for the work before ``event``'s latest record."""
        self._checked(self._driver.cuStreamWaitEvent(waiting, event, 0))

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


class ProfileError(ValueError):
    """A profile token that is not open: ended already, or not made by :func:`start_profile`."""


class ProfileToken:
    """What :func:`start_profile` returns and :func:`end_profile` takes; nothing else."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"<numbatune.ProfileToken {self.number}>"


@dataclass
class Profile:
    """The device time of the tuned launches made while a profile was open."""

    #: Total device time of those launches, in seconds (each from its own pair of events).
    device_s: float = 0.0
    #: Number of those launches.
    launches: int = 0
    #: Device time in seconds by tuned kernel name.
    by_kernel: dict[str, float] = field(default_factory=dict)


@dataclass
class _Launch:
    """One watched launch, as :meth:`Monitor.after` finishes it."""

    stream: int
    name: str | None
    cursor: int = 0
    start: Any = None
    end: Any = None
    kept: tuple[Any, ...] = ()
    profiles: list[list[_Launch]] = field(default_factory=list)


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
        self._kept_ready = threading.Condition(self._lock)
        self._keeper: threading.Thread | None = None
        # Each stream seen, with the object that owns it (None for raw handles and the
        # libraries' current streams, which their libraries keep).
        self._streams: dict[int, Any] = {}
        # Each tracked stream's event, recorded after numbatune's latest launch on it.
        self._latest: dict[int, Any] = {}

    @property
    def events(self) -> Any:
        if self._events is None:
            self._events = _SimulatorEvents() if SIMULATOR else _DriverEvents()
        return self._events

    # -- launches -----------------------------------------------------------------------------

    def before(
        self, stream: int, arrays: tuple[Any, ...], name: str | None, given: Any = None
    ) -> _Launch | None:
        """Order a launch of ``name`` on ``stream`` over ``arrays`` after their last uses;
        returns what :meth:`after` needs, or None when it needs nothing. ``given`` is the
        stream object the caller passed, kept alive so that ``stream`` stays valid while
        later launches may wait for it."""
        with self._lock:
            if stream not in self._streams:
                self.events.check(stream)
                self._streams[stream] = None if isinstance(given, int) else given
            if self.stream is None:
                self.stream = stream
                return None
            if self._order is None:
                self._start_ordering()
            assert self._order is not None
            cursor = self._order.use(stream, [buffer_of(a) for a in arrays if a is not None])
            if name is None:
                return None
            launch = _Launch(stream, name, cursor)
            if self._profiles:
                launch.start = self.events.create()
                self.events.record(launch.start, stream)
                launch.profiles = list(self._profiles.values())
            launch.kept = tuple(a for a in arrays if _needs_keeping(a, stream))
            return launch

    def after(self, launch: _Launch) -> None:
        """Finish a launch :meth:`before` returned, once it is queued."""
        with self._lock:
            if self._order is not None:
                self._order.launched(launch.stream, launch.cursor)
            if launch.profiles:
                launch.end = self.events.create()
                self.events.record(launch.end, launch.stream)
                for records in launch.profiles:
                    records.append(launch)
            if launch.kept:
                event = self.events.create(timing=False)
                self.events.record(event, launch.stream)
                self._kept.append((event, launch.kept))
                launch.kept = ()
                self._start_keeper()
                self._kept_ready.notify()

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

    def _start_ordering(self) -> None:
        """A second stream or a profile: from now on every launch is watched and every buffer
        tracked; what the first stream queued before is waited for by each other stream's
        first launch."""
        first = self.stream
        self.stream = _ANY
        self._order = StreamOrder(self._wait_for_event, self._record_event)
        if first is not None:
            self._order.use(first, ())
            self._order.barrier()

    # -- deferred release ---------------------------------------------------------------------

    def _start_keeper(self) -> None:
        if self._keeper is None:
            self._keeper = threading.Thread(
                target=self._release_kept, name="numbatune-release", daemon=True
            )
            self._keeper.start()

    def _release_kept(self) -> None:
        while True:
            with self._lock:
                while not self._kept:
                    self._kept_ready.wait()
                event = self._kept[0][0]
            self.events.synchronize(event)  # without the lock: launches go on meanwhile
            with self._lock:
                self._kept.popleft()
            self.events.destroy(event)

    def kept_arrays(self) -> int:
        """How many arrays are kept alive for launches the device has maybe not passed."""
        with self._lock:
            return sum(len(objects) for _, objects in self._kept)

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


class StreamError(ValueError):
    """A stream that cannot take numbatune's launches: destroyed, or of another context."""


def check_stream(stream: int) -> None:
    """Raise :class:`StreamError` unless ``stream`` is a live stream of the current context
    (0, 1 and 2, the default streams, always are)."""
    if SIMULATOR or stream in (0, 1, 2):
        return
    from cuda.bindings import driver
    from numba import cuda

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


def _needs_keeping(array: Any, stream: int) -> bool:
    """True for a torch or CuPy array launched on a stream other than its library's current
    one: its caching allocator would hand its memory out again on that one when it is freed."""
    from numbatune.launch import current_stream

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


def memory_usage() -> dict[str, int]:
    """Device memory in bytes: the device's ``total`` and ``free``, and where they are known,
    ``torch_allocated``/``torch_reserved`` and ``cupy_used``/``cupy_held`` (those libraries'
    caching allocators, when already imported) and ``kept_arrays`` (arrays numbatune keeps
    alive for launches in flight)."""
    from numba import cuda

    usage: dict[str, int] = {}
    if not SIMULATOR:
        free, total = cuda.current_context().get_memory_info()
        usage.update(total=int(total), free=int(free))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        usage["torch_allocated"] = int(torch.cuda.memory_allocated())
        usage["torch_reserved"] = int(torch.cuda.memory_reserved())
    cupy = sys.modules.get("cupy")
    if cupy is not None and not SIMULATOR:
        pool = cupy.get_default_memory_pool()
        usage["cupy_used"] = int(pool.used_bytes())
        usage["cupy_held"] = int(pool.total_bytes())
    usage["kept_arrays"] = monitor.kept_arrays()
    return usage


def memory_cleanup() -> None:
    """Give cached device memory back: numba's pending frees, and the cached blocks of torch's
    and CuPy's allocators where those libraries are imported. Arrays still kept for launches
    in flight stay until the device passes them."""
    from numba import cuda

    if not SIMULATOR:
        cuda.current_context().deallocations.clear()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None and not SIMULATOR:
        cupy.get_default_memory_pool().free_all_blocks()
