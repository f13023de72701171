"""Timing as the kernels will run: ``timing="graph"`` times each variant as replays of a CUDA
graph of its launches, the report says so, and a stored result serves only a tuning timed
alike."""

import logging

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR
from numbatune.cache import entry as entries
from numbatune.config import Snapshot
from numbatune.tuning import bench, tuner
from numbatune.tuning.job import Bound
from numbatune.tuning.results import Timed
from tests.test_graphs import N, add_twice, add_twice_launch


def _tuned(variants=None, **options):
    return nt.autotune(
        variants=variants or nt.product(BLOCK=[64, 128]), launch=add_twice_launch, **options
    )(add_twice)


def _arrays(n=N):
    return cuda.to_device(np.ones(n, np.float32)), cuda.to_device(np.zeros(n, np.float32))


def test_timing_is_launches_or_graph_and_anything_else_is_refused():
    with pytest.raises(ValueError, match=r"autotune\(add_twice\): timing must be one of "
                       r"launches, graph \(or None for the timing setting, NUMBATUNE_TIMING\), "
                       r"got 'cupti'"):  # fmt: skip
        _tuned(timing="cupti")
    with pytest.raises(ValueError, match="timing must be one of launches, graph"):
        _tuned(timing="wall clock")  # (what a report may say, not a choice)
    with pytest.raises(ValueError, match=r"setting timing \(NUMBATUNE_TIMING\): must be one of "
                       "launches, graph"):  # fmt: skip
        nt.configure(timing="wall clock")
    assert nt.settings.timing is nt.Timing.LAUNCHES
    try:
        assert nt.configure(timing="GRAPH").timing is nt.Timing.GRAPH
    finally:
        nt.configure(timing="launches")


@pytest.mark.skipif(not SIMULATOR, reason="what graph timing does where there are no graphs")
def test_under_the_simulator_graph_timing_is_the_wall_clock_and_says_so_once(caplog, monkeypatch):
    """The simulator has no graphs: code tuned with graph timing runs there as it is, timed
    by the wall clock as every tuning there, and the log says so once a process."""
    monkeypatch.setattr(bench, "_told_no_graphs", False)
    tuned = _tuned(timing="graph")
    a, out = _arrays()
    with caplog.at_level(logging.INFO, logger="numbatune"):
        report = tuned.tune(a, out)
        tuned.tune(*_arrays(2 * N))
    assert report.timing is nt.Timing.WALL_CLOCK and report.results[0].median_s is not None
    assert caplog.text.count("numba's simulator has no CUDA graphs") == 1
    assert "timed as wall clock" in caplog.text
    tuned(a, out)
    assert (out.copy_to_host() == 2).all()


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Tuning times as a GPU would be asked to (the timing its settings ask for), with made-up
    times; the settings each measurement was given are kept."""
    given = []

    def measure(runs, stream=0, inputs=(), restore=lambda: None, rounds=None, taken=None):
        given.append(taken)
        return {name: Timed(1e-6 * (1 + index), 0.0, 10) for index, name in enumerate(runs)}

    monkeypatch.setattr(bench, "SIMULATOR", False)
    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(bench, "prepare", lambda: None)
    monkeypatch.setattr(tuner, "_screening", lambda variants: False)
    return given


def test_a_stored_result_serves_only_a_tuning_timed_alike(numbatune_cache, as_on_a_gpu):
    """Graph replays and launches are different measurements (their winners may differ): the
    disk entry records how its key was timed, and a tuning that times otherwise tunes the key
    again. Kernels told apart by their names share nothing in memory, as new processes."""
    a, out = _arrays()
    launched = _tuned().tune(a, out)
    assert launched.source == "benchmark" and launched.timing is nt.Timing.LAUNCHES
    graphed = _tuned(timing="graph", name="graphed").tune(a, out)
    assert graphed.source == "benchmark" and graphed.timing is nt.Timing.GRAPH
    assert as_on_a_gpu[-1].timing is nt.Timing.GRAPH  # what the stopwatch was told
    assert _tuned(timing="graph", name="again").tune(a, out).source == "disk"
    nt.configure(timing="graph")  # the setting, for kernels that do not say
    try:
        assert _tuned(name="by the setting").tune(a, out).source == "disk"
    finally:
        nt.configure(timing="launches")
    assert _tuned(name="launched again").tune(a, out).source == "benchmark"


P = 1


@cuda.jit
def add_scaled(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] += P * a[i]


def _searched(timing, **options):
    """20 variants of a kernel that reads P, measured in three batches (a random search)."""
    return nt.autotune(
        variants=nt.product(P=range(20)),
        launch=lambda a, out: (4, 64),
        timing=timing,
        search="random",
        budget=20,
        **options,
    )(add_scaled)


@pytest.mark.parametrize(("resumed", "goes_on"), [("graph", True), ("launches", False)])
def test_an_unfinished_tuning_goes_on_only_when_timed_alike(
    numbatune_cache, as_on_a_gpu, monkeypatch, caplog, resumed, goes_on
):
    """A search cut short after its first batch keeps that batch's outcomes in its journal: a
    tuning of the key timed alike goes on from them, one timed otherwise starts over."""
    a, out = _arrays()
    measure, calls = bench.measure, []

    def cut_short(*args, **options):
        if calls:
            raise KeyboardInterrupt
        calls.append(args)
        return measure(*args, **options)

    monkeypatch.setattr(bench, "measure", cut_short)
    with pytest.raises(KeyboardInterrupt):
        _searched("graph").tune(a, out)
    monkeypatch.setattr(bench, "measure", measure)
    with caplog.at_level(logging.INFO, logger="numbatune"):
        report = _searched(resumed, name="resumed").tune(a, out)
    assert ("going on with an unfinished tuning" in caplog.text) == goes_on
    assert report.timing == resumed and report.tried == 20


def test_an_entry_stored_before_timing_was_kept_was_timed_as_launches():
    report = _tuned().tune(*_arrays())
    variants = {v.label: v for v in nt.product(BLOCK=[64, 128])}
    stored = entries.encode(report, "sum", "f", "k")
    assert stored["timing"] == ("wall clock" if SIMULATOR else "launches")
    del stored["timing"]
    assert entries.decode(stored, "k", variants, "sum").timing is nt.Timing.LAUNCHES
    with pytest.raises(entries.DamagedEntry, match="timing 'fast' is not a timing"):
        entries.check({**stored, "timing": "fast"})


@pytest.mark.gpu
def test_graph_timing_times_replays_and_its_winner_runs_correctly(caplog):
    tuned = _tuned(variants=nt.product(BLOCK=[32, 128, 512]), timing="graph")
    a, out = _arrays(1 << 20)
    with caplog.at_level(logging.INFO, logger="numbatune"):
        report = tuned.tune(a, out)
    assert report.timing is nt.Timing.GRAPH and "timed as graph" in caplog.text
    assert all(result.median_s > 0 for result in report.results)
    assert not out.copy_to_host().any()  # tuning never writes the caller's arrays
    tuned(a, out)
    assert (out.copy_to_host() == 2).all()


@pytest.mark.gpu
def test_a_run_that_cannot_be_captured_fails_saying_so_and_the_others_are_timed():
    """Waiting for the stream is refused inside a capture (and invalidates it): that run
    could not run inside a graph. The others are captured and timed as usual."""
    a, out = _arrays()

    def launch(args, stream):
        add_twice[1, N, stream](*args)

    def waits(args, stream):
        launch(args, stream)
        (stream or cuda.default_stream()).synchronize()

    runs = {"waits": Bound(waits, (a, out), 0), "launches": Bound(launch, (a, out), 0)}
    timings = bench.measure(runs, 0, (a, out), taken=Snapshot(timing=nt.Timing.GRAPH))
    assert "cannot be captured into a CUDA graph" in str(timings["waits"])
    assert isinstance(timings["launches"], Timed) and timings["launches"].median_s > 0
