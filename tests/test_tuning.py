"""The core paths of a tuned kernel: specialisation, keys, miss, hit, force, data safety."""

import logging
import threading

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR
from tests import kernels


def device(array):
    return cuda.to_device(np.ascontiguousarray(array))


def tuned_matmul(tpbs):
    return nt.autotune(variants=nt.product(TPB=tpbs), launch=kernels.matmul_launch)(
        kernels.fast_matmul
    )


def tuned_accumulate(blocks=(2, 4, 8), **options):
    return nt.autotune(
        variants=nt.product(BLOCK=list(blocks)), launch=kernels.accumulate_launch, **options
    )(kernels.accumulate)


@pytest.mark.parametrize("tpb", [2, 4, 8])
def test_each_variant_of_numba_docs_fast_matmul_computes_the_product(tpb):
    rng = np.random.default_rng(tpb)
    a = rng.random((8, 8), dtype=np.float32)
    b = rng.random((8, 8), dtype=np.float32)
    c = device(np.zeros((8, 8), np.float32))
    tuned_matmul([tpb])(device(a), device(b), c)
    np.testing.assert_allclose(c.copy_to_host(), a @ b, rtol=1e-5)


def test_tuned_fast_matmul_benchmarks_once_then_hits_memory():
    rng = np.random.default_rng(0)
    a, b = rng.random((8, 8), dtype=np.float32), rng.random((8, 8), dtype=np.float32)
    tuned = tuned_matmul([2, 4, 8])
    c = device(np.zeros((8, 8), np.float32))
    tuned(device(a), device(b), c)
    tuned(device(a), device(b), c)
    np.testing.assert_allclose(c.copy_to_host(), a @ b, rtol=1e-5)
    assert tuned.stats["benchmarks"] == 1


def test_closure_constants_specialise_too():
    def make(width):
        @cuda.jit
        def fill(out):
            i = cuda.grid(1)
            if i < out.shape[0]:
                out[i] = width

        return fill

    tuned = nt.autotune(variants=[{"width": 7}], launch=lambda out: (1, out.shape[0]))(make(1))
    out = device(np.zeros(4, np.int32))
    tuned(out)
    assert out.copy_to_host().tolist() == [7, 7, 7, 7]


FILL_VALUE = 1


def test_a_plain_function_can_be_decorated():
    def fill(out):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = FILL_VALUE

    tuned = nt.autotune(variants=[{"FILL_VALUE": 3}], launch=lambda out: (1, out.shape[0]))(fill)
    out = device(np.zeros(4, np.int32))
    tuned(out)
    assert out.copy_to_host().tolist() == [3, 3, 3, 3]


def test_one_variant_is_not_benchmarked():
    tuned = tuned_accumulate(blocks=[4])
    report = tuned.tune(device(np.ones(8, np.float32)), device(np.zeros(8, np.float32)))
    assert report.source == "single"
    assert tuned.stats["benchmarks"] == 0
    assert report.best == {"BLOCK": 4}


def test_report_lists_every_variant_and_the_winner_is_the_fastest():
    tuned = tuned_accumulate()
    report = tuned.tune(device(np.ones(8, np.float32)), device(np.zeros(8, np.float32)))
    assert report.source == "benchmark"
    assert [r.params for r in report.results] == [{"BLOCK": 2}, {"BLOCK": 4}, {"BLOCK": 8}]
    assert all(r.error is None and r.median_s > 0 for r in report.results)
    fastest = min(report.results, key=lambda r: r.median_s)
    assert report.best == fastest.params
    assert tuned.variants == nt.product(BLOCK=[2, 4, 8])


def test_the_report_gives_the_whole_winner_with_its_jit_options(caplog, capsys):
    from numbatune.cli import main

    tuned = nt.autotune(
        variants=nt.product(BLOCK=[2, 4], jit={"fastmath": [True]}),
        launch=kernels.accumulate_launch,
    )(kernels.accumulate)
    caplog.set_level(logging.INFO, logger="numbatune")
    args = device(np.ones(8, np.float32)), device(np.zeros(8, np.float32))
    report = tuned.tune(*args)
    assert report.winner.jit == {"fastmath": True}
    assert report.winner.params == report.best == tuned.best(*args)  # what host code reads
    assert f"winner={report.winner!r}" in repr(report)  # Variant(BLOCK=..., fastmath=True)
    top = caplog.text.partition("variants): ")[2]
    assert top.count("fastmath=True") == 2  # the log of the fastest names them whole
    assert main(["cache", "show", "accumulate"]) == 0
    assert capsys.readouterr().out.count("fastmath=True") == 2


def test_tune_answers_from_memory_then_force_measures_again():
    tuned = tuned_accumulate()
    args = device(np.ones(8, np.float32)), device(np.zeros(8, np.float32))
    assert tuned.tune(*args).source == "benchmark"
    assert tuned.tune(*args).source == "memory"
    winners = tuned._device_state().cache.winners
    published = winners.published
    assert tuned.tune(*args, force=True).source == "benchmark"
    assert tuned.stats["benchmarks"] == 2
    assert winners.published == published + 1  # (fast paths keep a winner until it moves)


def test_sizes_with_the_same_anchor_share_a_result_and_other_dtypes_do_not():
    tuned = tuned_accumulate()
    for n, dtype in [(7, np.float32), (8, np.float32), (5, np.float32), (8, np.float64)]:
        tuned(device(np.ones(n, dtype)), device(np.zeros(n, dtype)))
    assert tuned.stats["benchmarks"] == 2  # 5, 7 and 8 anchor to 8; float64 is a new key


def test_named_key_uses_scalar_values_and_array_shapes():
    @cuda.jit
    def scale(a, out, factor):
        i = cuda.grid(1)
        if i < a.shape[0]:
            out[i] = a[i] * factor

    tuned = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda a, out, factor, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
        key=["a", "factor"],
    )(scale)
    a, out = device(np.arange(6, dtype=np.float32)), device(np.zeros(6, np.float32))
    report = tuned.tune(a, out, 2.0)
    assert report.key[:2] == (((8,), "float32", "C"), 2.0)
    tuned(a, out, 3.0)
    assert tuned.stats["benchmarks"] == 2
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(6) * 3.0)


def test_function_key_decides_which_calls_share_a_result():
    tuned = tuned_accumulate(key=lambda a, out: "one key for all sizes")
    for n in (3, 8, 30):
        tuned(device(np.ones(n, np.float32)), device(np.zeros(n, np.float32)))
    assert tuned.stats["benchmarks"] == 1


@cuda.jit
def forward_or_adjoint(x, out, adjoint):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = -x[i] if adjoint else x[i]


def _x_out_launch(x, out, flag, *, BLOCK):
    return nt.cdiv(x.shape[0], BLOCK), BLOCK


def test_a_boolean_argument_is_a_mode_flag_of_the_default_key():
    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=_x_out_launch)(forward_or_adjoint)
    x, out = device(np.arange(6, dtype=np.float32)), device(np.zeros(6, np.float32))
    forward = tuned.tune(x, out, False)
    adjoint = tuned.tune(x, out, True)
    assert forward.key == (((8,), "float32", "C"), ((8,), "float32", "C"), False)
    assert adjoint.key == (*forward.key[:2], True)
    assert adjoint.source == "benchmark"  # not the forward's winner
    assert tuned.tune(x, out, np.bool_(True)).source == "memory"  # NumPy's bool: the same mode
    tuned(x, out, True)
    np.testing.assert_array_equal(out.copy_to_host(), -np.arange(6))
    assert tuned.stats["benchmarks"] == 2


def test_the_callers_arrays_hold_exactly_one_launch_on_a_miss_and_a_hit():
    tuned = tuned_accumulate()
    a, out = device(np.arange(8, dtype=np.float32)), device(np.ones(8, np.float32))
    tuned(a, out)  # miss: benchmarks on clones, then one launch on the caller's arrays
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(8) + 1)
    tuned(a, out)  # hit
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(8) + 1)
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(8))


def test_tune_never_writes_into_the_callers_arrays():
    tuned = tuned_accumulate()
    a, out = device(np.arange(8, dtype=np.float32)), device(np.ones(8, np.float32))
    tuned.tune(a, out)
    tuned.tune(a, out, force=True)
    np.testing.assert_array_equal(out.copy_to_host(), np.ones(8))


def test_concurrent_callers_of_a_new_key_share_one_benchmark():
    tuned = tuned_accumulate()
    outputs = [device(np.zeros(8, np.float32)) for _ in range(6)]
    a = device(np.arange(8, dtype=np.float32))
    start = threading.Barrier(len(outputs))
    errors = []

    def call(out):
        start.wait()
        try:
            tuned(a, out)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(out,)) for out in outputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert tuned.stats["benchmarks"] == 1
    for out in outputs:
        np.testing.assert_array_equal(out.copy_to_host(), np.arange(8))


def test_a_forced_retune_that_fails_keeps_the_known_winner(monkeypatch):
    from numbatune.tuning import tuner

    tuned = tuned_accumulate()
    args = device(np.ones(8, np.float32)), device(np.zeros(8, np.float32))
    known = tuned.tune(*args).best

    def failing(job):
        raise nt.TuningError("every variant failed")

    monkeypatch.setattr(tuner, "tune", failing)
    with pytest.raises(nt.TuningError):
        tuned.tune(*args, force=True)
    report = tuned.tune(*args)
    assert report.source == "memory" and report.best == known


def test_importing_numbatune_leaves_the_environment_of_child_processes_alone():
    import os
    import subprocess
    import sys

    script = (
        "import os, numbatune, numba.cuda\n"
        "from numba.cuda.core import config\n"
        "config.reload_config()\n"
        "print(os.environ.get('NUMBA_ENABLE_CUDASIM'), numbatune.arrays.SIMULATOR == bool("
        "config.ENABLE_CUDASIM))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["None", "True"]


def test_a_kernel_defined_with_nothing_stored_gets_its_compile_workers_ready(
    monkeypatch, numbatune_cache, tmp_path
):
    from numbatune import processes
    from numbatune.compile.compiler import Compiler

    prepared = []
    monkeypatch.setattr(Compiler, "prepare", lambda self, variants: prepared.append(len(variants)))
    tuned = tuned_accumulate()  # nothing of it in the cache: its first call will tune
    assert prepared == [len(tuned.variants)]
    tuned(device(np.ones(8, np.float32)), device(np.zeros(8, np.float32)))
    tuned_accumulate()  # stored now: a process that defines it again is likely to hit
    assert prepared == [len(tuned.variants)]
    nt.configure(cache_dir=tmp_path / "empty")
    monkeypatch.setattr(processes, "_in_worker", True)  # a worker imports the user's modules
    tuned_accumulate()
    assert prepared == [len(tuned.variants)]


def test_a_tuning_keeps_the_settings_it_began_with(monkeypatch):
    """Settings changed while a key is tuned (here by its launch function, which runs as the
    variants compile) apply to the next tuning, not to the one under way."""
    # How many timed runs each variant gets: under the simulator, on a GPU (no more than
    # early_stop_rounds, so that a variant the early stop drops has had them all).
    names = ["simulator_runs"] if SIMULATOR else ["min_runs", "max_runs"]
    for name in names:
        monkeypatch.setattr(nt.settings, name, getattr(nt.settings, name))  # restored after
    runs = 2
    nt.configure(**dict.fromkeys(names, runs))

    def launch(a, out, *, BLOCK):
        nt.configure(**dict.fromkeys(names, runs + 3))
        return nt.cdiv(a.shape[0], BLOCK), BLOCK

    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4, 8]), launch=launch)(kernels.accumulate)
    a, out = device(np.ones(16, np.float32)), device(np.zeros(16, np.float32))
    first = tuned.tune(a, out)
    assert {result.runs for result in first.results} == {runs}
    again = tuned.tune(a, out, force=True)
    assert {result.runs for result in again.results} == {runs + 3}


# -- searches measured in batches, with fake times ------------------------------------------------


def cost(variant):
    """A fake time (us) of a variant of `searched`: least at REPS=7."""
    return 10 + abs(variant.params["REPS"] - 7)


@pytest.fixture
def drifting_times(monkeypatch):
    """Tuning measures with ``cost`` instead of a stopwatch, each batch twice as slow as the one
    before (as a GPU that heats up, or that another process shares, slows down); each measured
    batch is kept."""
    from numbatune.tuning import bench, tuner
    from numbatune.tuning.results import Timed

    batches = []

    def measure(runs, *rest, **options):
        batches.append(list(runs))
        slower = 2 ** (len(batches) - 1)
        return {v: Timed(cost(v) * slower * 1e-6, 0.0, 10) for v in runs}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(tuner, "_screening", lambda variants: False)
    monkeypatch.setattr(nt.settings, "compile_workers", 1)  # batches of 8 variants
    kernels.forget_shared_state(monkeypatch)
    return batches


def searched(count=10, **options):
    """A random search over ``count`` variants, each a build of its own."""
    return nt.autotune(
        variants=nt.product(REPS=range(1, count + 1)),
        launch=lambda a, out: (1, 32),
        search="random",
        **options,
    )(kernels.repeated_sine)


def sine_arguments():
    return device(np.ones(32, np.float32)), device(np.zeros(32, np.float32))


def cut_short_in_batch(number, batches, monkeypatch):
    """Measuring raises KeyboardInterrupt in batch ``number`` (as a user's Ctrl-C would stop a
    tuning); the measure to restore."""
    from numbatune.tuning import bench

    measure = bench.measure

    def interrupted(runs, *rest, **options):
        if len(batches) == number - 1:
            raise KeyboardInterrupt
        return measure(runs, *rest, **options)

    monkeypatch.setattr(bench, "measure", interrupted)
    return measure


@pytest.mark.parametrize("resumed", [False, True])
def test_the_progress_line_never_counts_past_its_total(drifting_times, monkeypatch, resumed):
    import io
    import re
    import sys

    from numbatune.tuning import bench, progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    if resumed:  # the first batch of 8 is measured, the tuning is cut short in the second
        measure = cut_short_in_batch(2, drifting_times, monkeypatch)
        with pytest.raises(KeyboardInterrupt):
            searched().tune(*sine_arguments())
        monkeypatch.setattr(bench, "measure", measure)
        kernels.forget_shared_state(monkeypatch)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress, "_DELAY_S", 0.0)
    report = searched().tune(*sine_arguments())
    assert len(drifting_times) == 2  # 8 variants, then 2 with the best so far, measured again
    counts = [
        (int(done), int(total)) for done, total in re.findall(r"(\d+)/(\d+)", terminal.getvalue())
    ]
    assert counts and all(done <= total == 10 for done, total in counts)
    assert counts[-1] == (report.tried, 10) == (10, 10)


def test_the_fastest_of_a_report_is_the_winner_its_search_chose(drifting_times, caplog):
    caplog.set_level(logging.INFO, logger="numbatune")
    report = searched().tune(*sine_arguments())
    first, again = drifting_times
    assert report.winner == min(first + again, key=cost)  # REPS=7: the decision is right
    # Measured twice as fast in the first batch, its losers' medians are below the winner's,
    # measured again in the second: the report still names the winner first, as the log does.
    assert any(r.median_s < report.results[report.best_index].median_s for r in report.results)
    fastest = report.fastest(len(report.results))
    assert fastest[0] == report.results[report.best_index]
    assert len(fastest) == len(report.results) and set(fastest) == set(report.results)
    assert caplog.text.partition("variants): ")[2].startswith(report.winner.label)


@pytest.mark.parametrize(
    ("count", "budget", "kept"),
    [
        (5, None, []),  # one batch: all of the space
        (10, nt.Budget(seconds=15), []),  # one batch: all of the seconds
        (10, None, [8]),  # two batches: the first is kept
    ],
)
def test_a_search_keeps_its_outcomes_only_for_a_batch_that_another_follows(
    drifting_times, monkeypatch, count, budget, kept
):
    """What a search keeps on disk is for a tuning cut short in a later batch: a search
    measured in one batch keeps nothing (nor does the last batch of one measured in several)."""
    import types

    from numbatune.cache.journal import DiskJournal
    from numbatune.tuning import bench, tuner

    clock = [0.0]
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    measure = bench.measure

    def measure_for_20_s(runs, *rest, **options):
        clock[0] += 20.0
        return measure(runs, *rest, **options)

    record = DiskJournal.record
    recorded = []

    def recording(journal, outcomes):
        recorded.append(len(outcomes))
        record(journal, outcomes)

    monkeypatch.setattr(bench, "measure", measure_for_20_s)
    monkeypatch.setattr(DiskJournal, "record", recording)
    report = searched(count, **({} if budget is None else {"budget": budget})).tune(
        *sine_arguments()
    )
    assert recorded == kept
    assert report.tried == sum(len(batch) for batch in drifting_times) - len(drifting_times) + 1


def test_the_removed_report_names_warn_and_still_answer():
    import dataclasses

    report = nt.TuneReport("key", 0, nt.Source.BENCHMARK, (nt.VariantResult(nt.Variant({})),))
    with pytest.warns(DeprecationWarning, match="best_variant is deprecated; use TuneReport.win"):
        assert report.best_variant == report.winner
    with pytest.warns(DeprecationWarning, match=r"use dataclasses.replace\(report, source=...\)"):
        moved = report.with_source("disk")
    assert moved == dataclasses.replace(report, source=nt.Source.DISK)


def faked_times(monkeypatch, medians):
    """Tuning measures ``medians`` (us, by BLOCK; a function of the measurement's number, from
    0) instead of a stopwatch, with no spread; each measured set of BLOCKs is kept. Screening
    (on a GPU; test_screen's) is off: it would time variants through ``bench.measure`` too."""
    from numbatune.tuning import bench, tuner
    from numbatune.tuning.results import Timed

    measured = []

    def measure(runs, *rest, **options):
        times = medians(len(measured))
        measured.append(sorted(v.params["BLOCK"] for v in runs))
        return {v: Timed(times[v.params["BLOCK"]] * 1e-6, 0.0, 10) for v in runs}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(tuner, "_screening", lambda variants: False)
    return measured


BLOCK = 4  # the kernel as written


@cuda.jit
def add_blocks(a, out):
    i = cuda.grid(1)
    if i < a.shape[0] and BLOCK > 0:  # (reads BLOCK: the kernel as written has BLOCK=4)
        out[i] += a[i]


def four_blocks():
    return nt.autotune(variants=nt.product(BLOCK=[2, 4, 8, 16]), launch=kernels.accumulate_launch)(
        add_blocks
    )


def device_pair(n):
    return device(np.ones(n, np.float32)), device(np.zeros(n, np.float32))


@pytest.mark.parametrize("faster", [2, 4, 8])
def test_variants_within_noise_are_timed_again_and_the_kernel_as_written_wins(monkeypatch, faster):
    """BLOCK=2, 4 and 8 lie within 0.5% of each other, whichever is fastest (as in fresh
    processes): they are timed again together, and the kernel as written (BLOCK=4) wins."""
    measured = faked_times(monkeypatch, lambda _: {2: 1.0, 4: 1.0, 8: 1.0, 16: 3.0, faster: 0.995})
    report = four_blocks().tune(*device_pair(8))
    assert measured == [[2, 4, 8, 16], [2, 4, 8]]
    assert report.best == {"BLOCK": 4} and report.tied == (0, 1, 2)
    kernels.forget_shared_state(monkeypatch)
    stored = four_blocks().tune(*device_pair(8))
    assert stored.source == "disk" and stored.tied == (0, 1, 2) and stored.best == {"BLOCK": 4}


def test_ties_without_the_kernel_as_written_go_to_the_first_variant_and_are_timed_once(
    monkeypatch,
):
    """BLOCK=8 is fastest at first; timed again, BLOCK=2 and 8 are still tied and BLOCK=16
    is out: the first of the two wins."""
    first = {2: 1.005, 4: 2.0, 8: 1.0, 16: 1.005}
    measured = faked_times(monkeypatch, lambda n: first if n == 0 else {**first, 16: 1.5})
    report = four_blocks().tune(*device_pair(8))
    assert measured == [[2, 4, 8, 16], [2, 8, 16]]
    assert report.best == {"BLOCK": 2} and report.tied == (0, 2)
    assert report.results[3].median_s == pytest.approx(1.5e-6)  # its latest time


def test_a_variant_clearly_slower_than_the_best_is_no_tie(monkeypatch):
    measured = faked_times(monkeypatch, lambda _: {2: 1.0, 4: 1.1, 8: 1.2, 16: 3.0})
    report = four_blocks().tune(*device_pair(8))
    assert measured == [[2, 4, 8, 16]] and report.best == {"BLOCK": 2} and report.tied == ()


@pytest.mark.parametrize(
    ("leader", "other", "tie"),
    [((1.0, 0.0), (1.009, 0.0), True),  # within the floor, 1%
     ((1.0, 0.0), (1.015, 0.0), False),
     ((1.0, 0.03), (1.015, 0.03), True),  # their middle halves overlap
     ((1.0, 0.2), (1.03, 0.2), False),  # overlapping, but beyond the ceiling, 2%
     ((1.0, 0.0), (1.0, 0.0, 10, True), False)],  # stopped early: clearly slower
)  # fmt: skip
def test_within_noise_is_the_overlap_of_the_spreads_between_a_floor_and_a_ceiling(
    leader, other, tie
):
    from numbatune.tuning import bench
    from numbatune.tuning.results import Timed

    first, second = Timed(*leader, 10), Timed(*other) if len(other) > 2 else Timed(*other, 10)
    assert bench.within_noise(first, second) is tie
