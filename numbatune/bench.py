"""Timing kernel launches: CUDA events on a GPU, the wall clock under the simulator.

Variants are measured in interleaved rounds (A B C, A B C, ...), so that clock and thermal
drift hit them all alike. After a warm-up round, one timed round estimates each variant's
cost, and the number of rounds is chosen so that all of them fit the time budget.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune.arrays import SIMULATOR
from numbatune.config import settings


@dataclass(frozen=True)
class Timing:
    """The measured time of one variant."""

    median_s: float
    #: Interquartile range of the timed runs.
    spread_s: float
    runs: int


def _summary(samples: list[float]) -> Timing:
    if len(samples) >= 4:
        quartiles = statistics.quantiles(samples, n=4)
        spread = quartiles[2] - quartiles[0]
    else:
        spread = max(samples) - min(samples)
    return Timing(statistics.median(samples), spread, len(samples))


# Before each round the device is held busy for longer than the host takes to queue the round,
# so that the events time the kernels and not the host's launch overhead (which is larger than
# the run time of a small kernel): the queued launches then run back to back.
_FIRST_HOLD_S = 2e-3
_HOLD_MARGIN = 2.0
_spin_kernel = None


def _hold_device(stream: Any, seconds: float) -> None:
    """Queue a one-thread kernel that keeps ``stream`` busy for about ``seconds``."""
    global _spin_kernel
    if _spin_kernel is None:

        @cuda.jit
        def spin(microseconds: int) -> None:
            for _ in range(microseconds):
                cuda.nanosleep(1000)

        _spin_kernel = spin
    _spin_kernel[1, 1, stream](int(seconds * _HOLD_MARGIN * 1e6) + 20)


def measure(
    runs: Mapping[Hashable, Callable[[], None]], stream: Any = 0
) -> dict[Hashable, Timing | BaseException]:
    """Time each run (a function that queues one launch on ``stream``).

    A run that raises is recorded with its exception and not run again; the others go on.
    """
    outcome: dict[Hashable, list[float] | BaseException] = {name: [] for name in runs}
    _queueing_s = [_FIRST_HOLD_S]

    def live() -> list[Hashable]:
        return [name for name, samples in outcome.items() if isinstance(samples, list)]

    def one_round(timed: bool) -> None:
        if SIMULATOR:
            for name in live():
                started = time.perf_counter()
                try:
                    runs[name]()
                except Exception as error:
                    outcome[name] = error
                    continue
                if timed:
                    outcome[name].append(time.perf_counter() - started)
            return
        events = {}
        _hold_device(stream, _queueing_s[0])
        queueing_started = time.perf_counter()
        for name in live():
            start, end = cuda.event(), cuda.event()
            start.record(stream)
            try:
                runs[name]()
            except Exception as error:
                outcome[name] = error
                continue
            end.record(stream)
            events[name] = (start, end)
        _queueing_s[0] = time.perf_counter() - queueing_started
        for name, (start, end) in events.items():
            end.synchronize()
            if timed:
                outcome[name].append(cuda.event_elapsed_time(start, end) / 1e3)

    if SIMULATOR:
        for _ in range(settings.simulator_runs):
            one_round(timed=True)
    else:
        one_round(timed=False)
        one_round(timed=True)
        estimate = sum(outcome[name][0] for name in live())
        rounds = settings.max_runs if estimate <= 0 else int(settings.budget_s / estimate)
        rounds = max(settings.min_runs, min(settings.max_runs, rounds))
        for _ in range(rounds - 1):
            one_round(timed=True)
    return {
        name: samples if isinstance(samples, BaseException) else _summary(samples)
        for name, samples in outcome.items()
    }
