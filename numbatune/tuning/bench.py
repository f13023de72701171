"""Timing kernel launches: CUDA events on a GPU, the wall clock under the simulator.

docs/concepts/measuring.md says what is timed, and docs/benchmarks.md why. On a GPU, the
variants of one key are measured so:

1. **Warm-up**: untimed rounds over every variant for at least ``settings.warmup_s``.
2. **Interleaved rounds**: each round runs every variant still measured once, the order rotating
   by one from round to round, so that drift and the place in a round hit every variant alike.
3. **Events**: each run lies between a start and an end CUDA event. Before a round, a one-thread
   kernel holds the device (:func:`next_hold`) so that the queued runs execute back to back and
   the events time kernels, not the host's launch overhead.
4. **L2 flush**: when the arrays take less than twice the L2 cache, a memset of twice the L2 size
   is queued before each run, outside the timed region: every run starts from a cold L2.
5. **Early stop**: once ``settings.early_stop_rounds`` rounds are timed, a variant whose fastest
   run is slower than ``settings.early_stop_ratio`` times the leader's median (the lowest) is no
   longer measured: its most favourable reading against a robust one, it cannot win.
6. **Budget**: timed rounds go on for ``settings.budget_s``, within ``settings.min_runs`` to
   ``settings.max_runs`` rounds (screening, :mod:`numbatune.tuning.screen`, asks for
   ``settings.early_stop_rounds`` exactly).
7. **Graph timing** (``timing="graph"``): each variant is launched once on the tuning's stream
   (which loads its code and shows its launch errors), then :data:`GRAPH_LAUNCHES` of its
   launches are captured into a CUDA graph on a stream of the stopwatch's own; its runs are
   replays of that graph, in the same rounds, between the same events, after the same hold and
   flush, each divided by :data:`GRAPH_LAUNCHES`. A variant whose launch cannot be captured
   fails, with why.

A variant's result is the median of its runs and their interquartile range; those within noise
of the best (:func:`within_noise`) are ties, which the tuner times again
(:mod:`numbatune.tuning.tuner`). Under the simulator, ``settings.simulator_runs`` rounds run
without warm-up or flush, timed by the wall clock (graph timing too: :func:`timing`).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numba import cuda

from numbatune import arrays
from numbatune.arrays import SIMULATOR
from numbatune.config import Snapshot, Timing, settings
from numbatune.rawstreams import stream_handle
from numbatune.streams.events import checked
from numbatune.tuning.job import Bound
from numbatune.tuning.results import Timed

logger = logging.getLogger("numbatune")

#: A function that queues one launch of a variant.
Run = Callable[[], None]


#: Launches of one variant that its CUDA graph holds under graph timing (a run's time is the
#: replay's over them, as Triton's ``do_bench_cudagraph``'s): starting a replay counts a tenth.
GRAPH_LAUNCHES = 10

_told_no_graphs = False


def timing(taken: Snapshot) -> Timing:
    """How a tuning under the settings ``taken`` times its variants: as their ``timing`` asks
    on a GPU; by the wall clock under the simulator, which has neither events nor graphs (asked
    for graph timing there, the log says so, once a process)."""
    global _told_no_graphs
    if not SIMULATOR:
        return taken.timing
    if taken.timing is Timing.GRAPH and not _told_no_graphs:
        _told_no_graphs = True
        logger.info(
            "numbatune: timing='graph': numba's simulator has no CUDA graphs; the wall clock "
            "times the variants, as it does every tuning under the simulator"
        )
    return Timing.WALL_CLOCK


def summary(samples: Sequence[float], stopped_early: bool = False) -> Timed:
    """Median, interquartile range and count of a variant's timed runs."""
    if len(samples) >= 4:
        quartiles = statistics.quantiles(samples, n=4)
        spread = quartiles[2] - quartiles[0]
    else:
        spread = max(samples) - min(samples)
    return Timed(statistics.median(samples), spread, len(samples), stopped_early)


#: Two medians closer than this share of the faster one are always a tie, and further than
#: :data:`TIE_CEILING` never: between the two, the variants' own spreads decide (a winner chosen
#: among ties is so at most 2% slower than the fastest, timed together).
TIE_FLOOR = 0.01
TIE_CEILING = 0.02


def within_noise(leader: Timed, other: Timed) -> bool:
    """Whether ``other``'s time is within the measurement's noise of ``leader``'s (the faster): its
    median exceeds the leader's by less than the half interquartile ranges of both together (their
    middle halves overlap), taken as at least :data:`TIE_FLOOR` and at most :data:`TIE_CEILING` of
    the leader's median. A variant stopped early is clearly slower, and never a tie."""
    if other.stopped_early:
        return False
    noise = (leader.spread_s + other.spread_s) / 2
    limit = min(max(noise, TIE_FLOOR * leader.median_s), TIE_CEILING * leader.median_s)
    return other.median_s - leader.median_s <= limit


def early_stopped(
    samples: Mapping[Hashable, Sequence[float]], rounds: int, taken: Snapshot | None = None
) -> set[Hashable]:
    """The variants to stop measuring after ``rounds`` timed rounds (rule 5), of the ``samples``
    (timed runs) of those still measured; ``taken``: the tuning's settings (None: now's)."""
    taken = taken or settings.snapshot()
    timed = {name: runs for name, runs in samples.items() if runs}
    if rounds < taken.early_stop_rounds or len(timed) < 2:
        return set()
    limit = taken.early_stop_ratio * min(statistics.median(runs) for runs in timed.values())
    return {name for name, runs in timed.items() if min(runs) > limit}


def working_set_bytes(inputs: Iterable[Any]) -> int:
    """Bytes of device memory the array arguments among ``inputs`` span (scalars count 0)."""
    return sum(arrays.nbytes(value) for value in inputs if arrays.is_array(value))


def flush_bytes(working_set: int, l2_bytes: int, taken: Snapshot | None = None) -> int:
    """Size of the buffer to write before each run: ``2 * l2_bytes`` if needed, else 0 (rule 4;
    ``taken``: the settings of the tuning, None: the settings now)."""
    flush_l2 = (taken or settings.snapshot()).flush_l2
    return 2 * l2_bytes if flush_l2 and working_set < 2 * l2_bytes else 0


class _WallClock:
    """Under the simulator: the wall clock around each run, one after another."""

    def __init__(self, restore: Run) -> None:
        self._restore = restore

    def round(self, order: Sequence[tuple[Hashable, Run]]) -> dict[Hashable, float | Exception]:
        outcome: dict[Hashable, float | Exception] = {}
        for name, run in order:
            self._restore()
            started = time.perf_counter()
            try:
                run()
            except Exception as error:
                outcome[name] = error
                continue
            outcome[name] = time.perf_counter() - started
        return outcome

    def close(self) -> None:
        """Let go of what the stopwatch holds (nothing)."""


# The shortest device hold (the first round's, before the host's lag has been measured).
_SHORTEST_HOLD_S = 2e-3
_HOLD_MARGIN = 2.0
_spin_kernel = None


def next_hold(held_s: float, queueing_s: float, device_s: float, waited: bool = False) -> float:
    """How long to hold the device before the next round (rule 3), given the last round's hold,
    how long the host took to queue the round and how long the device took from the end of its
    hold to its last run; ``waited``: the hold had ended when the round's first run was queued.

    Twice the host's lag behind the device (queueing less device time): long kernels, which the
    host stays ahead of, need no more than the shortest hold. Where that lag came to 3/4 of the
    hold or more, the device waited for the host: the hold was too short, and the next is twice
    the whole queueing time. A hold waited for (a debug kernel's launch waits for the device to
    read its exception flag) cannot put the host ahead: the next is the shortest, where twice
    the lag would double it each round.
    """
    if waited:
        return _SHORTEST_HOLD_S
    lag = queueing_s - device_s
    return max(_SHORTEST_HOLD_S, _HOLD_MARGIN * (queueing_s if lag >= 0.75 * held_s else lag))


_spin_lock = threading.Lock()

#: Held while variants are timed, and by the other work a tuning puts on the device meanwhile
#: (trial runs in another process), so that it does not run between the timed kernels.
device_lock = threading.Lock()


def _spin() -> Any:
    """The one-thread kernel that holds the device (compiled on first use, once)."""
    global _spin_kernel
    with _spin_lock:
        if _spin_kernel is not None:
            return _spin_kernel

        @cuda.jit("void(int64)")
        def spin(microseconds: int) -> None:
            for _ in range(microseconds):
                cuda.nanosleep(1000)

        _spin_kernel = spin
        return spin


def prepare() -> None:
    """Compile what timing needs, in a thread of its own, while variants compile."""
    if not SIMULATOR and _spin_kernel is None:
        threading.Thread(target=_spin, name="numbatune-prepare-timing", daemon=True).start()


def _hold_device(stream: Any, seconds: float) -> None:
    """Queue a one-thread kernel that keeps ``stream`` busy for about ``seconds``."""
    _spin()[1, 1, stream](int(seconds * 1e6) + 20)


class _Events:
    """On a GPU: a pair of CUDA events around each run, optionally an L2 flush before it."""

    #: Launches one timed run makes (a graph's replay: :data:`GRAPH_LAUNCHES`).
    launches = 1

    def __init__(self, stream: Any, flush_size: int, restore: Run) -> None:
        from numba.cuda.cudadrv import driver

        self._restore = restore
        self._stream = stream
        self._raw_stream = stream_handle(stream)
        self._memset = driver.driver.cuMemsetD8Async
        self._flush = cuda.device_array(flush_size, np.uint8) if flush_size else None
        self._events: dict[Hashable, tuple[Any, Any]] = {}
        self._held = cuda.event()  # the end of the device hold
        self._hold_s = _SHORTEST_HOLD_S

    def _prepared(self, order: Sequence[tuple[Hashable, Run]]) -> dict[Hashable, Exception]:
        """What the runs of ``order`` need before a round; the errors of those that failed."""
        return {}

    def _launch(self, name: Hashable, run: Run) -> None:
        run()

    def close(self) -> None:
        """Let go of what the stopwatch holds (its events go with it)."""

    def round(self, order: Sequence[tuple[Hashable, Run]]) -> dict[Hashable, float | Exception]:
        outcome: dict[Hashable, float | Exception] = {**self._prepared(order)}
        order = [(name, run) for name, run in order if name not in outcome]
        recorded, waited = [], False
        _hold_device(self._stream, self._hold_s)
        self._held.record(self._stream)
        queueing_started = time.perf_counter()
        for name, run in order:
            self._restore()  # queued before the flush and the start event: not timed
            if (flush := self._flush) is not None:
                self._memset(flush.device_ctypes_pointer.value, 0, flush.size, self._raw_stream)
            start, end = self._events.get(name) or self._events.setdefault(
                name, (cuda.event(), cuda.event())
            )
            start.record(self._stream)
            try:
                self._launch(name, run)
            except Exception as error:
                outcome[name] = error
                continue
            end.record(self._stream)
            recorded.append(name)
            if len(recorded) == 1:
                waited = self._held.query()
        queueing_s = time.perf_counter() - queueing_started
        for name in recorded:
            start, end = self._events[name]
            end.synchronize()
            outcome[name] = cuda.event_elapsed_time(start, end) / 1e3 / self.launches
        if recorded:
            last = self._events[recorded[-1]][1]
            device_s = cuda.event_elapsed_time(self._held, last) / 1e3
            self._hold_s = next_hold(self._hold_s, queueing_s, device_s, waited)
        return outcome


class _Graphs(_Events):
    """On a GPU under graph timing: each run a replay of a CUDA graph of the variant's
    launches, captured before its first round (rule 7)."""

    launches = GRAPH_LAUNCHES

    def __init__(self, stream: Any, flush_size: int, restore: Run) -> None:
        from cuda.bindings import driver

        super().__init__(stream, flush_size, restore)
        self._driver = driver
        self._graphs: dict[Hashable, Any] = {}
        self._on_stream = driver.CUstream(self._raw_stream)
        # Non-blocking: another thread's use of the legacy stream cannot invalidate a capture.
        flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
        self._capturing = checked(driver.cuStreamCreate(flags))
        self._capture_stream = cuda.external_stream(int(self._capturing))

    def _prepared(self, order: Sequence[tuple[Hashable, Run]]) -> dict[Hashable, Exception]:
        failed: dict[Hashable, Exception] = {}
        for name, run in order:
            if name not in self._graphs:
                try:
                    self._graphs[name] = self._captured(run)
                except Exception as error:
                    failed[name] = error
        return failed

    def _captured(self, run: Run) -> Any:
        """``run`` launched once, then its graph of :data:`GRAPH_LAUNCHES` launches, made
        ready to replay; what raises where the launch or the capture fails."""
        if not isinstance(run, Bound):
            raise TypeError(f"graph timing captures bound launches, got {run!r}")
        self._restore()
        run()  # (on the tuning's stream: the code loaded, launch errors raised here)
        driver, captured = self._driver, run.on(self._capture_stream)
        relaxed = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        checked(driver.cuStreamBeginCapture(self._capturing, relaxed))
        failure: Exception | None = None
        try:
            for _ in range(self.launches):
                captured()
        except Exception as error:
            failure = error
        status, graph = driver.cuStreamEndCapture(self._capturing)
        try:
            if failure is not None or status:
                raise RuntimeError(
                    "it cannot be captured into a CUDA graph (timing='graph'): "
                    f"{failure or status!r}"
                ) from failure
            return checked(driver.cuGraphInstantiate(graph, 0))
        finally:
            if graph is not None and int(graph):
                driver.cuGraphDestroy(graph)

    def _launch(self, name: Hashable, run: Run) -> None:
        checked(self._driver.cuGraphLaunch(self._graphs[name], self._on_stream))

    def close(self) -> None:
        """Destroy the graphs and the capture stream (the device may still be replaying the
        last: CUDA frees them once it is done)."""
        for graph in self._graphs.values():
            self._driver.cuGraphExecDestroy(graph)
        self._graphs.clear()
        self._driver.cuStreamDestroy(self._capturing)


def _l2_bytes() -> int:
    return int(cuda.get_current_device().L2_CACHE_SIZE)


def _nothing() -> None:
    pass


def measure(
    runs: Mapping[Hashable, Run],
    stream: Any = 0,
    inputs: Iterable[Any] = (),
    restore: Run = _nothing,
    rounds: int | None = None,
    taken: Snapshot | None = None,
) -> dict[Hashable, Timed | Exception]:
    """Time each run (a function that queues one launch on ``stream``; under graph timing, a
    :class:`~numbatune.tuning.job.Bound` launch), as the module says: its result, or the exception
    it raised (it is not run again). ``inputs``, the runs' arguments, decide the L2 flush;
    ``restore`` queues what puts them back before every run, outside the timed region; ``rounds``:
    exactly this many timed rounds on a GPU; ``taken``: the tuning's settings (None: now's)."""
    taken = taken or settings.snapshot()
    timed_by = timing(taken)
    if timed_by is Timing.WALL_CLOCK:
        stopwatch: _WallClock | _Events = _WallClock(restore)
        warmup_s, budget_s = None, 0.0
        fewest = most = taken.simulator_runs
    else:
        flush = flush_bytes(working_set_bytes(inputs), _l2_bytes(), taken)
        stopwatch = (_Graphs if timed_by is Timing.GRAPH else _Events)(stream, flush, restore)
        warmup_s, budget_s = taken.warmup_s, taken.budget_s
        fewest, most = (taken.min_runs, taken.max_runs) if rounds is None else (rounds,) * 2
    try:
        return _rounds(stopwatch, runs, warmup_s, budget_s, (fewest, most), taken)
    finally:
        stopwatch.close()


def _rounds(
    stopwatch: _WallClock | _Events,
    runs: Mapping[Hashable, Run],
    warmup_s: float | None,
    budget_s: float,
    bounds: tuple[int, int],
    taken: Snapshot,
) -> dict[Hashable, Timed | Exception]:
    """The rounds of :func:`measure`: warm-up (none for ``warmup_s`` None), then timed rounds
    for ``budget_s``, between ``bounds`` rounds (fewest, most)."""
    fewest, most = bounds
    samples: dict[Hashable, list[float]] = {name: [] for name in runs}
    failed: dict[Hashable, Exception] = {}
    stopped: set[Hashable] = set()

    def live() -> list[Hashable]:
        return [name for name in runs if name not in failed and name not in stopped]

    def one_round(number: int, timed: bool) -> None:
        names = live()
        shift = number % len(names)
        order = [(name, runs[name]) for name in names[shift:] + names[:shift]]
        for name, outcome in stopwatch.round(order).items():
            if isinstance(outcome, Exception):
                failed[name] = outcome
            elif timed:
                samples[name].append(outcome)

    if warmup_s is not None:
        started, rounds = time.perf_counter(), 0
        while live() and (rounds == 0 or time.perf_counter() - started < warmup_s):
            one_round(rounds, timed=False)
            rounds += 1
    started, rounds = time.perf_counter(), 0

    def more() -> bool:
        return rounds < fewest or (rounds < most and time.perf_counter() - started < budget_s)

    while live() and more():
        one_round(rounds, timed=True)
        rounds += 1
        stopped |= early_stopped({name: samples[name] for name in live()}, rounds, taken)
    return {
        name: failed[name] if name in failed else summary(samples[name], name in stopped)
        for name in runs
    }
