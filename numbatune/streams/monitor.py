"""What every tuned launch reports to, once more than one stream or a profile is in use.

While a process has launched on one stream only, a launch compares its stream with that one and
goes on. From the second stream on, every launch is ordered after the last uses of its buffers
(:mod:`numbatune.streams.order`); one whose buffers stay on its stream passes a lock-free check
in the generated code. Torch and CuPy arrays launched on a stream other than their library's
current one are kept alive until that stream has passed the launch, so that dropping them cannot
hand their memory to the caching allocator while the kernel may still read it (cubecl's
deferred release), unless the driver orders the current stream's later work after the launch
(the legacy default stream and a blocking stream). A background thread (the keeper) records one
event per stream for them and lets them go once the device passed it, asking without waiting.
numba's own arrays need not be kept: ``cuMemFree`` waits for the device. While a profile is
open, every tuned launch is bracketed by two events.

Only what numbatune launches is seen here: work queued by other code on a stream is ordered
only by the ``__cuda_array_interface__`` rule (see :mod:`numbatune.launch.fastpath`) or by the
caller.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune.arraykinds import SIMULATOR, kind_of
from numbatune.arrays import buffer_of
from numbatune.errors import ProfileError
from numbatune.forking import renew_in_child
from numbatune.streams import events as _events
from numbatune.streams.handles import DEFAULT_STREAMS, LEGACY, numba_stream, raw_stream
from numbatune.streams.order import new_order
from numbatune.streams.profiles import Profile, ProfileToken


@dataclass(slots=True)
class _Launch:
    """One watched launch, as :meth:`Monitor.after` finishes it."""

    stream: int
    name: str | None
    buffers: tuple[Hashable, ...] = ()
    start: Any = None
    end: Any = None
    kept: tuple[Any, ...] = ()
    profiles: list[list[_Launch]] | tuple[()] = ()


#: How long the keeper sleeps between looks while arrays are kept (the launching thread has the
#: interpreter to itself meanwhile).
KEEPER_PERIOD_S = 0.001

#: How many streams the monitor knows before it first looks for those the program let go of
#: (then again at twice as many as it kept).
SWEEP_STREAMS = 64

#: ``sys.getrefcount`` of a stream object that only the monitor holds, as :meth:`Monitor.
#: _retire_unheld` reads it: the monitor's dict, the loop's variable, the call's argument.
_ONLY_THE_MONITORS = 3


class Monitor:
    """What every tuned launch reports to (the module says when). The generated launch code
    names only :attr:`order`, whose C methods check what they can without a lock and leave the
    rest to :meth:`before`, :meth:`after`, :meth:`hold` and :meth:`wait`; tests may give it the
    Python oracle as ``order``."""

    def __init__(self, events: Any = None, order: Any = None) -> None:
        self._events = events
        #: Which streams a launch must wait for; what the generated launch code reads.
        self.order = new_order(events) if order is None else order
        self.order.monitor = self
        self._profiles: dict[ProfileToken, list[_Launch]] = {}
        self._numbers = itertools.count(1)
        #: Held while the monitor or its order changes.
        self.lock = self.order.lock
        # Kept arrays behind their events (a pending list stays a list: a launch that found it
        # before the keeper took it may still add to it, and its event covers that launch).
        self._kept: list[tuple[Any, Sequence[Any]]] = []
        #: Arrays kept by launches on a stream numbatune holds, not yet behind an event, and the
        #: event the keeper will record for them (made here: the keeper has no CUDA context). A
        #: launch may add to a stream's list without the lock.
        self.pending: dict[int, tuple[Any, list[Any]]] = self.order.pending
        self._kept_ready = threading.Condition(self.lock)
        self._keeper_waiting = False
        # Events the keeper is done with, for the next launches that keep arrays.
        self._spare_events: list[Any] = []
        self._keeper: threading.Thread | None = None
        # Each stream seen, with the object that owns it (None for raw handles and torch's
        # current streams, which torch never destroys).
        self._streams: dict[int, Any] = {}
        # Streams that may be closed (raw handles, numba's external streams, cuda.core's), with
        # their contexts: their event is recorded right after each launch, so that a later wait
        # never touches the stream itself (on the others, when another stream first waits).
        self._eager: dict[int, int] = {}
        #: Whether each held stream is a blocking one, as far as asked; read by the generated code.
        self.blocking: dict[int, bool] = self.order.blocking
        # Streams the program let go of, being forgotten: the epoch each had when the order
        # recorded its event (Order.retire), and that event (None: nothing to wait for).
        self._retiring: dict[int, tuple[int, Any]] = {}
        self._sweep_at = SWEEP_STREAMS

    def after_fork_in_child(self) -> None:
        """A forked child's monitor starts afresh (its parent's streams and events are not its)."""
        self.__init__()  # type: ignore[misc]

    @property
    def stream(self) -> Any:
        """The one stream launched on so far; None before it and once ordering is on."""
        return self.order.stream

    @property
    def events(self) -> Any:
        if self._events is None:
            self._events = self.order.events = _events.backend()
        return self._events

    # -- launches -----------------------------------------------------------------------------

    def watch(
        self, stream: int, arrays: tuple[Any, ...], name: str | None, given: Any = None
    ) -> _Launch | None:
        """:meth:`before` for a launch over ``arrays``. With a ``name`` (a tuned kernel's
        launch) it keeps the arrays that need it (:meth:`keep`) and, once ordering is on, always
        returns what :meth:`after` needs. Without one (tuning's notice of a miss, whose copies it
        waits for itself) it returns None, having finished the launch at once."""
        arrays = tuple(a for a in arrays if a is not None)
        buffers = tuple(buffer_of(a) for a in arrays)
        launch = self.before(stream, buffers, name, given)
        if name is None:
            if launch is not None:  # a stream that may be closed: its event recorded now
                self.after(launch)
            return None
        kept = self.keep(stream, arrays)
        if kept or self.order.ordering:
            launch = launch or _Launch(stream, name, buffers)
            launch.kept = kept
        return launch

    def keep(self, stream: int, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
        """The arrays among ``arrays`` to keep alive past a launch on ``stream``: those of a
        library whose current stream is apart from it (the order's ``apart``)."""
        kept = []
        for array in arrays:
            kind = kind_of(type(array))
            producer = None if kind is None or kind.stream is None else kind.stream.of(array)
            if producer not in (None, stream) and self.order.apart(stream, producer, None, False):
                kept.append(array)
        return tuple(kept)

    def before(
        self, stream: int, buffers: tuple[Hashable, ...], name: str | None, given: Any = None
    ) -> _Launch | None:
        """Order a launch of ``name`` on ``stream`` that uses ``buffers`` (allocations) after
        their last uses; what :meth:`after` needs, or None (no profile open, a stream numbatune
        keeps alive). ``given``: the stream object the caller passed, kept with it."""
        with self.lock:
            if stream not in self._streams:
                self._see(stream, given)
            if self.order.stream is None and not self.order.ordering:
                self.order.stream = stream
                return None
            if not self.order.ordering:
                if self.events.capturing(stream):  # recorded into a graph: nothing runs now
                    return None
                self._start_ordering()
            quick = not self._profiles and stream not in self._eager
            self.order.use(stream, buffers, quick)
            if name is not None and self._profiles and not self.events.capturing(stream):
                launch = _Launch(stream, name, buffers, self.events.create(stream=stream))
                self.events.record(launch.start, stream)
                launch.profiles = list(self._profiles.values())
                return launch
            return _Launch(stream, name, buffers) if stream in self._eager else None

    def _see(self, stream: int, given: Any) -> None:
        """A stream met for the first time: checked, and kept (or recorded eagerly)."""
        context = self.events.context(stream)
        if given is None and stream not in DEFAULT_STREAMS:  # the arrays' library's current one
            given = _current_cupy_stream(stream)
        self._streams[stream] = None if isinstance(given, int) else given
        if stream not in DEFAULT_STREAMS and _may_close(given):
            self._eager[stream] = context
        if len(self._streams) > self._sweep_at:
            self._retire_unheld()

    def _retire_unheld(self) -> None:
        """The streams whose objects only the monitor holds start being forgotten, so that the
        state stays bounded however many streams come and go: the order records each one's event
        (:meth:`Order.retire`), and the keeper drops the stream once the device passed it
        (:meth:`_forget_retired`), the object last, so that its library destroys it only once
        nothing here names it. Raw handles, whose owners numbatune cannot see, are kept."""
        unheld, owner = [], None
        for stream in list(self._streams):
            owner = self._streams[stream]
            if owner is not None and sys.getrefcount(owner) <= _ONLY_THE_MONITORS:
                unheld.append(stream)
        del owner
        for stream in unheld:
            if stream not in self._retiring and stream != self.order.stream:
                retired = self.order.retire(stream, stream not in self._eager)
                if retired is not None:  # (None: being captured, it may retire later)
                    self._retiring[stream] = retired[1], retired[0]
        self._sweep_at = max(SWEEP_STREAMS, 2 * (len(self._streams) - len(self._retiring)))
        self._wake_keeper()

    def after(self, launch: _Launch) -> None:
        """Finish a launch :meth:`before` returned, once it is queued: its buffers are noted
        again (another thread may have ended its stream's epoch meanwhile, by an event that does
        not cover the launch)."""
        with self.lock:
            if self.order.ordering:
                self.order.use(launch.stream, launch.buffers)
                if launch.stream in self._eager:
                    self.order.launched(launch.stream)
            if launch.profiles:
                launch.end = self.events.create(stream=launch.stream)
                self.events.record(launch.end, launch.stream)
                for records in launch.profiles:
                    records.append(launch)
        if launch.kept:
            self.hold(launch.stream, launch.kept)
            launch.kept = ()

    def hold(self, stream: int, arrays: tuple[Any, ...]) -> None:
        """Keep ``arrays`` alive until the device passes what is queued on ``stream`` now
        (nothing while it is captured into a graph, whose owner keeps what its replays use)."""
        if self.events.capturing(stream):
            return
        with self.lock:
            if self._held(stream):  # the keeper records its event when it next looks
                pending = self.pending.get(stream)
                if pending is None:
                    pending = self.pending[stream] = (self._spare_event(stream), [])
                pending[1].extend(arrays)
            else:
                self.events.record(event := self._spare_event(stream), stream)
                self._kept.append((event, arrays))
            self._wake_keeper()

    def _wake_keeper(self) -> None:
        """Start the keeper, or wake it where it waits for work (under the lock)."""
        if self._keeper is None:
            self._keeper = threading.Thread(
                target=self._release_kept, name="numbatune-release", daemon=True
            )
            self._keeper.start()
        elif self._keeper_waiting:
            self._kept_ready.notify()

    def _held(self, stream: int) -> bool:
        """Whether numbatune keeps ``stream`` alive (a default stream, or one whose object it
        holds): the keeper may record an event on it later."""
        return stream not in self._eager and (
            stream in DEFAULT_STREAMS or self._streams.get(stream) is not None
        )

    def _spare_event(self, stream: int) -> Any:
        spare = self._spare_events
        return spare.pop() if spare else self.events.create(timing=False, stream=stream)

    def wait(self, waiting: int, producer: int, given: Any = None) -> None:
        """Make stream ``waiting`` wait, on the device, for all queued so far on ``producer``,
        unless the driver orders the two already (the order's ``apart``; ``given``: the stream
        object of ``waiting``, kept with it)."""
        with self.lock:
            if waiting not in self._streams:
                self._see(waiting, given)
            if self.events.capturing(waiting) or self.events.capturing(producer):
                return  # a graph's order is its capture's (see numbatune.streams.order)
            if producer in LEGACY and self._held(waiting) and waiting not in self.blocking:
                self.blocking[waiting] = self.events.blocking(waiting)
            if self.order.apart(waiting, producer, None, False):
                self.events.wait(waiting, producer)

    def _start_ordering(self) -> None:
        """A second stream or a profile: from now on every launch is watched; each other
        stream's first launch waits for what the first stream queued. Where that one may be
        closed (its launches recorded no event while it was the only one), the host waits once
        for its context's work instead."""
        first, self.order.stream, self.order.ordering = self.order.stream, None, True
        if first in self._eager:
            self.events.synchronize_context(self._eager[first])
        elif first is not None:
            self.order.use(first, ())
            self.order.barrier()

    # -- deferred release ---------------------------------------------------------------------

    def _release_kept(self) -> None:
        """The keeper's loop, every :data:`KEEPER_PERIOD_S` while there is work; its event
        queries leave other threads' graph captures valid (``relax_capture``)."""
        self.events.relax_capture()
        while True:
            with self.lock:
                while not self._kept and not self.pending and not self._retiring:
                    self._keeper_waiting = True
                    self._kept_ready.wait()
                self._keeper_waiting = False
                released = self._look()
            del released  # the arrays go, outside the lock
            time.sleep(KEEPER_PERIOD_S)

    def _look(self) -> list[Sequence[Any]]:
        """One look of the keeper (under the lock): the pending streams' events recorded (not
        on a stream being captured: the event would be the graph's), and the arrays whose events
        the device passed, which it lets go."""
        for stream in list(self.pending):
            if not self.events.capturing(stream):
                event, arrays = self.pending.pop(stream)
                self.events.record(event, stream)
                self._kept.append((event, arrays))
        released, still = [], []
        for event, arrays in self._kept:
            if self.events.passed(event):
                released.append(arrays)
                self._spare_events.append(event)
            else:
                still.append((event, arrays))
        self._kept = still
        if self._retiring:
            released.append(self._forget_retired())
        return released

    def _forget_retired(self) -> list[Any]:
        """Drop the retiring streams whose events the device has passed and that no launch
        used since; their objects, for the keeper to let go of outside the lock."""
        passed = {}
        for stream, (epoch, event) in list(self._retiring.items()):
            if stream not in self.pending and (event is None or self.events.passed(event)):
                passed[stream] = epoch  # (pending arrays: their event is recorded first)
                del self._retiring[stream]
        owners = []
        for stream, event in self.order.forget(passed).items():
            owners.append(self._streams.pop(stream, None))
            self._eager.pop(stream, None)
            self.blocking.pop(stream, None)
            if event is not None:
                self.events.destroy(event)
        return owners

    def kept_arrays(self) -> int:
        """How many arrays are kept alive for launches the device has maybe not passed."""
        with self.lock:
            pending = sum(len(objects) for _, objects in self.pending.values())
            return pending + sum(len(objects) for _, objects in self._kept)

    # -- profiles -----------------------------------------------------------------------------

    def start_profile(self) -> ProfileToken:
        with self.lock:
            token = ProfileToken(next(self._numbers))
            self._profiles[token] = []
            if not self.order.ordering:
                self._start_ordering()
            # Every launch is watched while a profile is open. The quick streams' open epochs
            # are marked used first, so that a barrier still waits for them.
            for stream in list(self.order.quick):
                self.order.use(stream, ())
            self.order.quick.clear()
            return token

    def end_profile(self, token: ProfileToken) -> Profile:
        if not isinstance(token, ProfileToken):
            raise ProfileError(
                f"end_profile: token must be what numbatune.start_profile() returned, got {token!r}"
            )
        with self.lock:
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
            with self.lock:
                launch.profiles = [held for held in launch.profiles if held is not records]
                if not launch.profiles:  # no open profile holds its events any more
                    self.events.destroy(launch.start)
                    self.events.destroy(launch.end)
        return profile


def _may_close(given: Any) -> bool:
    """Whether the stream ``given`` names may be destroyed while numbatune holds ``given``: a
    raw handle, numba's external stream, torch's and CuPy's ``ExternalStream``, another library's
    ``__cuda_stream__`` object (cuda.core closes its streams when asked); not torch's and CuPy's
    own streams, which their objects keep."""
    if isinstance(given, int):
        return True
    if _NUMBA_STREAM is not None and isinstance(given, _NUMBA_STREAM):
        return bool(given.external)
    cls = type(given)
    if cls.__module__.partition(".")[0] in _ARRAY_LIBRARIES:
        return cls.__name__ == "ExternalStream"
    return hasattr(given, "__cuda_stream__")


#: The array libraries whose stream objects keep their streams alive (but their ExternalStream).
_ARRAY_LIBRARIES = ("torch", "cupy")


def _current_cupy_stream(stream: int) -> Any:
    """CuPy's current stream object where its handle is ``stream``, else None: CuPy destroys a
    stream with its object, so numbatune holds it as it holds those given (torch never destroys
    its streams)."""
    cupy = sys.modules.get("cupy")
    current = None if cupy is None else cupy.cuda.get_current_stream()
    return current if current is not None and current.ptr == stream else None


_NUMBA_STREAM = None if SIMULATOR else cuda.cudadrv.driver.Stream


monitor = Monitor()
renew_in_child(monitor)


def captured(stream: Any, args: tuple[Any, ...]) -> bool:
    """Whether a call's launch on ``stream`` (as a call takes it: None for the current stream of
    the arguments' library) would be captured into a CUDA graph."""
    if SIMULATOR:
        return False
    return monitor.events.capturing(raw_stream(numba_stream(stream, args)))


def start_profile() -> ProfileToken:
    """Start measuring the device time of tuned launches.

    Every tuned launch made until the profile ends, on any stream and thread, is timed by a
    pair of CUDA events. Profiles may overlap.

    Returns
    -------
    ProfileToken
        The token to end the profile with, `end_profile(token)`.
    """
    return monitor.start_profile()


def end_profile(token: ProfileToken) -> Profile:
    """End a profile, waiting for its launches, and return what it saw.

    Parameters
    ----------
    token
        What `start_profile` returned.

    Returns
    -------
    Profile
        The device time of the tuned launches made while it was open.

    Raises
    ------
    ProfileError
        The token is not open: ended already, or not one `start_profile` returned.
    """
    return monitor.end_profile(token)


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Profile the tuned launches of a ``with`` block: `start_profile` and `end_profile`.

    Yields
    ------
    Profile
        Empty inside the block; it holds the figures once the block ends.

    Examples
    --------
    ```python
    with nt.profile() as p:
        saxpy(a, x, y, out)
    print(p.launches, p.device_s, p.by_kernel)
    ```
    """
    token = start_profile()
    result = Profile()
    try:
        yield result
    finally:
        vars(result).update(vars(end_profile(token)))
