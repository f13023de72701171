"""Streams: device-side ordering across streams, deferred release, profiles, memory.

The bookkeeping is tested under the simulator with a recording stand-in for CUDA events; the
GPU tests show real concurrency, ordering, release under torch's and CuPy's caching allocators,
and profiles of real launches.
"""

import faulthandler
import os
import subprocess
import sys
import threading
import time
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

import numbatune as nt
from numbatune import _native
from numbatune.arrays import SIMULATOR
from numbatune.cache.tunecache import WinnerTable
from numbatune.config import Isolate
from numbatune.streams.monitor import Monitor
from numbatune.streams.order import LIMIT, new_order
from tests.kernels import non_blocking_stream, open_gate, wait_for_gate
from tests.order_reference import StreamOrder


def _order_type(implementation):
    """The Python reference or the C extension's order (built wherever the tests are installed)."""
    if implementation == "python":
        return StreamOrder
    return _native.Order


@pytest.fixture(params=["python", "c"])
def order_type(request):
    return _order_type(request.param)


def _order(order_type, limit=LIMIT):
    """An order whose events note each wait as (waiting, producer) and each record."""
    events = CountingEvents()
    return order_type(events, limit), events.waits


def test_arrays_used_on_their_own_stream_add_no_waits(order_type):
    order, waits = _order(order_type)
    for _ in range(3):
        order.use(1, ["x"])
        order.use(2, ["y"])
    assert waits == []


def test_a_launch_waits_once_for_the_stream_that_last_used_its_array(order_type):
    order, waits = _order(order_type)
    order.use(1, ["x"])
    order.use(2, ["x", "y"])
    assert waits == [(2, 1)]
    order.use(2, ["x"])  # stream 2 has seen that use already
    order.use(1, ["z"])
    order.use(2, ["y"])
    assert waits == [(2, 1)]


def test_a_wait_covers_every_earlier_use_on_the_producer(order_type):
    order, waits = _order(order_type)
    order.use(1, ["x"])
    order.use(1, ["y"])
    order.use(2, ["y"])  # waits for all queued on 1 so far, x's use included
    order.use(2, ["x"])
    assert waits == [(2, 1)]
    order.use(1, ["x"])  # x was last used on 2: 1 waits for it, and then 2 for 1 again
    order.use(2, ["x"])
    assert waits == [(2, 1), (1, 2), (2, 1)]


def test_a_producer_stream_is_touched_only_right_after_a_launch_on_it(order_type):
    """Its event is recorded when its launch is queued; a later waiter uses that event, so a
    stream destroyed meanwhile is never handed to the driver again."""
    order, waits = _order(order_type)
    order.use(1, ["x"])
    order.launched(1)
    order.use(2, ["x"])
    assert order.events.records == [1] and waits == [(2, 1)]


def test_forgetting_buffers_past_the_limit_keeps_the_ordering(order_type):
    order, waits = _order(order_type, limit=4)
    for buffer in range(6):
        order.use(1, [buffer])
    assert len(order.last_use) <= 4
    order.use(2, ["new"])  # buffers were forgotten: stream 2 waits for all of stream 1
    assert waits == [(2, 1)]


class _Lock:
    """A lock that notes when it is taken and given back (as ``with`` or by its methods)."""

    def __init__(self):
        self.lock, self.taken = threading.Lock(), []

    def acquire(self):
        self.lock.acquire()
        self.taken.append("acquire")

    def release(self):
        self.taken.append("release")
        self.lock.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exception):
        self.release()


def test_a_launch_whose_buffers_stay_on_its_stream_needs_no_bookkeeping_until_one_moves(order_type):
    order, waits = _order(order_type)
    lock = _Lock()
    order.use(1, ["x"])
    order.use(2, ["y"])
    assert order.quick_use(1, ("x",), lock) is None  # not asked for: launches go through use()
    order.use(1, ["x"], quick=True)
    order.use(2, ["y"], quick=True)
    entry = order.quick.get(1)
    assert order.quick_use(1, ("x",), lock) is entry and order.quick_use(2, ("y",), lock)
    assert order.quick_use(1, ("x", "new"), lock) is entry  # never used: noted as used here
    assert waits == [] and lock.taken == []
    assert order.quick_use(2, ("new",), lock) is order.quick.get(2)  # last used on stream 1
    assert waits == [(2, 1)] and lock.taken == ["acquire", "release"]
    # The wait ended stream 1's epoch: x's last use is in an epoch stream 2 waited for, so
    # the next use of x on 1 must be noted again (else 2 would skip waiting for it).
    assert order.quick.get(1) is not entry
    order.quick_use(1, ("x",), lock)
    assert len(lock.taken) == 4
    order.quick_use(1, ("x",), lock)
    assert len(lock.taken) == 4
    order.barrier()
    assert order.quick_use(1, ("x",), lock) is None


def test_quick_use_gives_the_lock_back_and_passes_on_what_the_events_raise(order_type):
    class Failing(CountingEvents):
        def wait_event(self, waiting, event):
            raise RuntimeError("cuStreamWaitEvent failed")

    order, lock = order_type(Failing(), LIMIT), _Lock()
    order.use(1, ["x"], quick=True)
    order.use(2, [], quick=True)
    with pytest.raises(RuntimeError, match="cuStreamWaitEvent"):
        order.quick_use(2, ("x",), lock)
    assert lock.taken == ["acquire", "release"]
    lock = new_order().lock  # the monitor's
    order.use(3, [], quick=True)
    with pytest.raises(RuntimeError, match="cuStreamWaitEvent"):
        order.quick_use(3, ("x",), lock)
    assert not lock.locked()


@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.lists(st.sampled_from("abcde"), max_size=3)),
        max_size=40,
    )
)
def test_skipping_use_where_the_quick_check_passes_waits_exactly_as_using_every_launch(launches):
    for implementation in ("python", "c"):
        always, always_waits = _order(_order_type(implementation))
        quick, quick_waits = _order(_order_type(implementation))
        for stream, buffers in launches:
            always.use(stream, buffers)
            if quick.quick_use(stream, tuple(buffers), threading.Lock()) is None:
                quick.use(stream, buffers, quick=True)
        assert quick_waits == always_waits


_STEPS = st.one_of(
    st.tuples(
        st.just("use"),
        st.integers(1, 3),
        st.lists(st.sampled_from("abcdef"), max_size=3),
        st.booleans(),
    ),
    st.tuples(
        st.just("quick_use"),
        st.integers(1, 3),
        st.lists(st.sampled_from("abcdef"), max_size=3).map(tuple),
        st.just(threading.Lock()),
    ),
    st.tuples(st.just("launched"), st.integers(1, 3)),
    st.tuples(st.just("barrier")),
)


@given(st.lists(_STEPS, max_size=60), st.integers(2, 8))
def test_the_c_extensions_order_does_what_the_python_reference_does(steps, limit):
    """The same calls to the events in the same order, and the same state after each step."""
    orders = [_order(_order_type(implementation), limit)[0] for implementation in ("python", "c")]
    for step in steps:
        for order in orders:
            getattr(order, step[0])(*step[1:])
        _assert_alike(*orders)


def _assert_alike(reference, made):
    """The same calls to the events in the same order, and the same state, in both orders."""
    assert made.events.waits == reference.events.waits
    assert made.events.records == reference.events.records
    assert made.last_use == reference.last_use and made.quick == reference.quick


def test_the_c_extensions_order_passes_on_what_its_events_raise():
    class Failing(CountingEvents):
        def wait_event(self, waiting, event):
            raise RuntimeError("cuStreamWaitEvent failed")

    order = _order_type("c")(Failing(), LIMIT)
    order.use(1, ["x"])
    with pytest.raises(RuntimeError, match="cuStreamWaitEvent"):
        order.use(2, ["x"])
    with pytest.raises(RuntimeError, match="never set"):
        _order_type("c")(None, LIMIT).launched(1)


def test_a_new_order_is_the_c_extensions():
    assert type(new_order()) is _order_type("c")


def _stream_class(module):
    class Stream:
        reads = 0

        def __cuda_stream__(self):
            Stream.reads += 1
            return (0, 1234)

    Stream.__module__ = module
    return Stream


def test_a_library_streams_handle_is_read_once_and_a_closable_ones_every_time():
    from numbatune.rawstreams import stream_handle

    for module, reads in [("torch.cuda.streams", 1), ("cuda.core.experimental._stream", 3)]:
        stream = _stream_class(module)()
        assert [stream_handle(stream) for _ in range(3)] == [1234] * 3
        assert type(stream).reads == reads, module


def test_a_numpy_integer_is_taken_as_a_raw_stream_handle():
    from numbatune.rawstreams import stream_handle

    handle = stream_handle(np.int64(1234))
    assert handle == 1234 and type(handle) is int


class RecordingEvents:
    """Events that record what is asked of them; ``synchronize`` blocks until released."""

    def __init__(self):
        self.waits = []
        self.synchronized = []
        self.released = threading.Event()
        self.created = 0
        #: The streams being captured into a graph.
        self.captured = set()

    def create(self, timing=True, stream=None):
        self.created += 1
        return {"time": 0.0}

    def record(self, event, stream):
        event["stream"] = stream

    def wait(self, waiting, producer):
        self.waits.append((waiting, producer))

    def wait_event(self, waiting, event):
        self.waits.append((waiting, event["stream"]))

    def synchronize(self, event):
        self.released.wait(timeout=30)

    def capturing(self, stream):
        return stream in self.captured

    def relax_capture(self):
        pass

    def blocking(self, stream):
        return False

    def context(self, stream):
        return 100 + stream

    def synchronize_context(self, context):
        self.synchronized.append(context)

    def passed(self, event):
        return self.released.is_set()

    def elapsed_s(self, start, end):
        return 0.5

    def destroy(self, event):
        pass


def test_the_first_launch_on_a_second_stream_waits_for_the_first_stream():
    events = RecordingEvents()
    monitor = Monitor(events)
    x, y, z = (cuda.device_array(4, np.float32) for _ in range(3))
    monitor.watch(7, (x,), "k")  # one stream so far: nothing tracked
    assert monitor.stream == 7 and events.waits == []
    monitor.watch(9, (y,), "k")
    assert events.waits == [(9, 7)]
    monitor.watch(7, (z,), "k")
    monitor.watch(9, (y,), "k")
    assert events.waits == [(9, 7)]
    monitor.watch(9, (x[1:],), "k")  # a view of x, used on 7 before 9's first wait
    assert events.waits == [(9, 7)]
    monitor.watch(7, (y[:2],), "k")  # a view of y, last used on 9
    assert events.waits == [(9, 7), (7, 9)]


class CountingEvents(RecordingEvents):
    """RecordingEvents that also count the events recorded, by stream."""

    def __init__(self):
        super().__init__()
        self.records = []

    def record(self, event, stream):
        super().record(event, stream)
        self.records.append(stream)


def _numba_path_launch(monitor, stream, array, given=None):
    """What numba's launch path (``launch.numbalaunch``) tells the monitor of a launch."""
    if stream == monitor.stream:  # the one stream in use: nothing to tell
        return
    launch = monitor.watch(stream, (array,), "k", given=given)
    if launch:
        monitor.after(launch)


class TouchingEvents(CountingEvents):
    """CountingEvents that also note the streams events are made for."""

    def __init__(self):
        super().__init__()
        self.made_for = []

    def create(self, timing=True, stream=None):
        self.made_for.append(stream)
        return super().create(timing, stream)


@pytest.mark.parametrize("order", ["C extension", "Python"])
@pytest.mark.parametrize("case", ["a miss", "a launch, then a barrier"])
def test_a_stream_that_may_be_closed_is_never_touched_after_its_last_use(order, case):
    """A raw stream's event is recorded right after each use of it, so that later waits touch
    only the event: the stream may be gone (the driver crashed on a closed stream's handle).
    Before, tuning's notice of a miss left its epoch open, and a barrier waited for the empty
    epoch after its last launch: both recorded on it later."""
    events = TouchingEvents()
    monitor = Monitor(events, StreamOrder(events) if order == "Python" else None)
    x, y = cuda.device_array(4, np.float32), cuda.device_array(4, np.float32)
    held = cuda.stream()
    _numba_path_launch(monitor, 7, y, given=held)
    _numba_path_launch(monitor, 8, y, given=cuda.stream())  # ordering is on
    if case == "a miss":
        monitor.watch(9, (x,), None, given=9)  # raw stream 9: numbatune cannot hold it
    else:
        _numba_path_launch(monitor, 9, x, given=9)
        monitor.order.barrier()
    recorded, made = len(events.records), len(events.made_for)
    # stream 9 is closed now; x is used on 7, which waits for 9's last use of it
    _numba_path_launch(monitor, 7, x, given=held)
    assert 9 not in events.records[recorded:] and 9 not in events.made_for[made:]
    assert (7, 9) in events.waits  # through 9's event


@pytest.mark.parametrize("order", ["C extension", "Python"])
@pytest.mark.parametrize("then", ["a second stream", "a profile"])
def test_a_first_stream_that_may_be_closed_is_never_touched_once_ordering_starts(order, then):
    """The only stream a process has launched on, a raw handle, recorded no event (one stream
    needs none) and may be closed before a second stream or a profile starts the ordering: the
    host then waits once for the work of its context instead. Before, the second stream's
    first launch recorded an event on the closed stream."""
    events = TouchingEvents()
    monitor = Monitor(events, StreamOrder(events) if order == "Python" else None)
    x = cuda.device_array(4, np.float32)
    for _ in range(2):
        _numba_path_launch(monitor, 9, x, given=9)
    assert events.records == [] and events.synchronized == []
    # stream 9 is closed now
    if then == "a profile":
        monitor.start_profile()
    _numba_path_launch(monitor, 7, x, given=cuda.stream())
    assert 9 not in events.records and 9 not in events.made_for
    assert events.synchronized == [events.context(9)] and events.waits == []


@pytest.mark.parametrize("order", ["C extension", "Python"])
def test_a_profile_started_between_a_quick_use_and_a_barrier_keeps_that_use_ordered(order):
    """A quick stream notes its arrays' uses without the lock and without marking itself used;
    a profile empties the quick streams, and a barrier that follows must still cover what they
    noted. Before, it waited only for their epoch before, and a later launch that reads the
    array on another stream was not ordered after the write."""
    events = CountingEvents()
    monitor = Monitor(events, StreamOrder(events) if order == "Python" else None)
    order_ = monitor.order
    order_.use(1, ["x"], quick=True)
    order_.use(2, ["x"])  # 2 waits for 1's epoch so far
    order_.quick_use(1, ("z",), monitor.lock)  # z written on 1, in its open epoch
    monitor.start_profile()
    order_.barrier()  # (as when the buffers remembered reach the limit)
    waits = len(events.waits)
    order_.use(2, ["z"])  # reads z on 2: after 1's write of it
    assert events.waits[waits:] == [(2, 1)]


def test_with_two_streams_in_use_a_launch_on_its_arrays_own_stream_records_nothing():
    events = CountingEvents()
    monitor = Monitor(events)
    x, y = cuda.device_array(4, np.float32), cuda.device_array(4, np.float32)
    monitor.watch(7, (x,), "k", given=cuda.stream())
    monitor.watch(9, (y,), "k", given=cuda.stream())  # two streams: ordering is on
    recorded = len(events.records)
    for _ in range(5):  # x stays on 7, y on 9: no event before or after the launch
        _numba_path_launch(monitor, 7, x)
        _numba_path_launch(monitor, 9, y)
    assert len(events.records) == recorded and events.waits == [(9, 7)]
    monitor.watch(9, (x,), "k")  # x moves to 9: 7's event is recorded now, for this wait
    assert events.records[-1] == 7 and events.waits[-1] == (9, 7)


def test_a_raw_stream_handle_gets_its_event_recorded_right_after_each_launch():
    events = CountingEvents()
    monitor = Monitor(events)
    x = cuda.device_array(4, np.float32)
    monitor.watch(7, (x,), "k", given=cuda.stream())
    launch = monitor.watch(1234, (x,), "k", given=1234)  # may be destroyed: never touched later
    assert launch is not None
    monitor.after(launch)
    assert events.records[-1] == 1234


def _stream_object(module, name):
    """A stand-in for a stream object of ``module`` named ``name`` (torch's and CuPy's
    streams have ``__cuda_stream__``, as cuda.core's do)."""
    cls = type(name, (), {"__module__": module, "__cuda_stream__": lambda self: (0, 4321)})
    return cls()


@pytest.mark.parametrize(
    ("module", "name", "eager"),
    [("torch.cuda.streams", "Stream", False), ("cupy.cuda.stream", "Stream", False),
     ("torch.cuda.streams", "ExternalStream", True), ("cupy.cuda.stream", "ExternalStream", True),
     ("cuda.core.experimental", "Stream", True)],
)  # fmt: skip
def test_a_librarys_own_stream_is_held_and_quick_and_one_that_may_close_is_recorded_eagerly(
    module, name, eager
):
    """torch's and CuPy's own streams live as long as their object, which numbatune holds: their
    launches take the quick path, and their events wait until another stream needs them. A
    stream that may be destroyed under numbatune (their ExternalStream, cuda.core's) has its
    event recorded right after each launch instead, and is never quick."""
    events = CountingEvents()
    monitor = Monitor(events)
    x = cuda.device_array(4, np.float32)
    monitor.watch(7, (cuda.device_array(4, np.float32),), "k", given=cuda.stream())
    launch = monitor.watch(4321, (x,), "k", given=_stream_object(module, name))
    if launch is not None:
        monitor.after(launch)
    assert (4321 in monitor.order.quick) is not eager
    assert (events.records[-1:] == [4321]) is eager


@pytest.mark.parametrize("given", [1234, "held"], ids=["raw handle", "held stream"])
def test_a_launch_whose_streams_epoch_another_thread_ended_before_it_was_queued_is_waited_for(
    given,
):
    """Thread A notes x on stream 1234 (a raw handle, recorded after each launch, or a stream
    numbatune holds); before A's launch is queued, thread B's launch on 7 uses x and so ends
    1234's epoch, with an event that cannot cover A's launch. A later launch on 7 that uses x
    must still wait for 1234. (Numba's launch path: watch, launch, after.)"""
    events = CountingEvents()
    monitor = Monitor(events)
    x = cuda.device_array(4, np.float32)
    monitor.watch(7, (cuda.device_array(4, np.float32),), "k", given=cuda.stream())
    given = cuda.stream() if given == "held" else given
    launch = monitor.watch(1234, (x,), "k", given=given)  # thread A, up to its launch
    monitor.watch(7, (x,), "k")  # thread B, meanwhile
    if launch:  # thread A's launch is queued
        monitor.after(launch)
    waits = len(events.waits)
    monitor.watch(7, (x,), "k")  # after thread A's call returned
    assert events.waits[waits:] == [(7, 1234)]


class _Interrupted:
    """A monitor whose :meth:`before` runs ``then`` (once) right after the bookkeeping."""

    def __init__(self, monitor):
        self.monitor, self.then = monitor, None
        monitor.order.monitor = self  # (what the order leaves to its monitor comes here)

    def __getattr__(self, name):
        return getattr(self.monitor, name)

    def before(self, *args):
        launch = self.monitor.before(*args)
        then, self.then = self.then, None
        if then:
            then()
        return launch


def _ordered_launch(monitor, library_array=False):
    """A fast path's ordering around ``launch(stream)`` (the C ``Launcher``'s), for one buffer
    ``x`` launched on ``stream`` (given as ``given``); with ``library_array``, ``x`` is also an
    array of a library whose current stream is 0."""
    launches, streams = [], []

    class Fallbacks:  # (what the Launcher asks Python for: here, the stream's handle)
        def handle(self, given):
            return streams[-1]

        def kept(self, args, unordered):
            return args if unordered & 1 else ()

    winners = WinnerTable()
    winners["key"] = SimpleNamespace(index=0, params={})
    launcher = _native.Launcher(
        winners=winners, functions={0: 1}, config=lambda *args: (1, 1), configs=None,
        readers=(), scalars=(), pack=_native.Packer(lambda: b""),
        launch=lambda *call: launches[-1](call[2]) or 0, offsets=b"", context=0,
        cooperative=False, order=monitor.order, fallbacks=Fallbacks(), name="k", sync=True,
        reads=1, streamed=int(library_array), top=-1, remember=True, valid=False,
    )  # fmt: skip

    def ordered(stream, x, given, launch):
        streams.append(stream)
        launches.append(launch)
        launcher.hit((x,), given, "key", (0, None, (x,)))

    return ordered


def test_library_arrays_launched_off_their_librarys_stream_are_kept_with_one_stream_in_use():
    """Launches on one stream only, not the library's current one: each keeps its array alive
    (its allocator would hand the memory out on its own stream, which does not wait for the
    launch); those on the library's stream keep nothing."""

    class Array:
        pass

    events = RecordingEvents()  # the device passes nothing until released
    for stream, kept in [(7, 3), (0, 0)]:
        monitor = Monitor(events)
        ordered = _ordered_launch(monitor, library_array=True)
        for _ in range(3):
            ordered(stream, Array(), cuda.stream(), lambda stream: None)
        assert monitor.stream == stream and monitor.kept_arrays() == kept
    events.released.set()


@pytest.mark.parametrize("blocking, kept", [(True, 0), (False, 3)], ids=["blocking", "not"])
def test_library_arrays_on_a_blocking_stream_are_not_kept_while_their_library_uses_the_legacy_one(
    blocking, kept, monkeypatch
):
    """The legacy default stream's later work waits for a blocking stream's launches: arrays
    whose library's current stream is the legacy one need no keeping past a launch on a
    blocking stream, by the generated code or the general path (:meth:`Monitor.keep`)."""

    class Array:
        pass

    events = RecordingEvents()
    monitor = Monitor(events)
    monitor.blocking[7] = blocking  # as Monitor.wait found out
    ordered = _ordered_launch(monitor, library_array=True)
    for _ in range(3):
        ordered(7, Array(), cuda.stream(), lambda stream: None)
    assert monitor.kept_arrays() == kept
    events.released.set()

    # The general path's: of an array whose library's current stream is the legacy one.
    from numbatune.streams import monitor as monitor_module

    legacy_current = SimpleNamespace(stream=SimpleNamespace(of=lambda array: 0))
    monkeypatch.setattr(monitor_module, "kind_of", lambda cls: legacy_current)
    assert len(monitor.keep(7, (Array(),))) == kept // 3


@pytest.mark.parametrize("path", ["quick stream", "first launch", "right after the bookkeeping"])
def test_generated_code_notes_buffers_again_when_their_epoch_ended_before_the_launch(path):
    events = CountingEvents()
    monitor = _Interrupted(Monitor(events))
    ordered = _ordered_launch(monitor)
    held = cuda.stream()
    x, y = "x", "y"
    nothing = lambda stream: None  # noqa: E731
    ordered(7, y, held, nothing)
    ordered(8, y, held, nothing)  # two streams: ordering is on
    if path == "quick stream":
        ordered(9, "z", held, nothing)  # 9 is quick from now on
    # Thread A launches x on 9; before its launch is queued, thread B's launch on 7 uses x and
    # ends 9's epoch (its event cannot cover A's launch).
    other_thread = lambda *_: ordered(7, x, held, nothing)  # noqa: E731
    if path == "right after the bookkeeping":
        monitor.then = other_thread
        ordered(9, x, held, nothing)
    else:
        ordered(9, x, held, other_thread)
    waits = len(events.waits)
    ordered(7, x, held, nothing)  # after thread A's call returned: must wait for A's launch
    assert events.waits[waits:] == [(7, 9)]


def test_kept_arrays_live_until_the_device_passes_their_launch():
    class Array:
        pass

    events = RecordingEvents()
    monitor = Monitor(events)
    array = Array()
    alive = weakref.ref(array)
    monitor.hold(3, (array,))
    del array
    assert alive() is not None and monitor.kept_arrays() == 1
    events.released.set()  # the device passes the launch
    deadline = time.monotonic() + 30
    # the keeper thread releases them (it lets go of the arrays just after its count drops)
    while (monitor.kept_arrays() or alive() is not None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive() is None and monitor.kept_arrays() == 0
    monitor.hold(3, (Array(),))
    assert events.created == 1  # the next launch that keeps arrays reuses the event


def test_launches_on_a_held_stream_that_keep_arrays_share_the_events_the_keeper_records():
    class Array:
        pass

    events = CountingEvents()
    monitor = Monitor(events)
    monitor.watch(9, (cuda.device_array(4, np.float32),), "k", given=cuda.stream())
    x = cuda.device_array(4, np.float32)
    arrays = [Array() for _ in range(10)]
    alive = [weakref.ref(array) for array in arrays]
    stream = cuda.stream()
    for array in arrays:  # each keeps an array on stream 7, whose object numbatune holds
        assert monitor.before(7, (id(x),), "k", given=stream) is None
        monitor.hold(7, (array,))
    del arrays, array
    assert monitor.kept_arrays() == 10 and all(ref() is not None for ref in alive)
    # The keeper recorded one event for what it found, and waits for the device to pass it.
    assert events.records.count(7) <= 2
    events.released.set()
    deadline = time.monotonic() + 30
    while monitor.kept_arrays() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert monitor.kept_arrays() == 0 and all(ref() is None for ref in alive)
    assert events.records.count(7) <= 2


def test_numbas_own_streams_are_held_and_its_external_ones_recorded_after_each_launch(
    monkeypatch,
):
    from numbatune.streams import monitor as monitor_module

    class NumbaStream:  # numba's driver.Stream, which the simulator lacks
        def __init__(self, external):
            self.external = external

        def __cuda_stream__(self):
            return (0, 0)

    monkeypatch.setattr(monitor_module, "_NUMBA_STREAM", NumbaStream)
    events = CountingEvents()
    monitor = Monitor(events)
    x, y = cuda.device_array(4, np.float32), cuda.device_array(4, np.float32)
    monitor.watch(5, (y,), "k", given=NumbaStream(external=False))
    for _ in range(2):
        _numba_path_launch(monitor, 7, x, given=NumbaStream(external=False))
    _numba_path_launch(monitor, 8, y, given=NumbaStream(external=True))
    assert events.records[-1] == 8 and 7 not in events.records


@cuda.jit
def fill(x, value):
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = value


FILL = nt.autotune(variants=nt.product(BLOCK=[32, 64]), launch=lambda x, v, *, BLOCK: (4, BLOCK))(
    fill
)


def test_profiles_count_the_tuned_launches_made_while_open_and_may_nest_and_overlap():
    x = cuda.device_array(64, np.float32)
    FILL(x, 1.0)  # tuned outside any profile
    outer = nt.start_profile()
    FILL(x, 2.0)
    inner = nt.start_profile()
    FILL(x, 3.0)
    inner_result = nt.end_profile(inner)
    overlapping = nt.start_profile()
    FILL(x, 4.0)
    outer_result = nt.end_profile(outer)
    FILL(x, 5.0)
    overlapping_result = nt.end_profile(overlapping)
    assert (inner_result.launches, outer_result.launches, overlapping_result.launches) == (1, 3, 2)
    assert outer_result.device_s > 0
    assert set(outer_result.by_kernel) == {"fill"}
    assert outer_result.by_kernel["fill"] == pytest.approx(outer_result.device_s)
    with nt.profile() as measured:
        FILL(x, 6.0)
        FILL(x, 7.0)
    assert measured.launches == 2
    np.testing.assert_array_equal(x.copy_to_host(), 7.0)


def test_ending_a_profile_twice_or_with_a_foreign_token_is_a_clear_error():
    token = nt.start_profile()
    nt.end_profile(token)
    with pytest.raises(nt.ProfileError, match="not open"):
        nt.end_profile(token)
    with pytest.raises(nt.ProfileError, match="start_profile"):
        nt.end_profile(42)
    with pytest.raises(nt.ProfileError, match="not open"):
        nt.end_profile(nt.ProfileToken(10**9))
    with nt.profile() as measured:  # nothing was left broken
        FILL(cuda.device_array(64, np.float32), 1.0)
    assert measured.launches == 1


def test_memory_usage_reports_and_cleanup_runs():
    usage = nt.memory_usage()
    assert usage["kept_arrays"] >= 0
    if not SIMULATOR:
        assert 0 < usage["free"] <= usage["total"]
    nt.memory_cleanup()


# -- on a GPU -----------------------------------------------------------------------------------


@cuda.jit
def spin_then_fill(x, value, microseconds):
    """Thread 0 of each block sleeps for about ``microseconds``; then x[:] = value."""
    if cuda.threadIdx.x == 0:
        for _ in range(microseconds):
            cuda.nanosleep(1000)
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = value


@cuda.jit
def copy(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i]


def _spin_then_fill():
    return nt.autotune(variants=[{}], launch=lambda x, v, c: (nt.cdiv(x.shape[0], 256), 256))(
        spin_then_fill
    )


def _copy():
    return nt.autotune(
        variants=nt.product(BLOCK=[128, 256]),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    )(copy)


SPIN_US = 100_000  # about 0.1 s


@pytest.mark.gpu
def test_independent_streams_overlap_and_a_shared_array_is_ordered():
    """A short launch on stream b over another array than a long one's on stream a is done
    while a's still runs; over the same array it runs after a's, so its fill comes last.
    (Told apart by what the device did, not by how long it took: other test processes share
    the GPU and stretch kernels' times.)"""
    spin = _spin_then_fill()
    a, b = cuda.stream(), cuda.stream()
    x, y = cuda.device_array(1024, np.float32), cuda.device_array(1024, np.float32)
    # Compile, and launch on both streams once first: the first launch on a second stream
    # waits for all that the first queued before (see numbatune.streams).
    spin(x, 0.0, 0, stream=a)
    spin(y, 0.0, 0, stream=b)
    cuda.synchronize()
    a_end, b_end = cuda.event(), cuda.event()
    spin(x, 2.0, SPIN_US, stream=a)
    a_end.record(a)
    spin(y, 3.0, 0, stream=b)
    b_end.record(b)
    b_end.synchronize()
    assert not a_end.query()  # b's launch did not wait for a's
    cuda.synchronize()
    spin(x, 4.0, SPIN_US, stream=a)
    spin(x, 5.0, 0, stream=b)  # unordered, it would fill first and a's fill would come last
    cuda.synchronize()
    np.testing.assert_array_equal(x.copy_to_host(), 5.0)
    np.testing.assert_array_equal(y.copy_to_host(), 3.0)


@pytest.mark.gpu
def test_a_reader_on_another_stream_sees_the_writers_result():
    spin, copier = _spin_then_fill(), _copy()
    a, b = cuda.stream(), cuda.stream()
    x, out = cuda.device_array(1 << 16, np.float32), cuda.device_array(1 << 16, np.float32)
    copier(x, out, stream=b)  # tuned before the timed part
    spin(x, 0.0, 1000, stream=a)
    cuda.synchronize()
    spin(x, 9.0, SPIN_US, stream=a)
    copier(x, out, stream=b)  # without a wait on the device it would copy before the fill
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 9.0)


@pytest.mark.gpu
def test_a_variant_run_on_another_stream_sees_the_writers_result():
    """run_variant launches on the caller's arrays as a call does: after other streams' uses."""
    spin, copier = _spin_then_fill(), _copy()
    a, b = cuda.stream(), cuda.stream()
    x, out = cuda.device_array(1 << 16, np.float32), cuda.device_array(1 << 16, np.float32)
    copier.run_variant({"BLOCK": 128}, x, out, stream=b)  # compiled before the timed part
    spin(x, 0.0, 1000, stream=a)
    cuda.synchronize()
    spin(x, 9.0, SPIN_US, stream=a)
    copier.run_variant({"BLOCK": 128}, x, out, stream=b)
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 9.0)


def test_run_variant_tells_the_stream_monitor_of_its_launch(monkeypatch):
    """A variant run on the caller's arrays is a launch the stream monitor orders (numba's
    launch path with the kernel's name), not one of tuning's on its private clones."""
    from numbatune.streams.monitor import monitor

    heard, watch = [], monitor.watch
    monkeypatch.setattr(monitor, "watch", lambda *a, **k: heard.append(a[2]) or watch(*a, **k))
    copier = _copy()
    x = cuda.to_device(np.ones(8, np.float32))
    copier.run_variant({"BLOCK": 128}, x, cuda.device_array_like(x), stream=cuda.stream())
    assert copier.name in heard


@pytest.mark.gpu
def test_a_reader_thread_on_its_own_stream_sees_what_a_writer_thread_launched_before():
    """Launches from two threads, each on its own stream and most of them past the lock-free
    check: a read launched after the host saw the write launched is ordered after it."""
    spin, copier = _spin_then_fill(), _copy()
    writing, reading = cuda.stream(), cuda.stream()
    x, out = cuda.device_array(1 << 16, np.float32), cuda.device_array(1 << 16, np.float32)
    private = cuda.device_array(1 << 16, np.float32)
    copier(x, out, stream=reading)  # tuned, and both streams in use
    spin(x, 0.0, 1, stream=writing)
    cuda.synchronize()
    for value in range(1, 21):
        launched = threading.Event()

        def write(value=value, launched=launched):
            spin(private, 0.0, 1, stream=writing)  # its own array: no bookkeeping
            spin(x, float(value), 2000, stream=writing)  # x is written after a 2 ms sleep
            launched.set()

        def read(launched=launched):
            launched.wait(timeout=30)
            copier(x, out, stream=reading)  # without a wait on the device: copies before

        threads = [threading.Thread(target=write), threading.Thread(target=read)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cuda.synchronize()
        np.testing.assert_array_equal(out.copy_to_host(), float(value))


def _filled(module, n):
    """``make(value)``: a new array of ``n`` float32 ``value`` of torch or CuPy (``module``) on
    the GPU."""
    if module.__name__ == "torch":
        return lambda value: module.full((n,), value, dtype=module.float32, device="cuda")
    return lambda value: module.full((n,), value, dtype=module.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("held", [False, True], ids=["raw stream", "library's stream"])
@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_dropping_an_array_in_use_on_another_stream_does_not_free_it_early(library, held):
    module = pytest.importorskip(library)
    spin, copier = _spin_then_fill(), _copy()
    n = 1 << 20
    # Non-blocking: the legacy default stream, where the library allocates, does not wait for
    # it. A stream object numbatune holds gets its events from the keeper thread.
    if not held:
        other = cuda.external_stream(non_blocking_stream())
    elif library == "torch":
        other = module.cuda.Stream()
    else:
        other = module.cuda.Stream(non_blocking=True)
    out = cuda.device_array(n, np.float32)
    hold = cuda.device_array(1, np.float32)
    make = _filled(module, n)

    copier(make(0.0), out, stream=other)  # tune first
    spin(hold, 0.0, 1000, stream=other)
    cuda.synchronize()
    x = make(1.0)
    spin(hold, 0.0, SPIN_US, stream=other)  # keeps the other stream busy
    copier(x, out, stream=other)  # reads x once the spin is over
    del x  # the library's allocator may hand x's memory out again at once...
    make(2.0)  # ...to this, written on the library's stream while the copy waits
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 1.0)
    deadline = time.monotonic() + 30
    while nt.memory_usage()["kept_arrays"] and time.monotonic() < deadline:
        time.sleep(0.01)  # the keeper thread lets x go once the device passed the copy
    assert nt.memory_usage()["kept_arrays"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_a_librarys_stream_first_seen_on_a_miss_is_held_by_numbatune(library):
    """The stream order may record on a stream it saw until it recorded there (on the first
    stream of a process, when a second comes): the stream object a miss was tuned on is held,
    so that its library cannot destroy the stream meanwhile. Before, numba's wrapper of its
    handle was held, and the driver crashed on the handle of a CuPy stream dropped since."""
    from numbatune.rawstreams import stream_handle
    from numbatune.streams.monitor import monitor

    module = pytest.importorskip(library)
    stream = module.cuda.Stream()
    x = cuda.device_array(1 << 10, np.float32)
    _copy()(x, cuda.device_array_like(x), stream=stream)  # a miss: tuned first
    assert monitor._streams[stream_handle(stream)] is stream


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_an_array_in_use_on_a_blocking_stream_is_dropped_safely_without_being_kept(library):
    """The legacy default stream, where the library allocates, waits for a blocking stream's
    launches: an array in use there may be dropped at once, and numbatune keeps nothing."""
    module = pytest.importorskip(library)
    spin, copier = _spin_then_fill(), _copy()
    n = 1 << 20
    other = cuda.stream()  # blocking
    out = cuda.device_array(n, np.float32)
    hold = cuda.device_array(1, np.float32)
    make = _filled(module, n)

    copier(make(0.0), out, stream=other)  # tune first (this launch keeps its array)
    spin(hold, 0.0, 1000, stream=other)
    cuda.synchronize()
    deadline = time.monotonic() + 30
    while nt.memory_usage()["kept_arrays"] and time.monotonic() < deadline:
        time.sleep(0.01)
    x = make(1.0)
    spin(hold, 0.0, SPIN_US, stream=other)  # keeps the other stream busy
    copier(x, out, stream=other)  # reads x once the spin is over
    assert nt.memory_usage()["kept_arrays"] == 0
    del x  # the library's allocator may hand x's memory out again at once...
    make(2.0)  # ...to this, on the legacy stream, which waits for the copy
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("isolate", [Isolate.ALL, Isolate.OFF])
def test_tuning_on_a_miss_keeps_the_callers_stream_order_and_leaves_other_streams_alone(
    isolate, monkeypatch
):
    from numbatune.trials import runs as trials
    from numbatune.tuning import bench

    monkeypatch.setattr(nt.settings, "isolate", isolate)
    # Tuning's first wait for the caller's stream: giving the trial worker the arguments, else
    # the timing.
    owner, name = (trials, "wait_for") if isolate is Isolate.ALL else (bench, "measure")
    fill, copier = _spin_then_fill(), _copy()
    a, b = cuda.stream(), cuda.stream()
    opener = cuda.external_stream(non_blocking_stream())  # waits for nothing of a's or b's
    x, out = cuda.device_array(1 << 16, np.float32), cuda.device_array(1 << 16, np.float32)
    small, gate = cuda.device_array(1, np.float32), cuda.to_device(np.zeros(1, np.int32))
    fill(small, 0.0, 0, stream=a)
    fill(small, 0.0, 0, stream=b)
    open_gate[1, 1, opener](cuda.device_array(1, np.int32))
    # The variants are loaded on another key first: loading a kernel may wait for the whole
    # device (CUDA's lazy loading), and a's work below waits for the gate.
    copier(cuda.device_array(1 << 10, np.float32), cuda.device_array(1 << 10, np.float32))
    cuda.synchronize()
    started = threading.Event()
    original = getattr(owner, name)

    def tell_then_run(*args, **kwargs):
        started.set()
        return original(*args, **kwargs)

    errors = []

    def tuned_call():
        try:
            copier(x, out, stream=a)  # a miss: tunes on a, behind the gate
        except Exception as error:  # reported in the main thread
            errors.append(error)

    def open_the_gate():
        open_gate[1, 1, opener](gate)

    wait_for_gate[1, 1, a](gate)  # a's work stays queued until the gate opens
    fill(x, 6.0, 0, stream=a)
    a_done = cuda.event()
    a_done.record(a)
    # Should b's work wait for a's, the gate opens after a minute and the test fails.
    deadline = threading.Timer(60, open_the_gate)
    deadline.start()
    thread = threading.Thread(target=tuned_call)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(owner, name, tell_then_run)
            thread.start()
            assert started.wait(timeout=60)
            # Where b's work is held up, each thread's stack goes to stderr after 10 s: the
            # host's wait (a lock, a driver call) shows there; the device's shows as a quick
            # launch and a late end (the message below).
            faulthandler.dump_traceback_later(10)
            began = time.perf_counter()
            fill(small, 1.0, 1000, stream=b)  # queued on b while tuning waits on a
            b_done = cuda.event()
            b_done.record(b)
            queued_s = time.perf_counter() - began
            b_done.synchronize()
            done_s = time.perf_counter() - began
            a_was_done = a_done.query()
    finally:
        faulthandler.cancel_dump_traceback_later()
        deadline.cancel()
        open_the_gate()
        thread.join()
    assert not a_was_done, (
        f"b's work waited for a's: queued on b after {queued_s:.3f} s, done after {done_s:.3f} s"
    )
    assert not errors
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 6.0)


@pytest.mark.gpu
def test_profiles_measure_device_time_with_events():
    spin = _spin_then_fill()
    x = cuda.device_array(256, np.float32)
    spin(x, 0.0, 1000)
    first, last = cuda.event(), cuda.event()
    with nt.profile() as measured:
        first.record()
        for _ in range(3):
            spin(x, 1.0, SPIN_US // 10)
        last.record()
    cuda.synchronize()
    # The launches' own events lie within the window of the test's, on the same stream, and
    # cover most of it (the kernels follow each other; the host queues them at once). One window
    # for both: other processes' work on the GPU slows both alike.
    window_s = cuda.event_elapsed_time(first, last) / 1e3
    assert measured.launches == 3
    assert 0.5 * window_s < measured.device_s <= window_s * 1.001


@pytest.mark.gpu
def test_streams_of_another_context_are_refused():
    from cuda.bindings import driver

    x = cuda.device_array(64, np.float32)
    FILL(x, 0.0)
    error, device = driver.cuDeviceGet(0)
    try:  # cuda-bindings 13 takes creation parameters first
        error, context = driver.cuCtxCreate(None, 0, device)
    except TypeError:
        error, context = driver.cuCtxCreate(0, device)
    assert not error
    try:
        error, foreign = driver.cuStreamCreate(0)
    finally:
        driver.cuCtxPopCurrent()
    try:
        with pytest.raises(nt.StreamError, match="another CUDA context"):
            FILL(x, 1.0, stream=int(foreign))
    finally:
        driver.cuCtxDestroy(context)
    FILL(x, 2.0, stream=cuda.stream())  # nothing was left broken
    cuda.synchronize()
    np.testing.assert_array_equal(x.copy_to_host(), 2.0)


@pytest.mark.gpu
def test_a_closed_stream_is_refused_and_an_open_one_works():
    core = pytest.importorskip("cuda.core")
    x = cuda.device_array(64, np.float32)
    FILL(x, 0.0)
    stream = core.Device(0).create_stream()
    FILL(x, 3.0, stream=stream)
    stream.sync()
    np.testing.assert_array_equal(x.copy_to_host(), 3.0)
    stream.close()
    with pytest.raises(nt.StreamError, match="closed"):
        FILL(x, 4.0, stream=stream)


#: A fresh process whose only stream so far, a raw handle, is closed before a second is used.
_CLOSED_FIRST_STREAM = """
import numpy as np
from cuda.bindings import driver
from numba import cuda

import numbatune as nt


@nt.autotune(variants=nt.product(BLOCK=[32, 64]), launch=lambda x, v, *, BLOCK: (4, BLOCK))
@cuda.jit
def fill(x, value):
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = value


x = cuda.device_array(128, np.float32)  # (4 blocks of 32 or 64 threads cover it)
_, first = driver.cuStreamCreate(0)
for value in (1.0, 2.0):
    fill(x, value, stream=int(first))
driver.cuStreamDestroy(first)
fill(x, 3.0, stream=cuda.stream())
cuda.synchronize()
assert (x.copy_to_host() == 3.0).all()
print("ok")
"""


@pytest.mark.gpu
def test_closing_the_only_stream_used_so_far_leaves_the_next_stream_working(tmp_path):
    """numbatune records nothing on a process's only stream; when it is a raw handle, closed
    before a second stream is used, the second stream's launch runs and its write is the one
    left. (That the closed handle is not touched is the CPU test's: the driver does not
    always fault on a dead handle, and did not on the H100 with the code before.)"""
    (tmp_path / "closed_first.py").write_text(_CLOSED_FIRST_STREAM)
    env = {**os.environ, "NUMBATUNE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-X", "faulthandler", "closed_first.py"], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def _library_stream(library):
    """A new stream of ``library`` and a function telling whether its work is done."""
    if library == "numba":
        from cuda.bindings import driver

        stream = cuda.stream()
        return stream, lambda: driver.cuStreamQuery(driver.CUstream(int(stream)))[0] == 0
    module = pytest.importorskip(library)
    if library == "torch":
        stream = module.cuda.Stream()
        return stream, stream.query
    stream = module.cuda.Stream(non_blocking=False)
    return stream, lambda: stream.done


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["numba", "torch", "cupy"])
def test_a_tuned_kernel_runs_on_the_stream_of_any_library_it_is_given(library):
    spin = _spin_then_fill()
    x = cuda.device_array(256, np.float32)
    stream, done = _library_stream(library)
    spin(x, 0.0, 1000, stream=stream)
    cuda.synchronize()
    spin(x, 8.0, SPIN_US, stream=stream)
    assert not done()  # the 0.1 s kernel is queued on that very stream
    cuda.synchronize()
    assert done()
    np.testing.assert_array_equal(x.copy_to_host(), 8.0)


# -- inside a CUDA graph capture -------------------------------------------------------------


def test_a_launch_on_a_captured_stream_records_and_waits_for_nothing_and_leaves_the_order(
    order_type,
):
    """A capture refuses a wait for an event recorded outside it (the capture is invalidated:
    the failure torch.cuda.graph and CuPy's capture met), and an event recorded inside it
    cannot be waited for outside it. Work a capture records runs only at a replay, so the
    buffers' last uses stay the work that runs."""
    order, waits = _order(order_type)
    events = order.events
    order.use(1, ["x"])
    events.captured.add(2)
    order.use(2, ["x", "y"])
    order.launched(2)
    assert waits == [] and events.records == []
    order.use(3, ["y"])  # y's only use was captured: nothing to wait for
    assert waits == []
    events.captured.clear()
    order.use(2, ["x"])  # the capture ended: 2 waits for 1's write of x, as if never captured
    assert waits == [(2, 1)]


def test_a_barrier_a_capture_skipped_is_waited_for_after_the_capture(order_type):
    order, waits = _order(order_type, limit=2)
    order.use(1, ["a", "b", "c"])  # past the limit: a barrier
    order.events.captured.add(2)
    order.use(2, [])
    assert waits == []
    order.events.captured.clear()
    order.use(2, [])
    assert waits == [(2, 1)]


@given(st.lists(st.one_of(_STEPS, st.tuples(st.just("capture"), st.integers(1, 3))), max_size=60))
def test_the_c_extensions_order_skips_for_captures_what_the_python_reference_skips(steps):
    orders = [_order(_order_type(implementation), 4)[0] for implementation in ("python", "c")]
    for step in steps:
        for order in orders:
            if step[0] == "capture":  # its capture begins, or ends
                order.events.captured ^= {step[1]}
            else:
                getattr(order, step[0])(*step[1:])
        _assert_alike(*orders)


def test_a_second_stream_first_seen_inside_a_capture_leaves_the_first_untouched():
    """cuda.core's graph builder after a cuda.core stream: starting the order there waited on
    the host for the first stream's context, which a capture refuses (and is invalidated by)."""
    events = TouchingEvents()
    monitor = Monitor(events)
    x = cuda.device_array(4, np.float32)
    _numba_path_launch(monitor, 9, x, given=9)
    events.captured.add(7)
    _numba_path_launch(monitor, 7, x, given=7)
    assert events.synchronized == [] and events.records == [] and monitor.stream == 9
    events.captured.clear()
    _numba_path_launch(monitor, 7, x, given=7)
    assert events.synchronized == [events.context(9)]


def test_arrays_kept_on_a_captured_stream_wait_for_the_capture_to_end():
    """An event the keeper recorded on a captured stream would be the graph's, and querying it
    invalidates the capture: the pending arrays stay until the capture ends, and a launch
    inside the capture keeps none."""

    class Array:
        pass

    events = CountingEvents()
    monitor = Monitor(events)
    monitor.pending[7] = (events.create(), [Array()])
    events.captured.add(7)
    with monitor.lock:
        assert monitor._look() == [] and 7 in monitor.pending
    monitor.hold(7, (Array(),))
    assert len(monitor.pending[7][1]) == 1 and events.records == []
    events.captured.clear()
    with monitor.lock:
        monitor._look()
    assert 7 not in monitor.pending and events.records == [7]


def test_the_monitor_neither_waits_nor_asks_a_streams_flags_inside_a_capture():
    """cuStreamGetFlags and a wait for an outside event both invalidate a capture."""

    class Asking(RecordingEvents):
        def blocking(self, stream):
            raise AssertionError("flags asked inside a capture")

    events = Asking()
    monitor = Monitor(events)
    events.captured.add(7)
    monitor.wait(7, 0, given=cuda.stream())
    assert events.waits == []


def test_a_launch_inside_a_capture_is_left_out_of_an_open_profile():
    """Its events would be the graph's, which end_profile cannot wait for."""
    events = CountingEvents()
    events.released.set()
    monitor = Monitor(events)
    token = monitor.start_profile()
    events.captured.add(7)
    launch = monitor.watch(7, (cuda.device_array(4, np.float32),), "k", given=cuda.stream())
    if launch:
        monitor.after(launch)
    assert events.records == [] and monitor.end_profile(token).launches == 0


# -- streams the program let go of -------------------------------------------------------------


class _Owner:
    """A stream object numbatune holds (not one that may close)."""


def test_streams_the_program_let_go_of_are_forgotten_so_the_state_stays_bounded():
    """Short-lived streams, each ordered against one long-lived stream: before, the monitor held
    every stream object (so their libraries never destroyed them) and the order kept a record,
    an event and wait slots for each."""
    events = CountingEvents()
    events.released.set()  # the device passed every event
    monitor = Monitor(events)
    x = cuda.device_array(4, np.float32)
    held = _Owner()
    most = 0
    for number in range(3000):
        _numba_path_launch(monitor, 7, x, given=held)
        _numba_path_launch(monitor, 1000 + number, x, given=_Owner())
        if number % 100 == 0:
            with monitor.lock:
                monitor._look()  # what the keeper does every millisecond
            most = max(most, len(monitor._streams), len(monitor.order.streams))
    assert most < 300 and len(monitor.order.last_use) == 1
    assert len(monitor.order.quick) < 300 and monitor.order.streams.keys() >= {7}
    assert events.waits[-1] == (1000 + number, 7)  # the last one is still ordered


def test_a_stream_that_may_close_is_not_touched_when_it_is_forgotten():
    """A stream numbatune cannot keep alive (here torch's ExternalStream) whose object the
    program dropped may be destroyed already: retiring and forgetting it asks nothing of it
    (its event was recorded right after its last launch)."""

    class Asking(TouchingEvents):
        def capturing(self, stream):
            self.made_for.append(stream)
            return False

    events = Asking()
    events.released.set()
    monitor = Monitor(events)
    x = cuda.device_array(4, np.float32)
    _numba_path_launch(monitor, 7, x, given=_Owner())
    _numba_path_launch(
        monitor, 4321, x, given=_stream_object("torch.cuda.streams", "ExternalStream")
    )
    recorded, asked = len(events.records), len(events.made_for)
    owners = [_Owner() for _ in range(80)]
    for number, owner in enumerate(owners):  # (a sweep for streams let go of, then a look)
        _numba_path_launch(monitor, 10 + number, cuda.device_array(4, np.float32), given=owner)
    with monitor.lock:
        monitor._look()
    assert 4321 not in monitor.order.streams and 4321 not in monitor._streams
    assert 4321 not in events.records[recorded:] and 4321 not in events.made_for[asked:]


def test_a_retiring_stream_used_again_is_kept():
    events = CountingEvents()
    monitor = Monitor(events)  # (the device has passed nothing yet)
    x = cuda.device_array(4, np.float32)
    _numba_path_launch(monitor, 7, x, given=_Owner())
    _numba_path_launch(monitor, 9, x, given=_Owner())
    with monitor.lock:
        monitor._retire_unheld()
    assert set(monitor._retiring) == {7, 9}
    _numba_path_launch(monitor, 9, cuda.device_array(4, np.float32), given=9)  # 9 used again
    events.released.set()
    with monitor.lock:
        monitor._look()
    assert 7 not in monitor._streams and 7 not in monitor.order.streams
    assert 9 in monitor._streams and 9 in monitor.order.streams


def test_a_forgotten_streams_place_goes_to_a_new_stream_with_no_waits_of_its_own():
    order, waits = _order(_order_type("c"))
    order.use(1, ["x"])
    order.use(2, ["x"])  # 2 waits for 1
    event, epoch = order.retire(1, True)
    assert order.forget({1: epoch}) == {1: event}
    assert 1 not in order.streams and set(order.last_use) == {"x"}
    order.use(3, ["y"])  # 3 takes 1's place among the streams
    order.use(2, ["y"])
    assert waits == [(2, 1), (2, 3)]


def test_a_stream_used_after_it_retired_is_not_forgotten():
    order, _ = _order(_order_type("c"))
    order.use(1, ["x"], quick=True)
    _, epoch = order.retire(1, True)
    assert order.quick_use(1, ("y",), threading.Lock()) is not None  # a use without the lock
    assert order.forget({1: epoch}) == {} and 1 in order.streams


def test_cupys_current_stream_a_launch_took_is_held(monkeypatch):
    """A launch given no stream takes its arrays' library's current one. CuPy destroys a stream
    with its object, and the order may record an event on a stream it saw later: numbatune holds
    CuPy's current stream object as it holds a stream given (and lets go of it once the program
    has). Before, it held nothing, and a stream the program dropped could be recorded on."""
    current = SimpleNamespace(ptr=4321)
    cupy = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: current))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monitor = Monitor(CountingEvents())
    x = cuda.device_array(4, np.float32)
    monitor.watch(7, (x,), "k", given=cuda.stream())
    monitor.watch(4321, (x,), "k")  # CuPy's current stream
    monitor.watch(99, (x,), "k")  # another library's current stream (torch's never close)
    assert monitor._streams[4321] is current and monitor._streams[99] is None


def test_a_stream_being_captured_is_retired_later():
    """An event recorded on a stream being captured into a graph would be the graph's."""
    order, _ = _order(_order_type("c"))
    order.use(1, ["x"])
    order.events.captured.add(1)
    assert order.retire(1, True) is None and order.events.records == []
    order.events.captured.clear()
    assert order.retire(1, True) is not None and order.events.records == [1]
