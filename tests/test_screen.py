"""Screening: variants timed as they compile, the clearly slower ones left out of the tuning's
measurement (fake, deterministic times; on a GPU the timing is CUDA events')."""

import threading
import time

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.config import Isolate, settings
from numbatune.tuning import bench, screen, tuner
from numbatune.tuning.results import Timed
from tests.kernels import forget_shared_state

#: Fake times (us) by the value of BLOCK: 2 is ten times slower than the others.
TIMES = {1: 10.0, 2: 100.0, 4: 12.0, 8: 11.0}


@cuda.jit
def copy(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i]


@pytest.fixture
def fake_times(monkeypatch):
    """bench.measure with TIMES, stopping variants by its own early-stop rule after ``rounds``
    rounds; the variants of each call, and its rounds (None: the tuning's measurement)."""
    calls = []

    def measure(runs, stream=0, inputs=(), restore=lambda: None, rounds=None, taken=None):
        calls.append((sorted(v.params["BLOCK"] for v in runs), rounds))
        count = rounds or settings.min_runs
        broken = {v for v in runs if TIMES[v.params["BLOCK"]] is None}  # its launch raises
        samples = {v: [TIMES[v.params["BLOCK"]] * 1e-6] * count for v in runs if v not in broken}
        stopped = bench.early_stopped(samples, count)
        timed = {v: Timed(runs_[0], 0.0, count, v in stopped) for v, runs_ in samples.items()}
        return timed | {v: RuntimeError("launch failed") for v in broken}

    monkeypatch.setattr(bench, "measure", measure)
    forget_shared_state(monkeypatch)
    return calls


def variant(block):
    return nt.Variant({"BLOCK": block})


def test_screening_drops_the_clearly_slower_and_the_old_best_in_its_turn(fake_times):
    screening = screen.Screen((), 0, lambda: None)
    launch = lambda args, stream: None  # noqa: E731
    screening.screen([(variant(4), launch)])
    screening.screen([(variant(2), launch), (variant(8), launch)])  # 2 is 100 us: out
    TIMES[16] = 7.0  # the best so far, 8, is slower than 1.5 x 7: out in its turn
    try:
        screening.screen([(variant(16), launch)])
    finally:
        del TIMES[16]
    dropped = screening.finish()
    assert fake_times == [([4], 5), ([2, 4, 8], 5), ([8, 16], 5)]
    assert sorted(v.params["BLOCK"] for v in dropped) == [2, 8]
    assert all(timing.stopped_early for timing in dropped.values())


def test_a_tuning_times_only_what_screening_kept_and_says_how_many_it_dropped(
    fake_times, monkeypatch
):
    monkeypatch.setattr(tuner, "_screening", lambda variants: True)
    tuned = nt.autotune(
        variants=nt.product(BLOCK=sorted(TIMES)),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    )(copy)
    x = cuda.to_device(np.arange(16, dtype=np.float32))
    report = tuned.tune(x, cuda.device_array(16, np.float32))
    assert report.screened_out == 1 and report.best == {"BLOCK": 1}
    slow = next(r for r in report.results if r.variant.params == {"BLOCK": 2})
    assert slow.status == "stopped early"
    assert [blocks for blocks, rounds in fake_times if rounds is None] == [[1, 4, 8]]


def test_a_variant_whose_screening_run_raises_is_failed_not_screened_out(fake_times, monkeypatch):
    monkeypatch.setattr(tuner, "_screening", lambda variants: True)
    monkeypatch.setitem(TIMES, 16, None)
    tuned = nt.autotune(
        variants=nt.product(BLOCK=sorted(TIMES)),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    )(copy)
    report = tuned.tune(cuda.to_device(np.ones(16, np.float32)), cuda.device_array(16, np.float32))
    assert report.screened_out == 1  # BLOCK=2, the slow one
    broken = next(r for r in report.results if r.variant.params == {"BLOCK": 16})
    assert broken.status == "failed" and "launch failed" in broken.error
    assert [blocks for blocks, rounds in fake_times if rounds is None] == [[1, 4, 8]]


def test_a_tuning_interrupted_while_compiling_stops_screening_after_the_batch_under_way(
    fake_times, monkeypatch
):
    monkeypatch.setattr(tuner, "_screening", lambda variants: True)
    monkeypatch.setattr(nt.settings, "isolate", Isolate.OFF)  # nothing is compiled: no trials
    screens, timing = [], threading.Event()
    measure, make = bench.measure, screen.Screen

    def held(*args, **options):  # the first batch lasts until the tuning has given up
        timing.set()
        deadline = time.monotonic() + 30
        while not screens[0]._abandoned and time.monotonic() < deadline:
            time.sleep(0.001)
        return measure(*args, **options)

    def interrupted(variants, args, done, tally, ready, taken):
        first, *rest = variants
        ready([first], True)
        assert timing.wait(30)  # the first is being timed: the others wait in the queue
        ready(rest, True)
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "measure", held)
    monkeypatch.setattr(tuner, "Screen", lambda *args: screens.append(make(*args)) or screens[0])
    tuned = nt.autotune(
        variants=nt.product(BLOCK=sorted(TIMES)),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    )(copy)
    monkeypatch.setattr(tuned._compiler, "compile_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tuned.tune(cuda.to_device(np.ones(16, np.float32)), cuda.device_array(16, np.float32))
    assert not screens[0]._thread.is_alive()
    assert fake_times == [([1], 5)]  # the others, arrived, were never timed
