"""Serve now, tune later: keys recorded for a sweep, served from the nearest tuned key, or
tuned in the background while the program runs."""

import json
import os
import re

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import arrays as nt_arrays
from numbatune import record
from numbatune.tuning import bench
from numbatune.tuning.results import Timed
from tests import workers
from tests.kernels import forget_shared_state

BLOCK = 8  # the kernel as written


@cuda.jit
def triple(x, out):
    i = cuda.grid(1)
    if i < x.shape[0] and BLOCK > 0:  # (reads BLOCK: the kernel as written has BLOCK=8)
        out[i] = 3 * x[i]


def tuned(**options):
    return nt.autotune(
        variants=nt.product(BLOCK=[2, 4, 8, 16]),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
        key=lambda x, out: x.shape[0],
        **options,
    )(triple)


def arrays(n):
    return cuda.to_device(np.arange(n, dtype=np.float32)), cuda.to_device(np.zeros(n, np.float32))


@pytest.fixture
def on_miss(monkeypatch, numbatune_cache):
    forget_shared_state(monkeypatch)
    record._written.clear()

    def choose(mode):
        monkeypatch.setattr(nt.settings, "on_miss", nt.OnMiss(mode))

    return choose


def winner_of(kernel, n):
    """The winner the kernel's table holds for its key of size ``n``."""
    (found,) = [w for k, w in kernel._device_state().cache.winners.items() if k[0] == n]
    return found


def winning(monkeypatch, block):
    """Tunings from now on measure BLOCK=block fastest (a fake stopwatch)."""
    times = {nt.Variant({"BLOCK": b}): Timed((1 if b == block else 2) * 1e-6, 0.0, 10)
             for b in (2, 4, 8, 16)}  # fmt: skip
    monkeypatch.setattr(
        bench, "measure", lambda runs, *rest, **options: {v: times[v] for v in runs}
    )


def test_with_nothing_tuned_a_call_launches_the_kernel_as_written_and_records_the_key(
    on_miss, numbatune_cache
):
    on_miss("nearest")
    kernel, (x, out) = tuned(), arrays(40)
    kernel(x, out)
    assert out.copy_to_host().tolist() == [3.0 * i for i in range(40)]
    winner = winner_of(kernel, 40)
    assert winner.variant == nt.Variant({"BLOCK": 8}) and winner.report.source == "untuned"
    assert kernel.stats["benchmarks"] == 0
    (line,) = (numbatune_cache / "record.jsonl").read_text().splitlines()
    recorded = json.loads(line)
    assert recorded["function"] == kernel.function_id and recorded["key"].startswith("(40, ")
    assert recorded["arguments"][0] == {"shape": [40], "strides": [4], "dtype": "float32"}


def test_a_call_launches_the_winner_of_the_nearest_tuned_key(on_miss, monkeypatch):
    kernel = tuned()
    winning(monkeypatch, 2)
    kernel.tune(*arrays(64))
    winning(monkeypatch, 16)
    kernel.tune(*arrays(4096))  # further from 100 than 64 is
    on_miss("nearest")
    x, out = arrays(100)
    kernel(x, out)
    served = winner_of(kernel, 100)
    assert served.report.source == "nearest" and served.variant == nt.Variant({"BLOCK": 2})
    assert out.copy_to_host().tolist() == [3.0 * i for i in range(100)]


def test_tune_called_on_a_served_key_tunes_it(on_miss):
    on_miss("nearest")
    kernel, (x, out) = tuned(), arrays(40)
    kernel(x, out)
    report = kernel.tune(x, out)
    assert report.source == "benchmark" and kernel.stats["benchmarks"] == 1
    assert winner_of(kernel, 40).report.source == "benchmark"


def test_a_key_served_now_is_tuned_in_the_background_and_its_winner_replaces_it(on_miss):
    on_miss("background")
    kernel, (x, out) = tuned(), arrays(40)
    kernel(x, out)
    assert nt.wait_for_background_tuning(timeout_s=120)
    winner = winner_of(kernel, 40)
    assert winner.report.source == "benchmark" and kernel.stats["benchmarks"] == 1
    out.copy_to_device(np.zeros(40, np.float32))
    kernel(x, out)
    assert out.copy_to_host().tolist() == [3.0 * i for i in range(40)]


def test_the_on_miss_option_of_a_kernel_wins_over_the_setting(on_miss):
    served = tuned(on_miss="nearest")
    served(*arrays(40))  # the setting says tune
    assert winner_of(served, 40).report.source == "untuned" and served.stats["benchmarks"] == 0
    fewer = served.with_variants(served.variants[:3])  # carries its options, on_miss too
    fewer(*arrays(64))
    assert winner_of(fewer, 64).report.source in ("nearest", "untuned")
    assert fewer.stats["benchmarks"] == 0
    on_miss("nearest")
    following = tuned(on_miss=None)  # the setting
    following(*arrays(128))
    assert following.stats["benchmarks"] == 0
    tuning = tuned(on_miss=nt.OnMiss.TUNE)
    tuning(*arrays(256))
    assert winner_of(tuning, 256).report.source == "benchmark"


def test_on_miss_background_as_an_option_tunes_the_served_key_in_the_background(on_miss):
    kernel, (x, out) = tuned(on_miss="background"), arrays(40)
    kernel(x, out)
    assert nt.wait_for_background_tuning(timeout_s=120)
    assert winner_of(kernel, 40).report.source == "benchmark" and kernel.stats["benchmarks"] == 1


@pytest.mark.parametrize("how", ["setting", "option"])
def test_on_miss_error_raises_naming_the_key_and_measures_nothing(on_miss, how):
    if how == "setting":
        on_miss("error")  # NUMBATUNE_ON_MISS=error
    kernel = tuned(on_miss="error" if how == "option" else None)
    x, out = arrays(40)
    with pytest.raises(nt.TuningKeyError, match=r"^triple: key \(40, .* has no stored result"):
        kernel(x, out)
    assert kernel.stats == {"compiles": 0, "loaded": 0, "benchmarks": 0}
    assert out.copy_to_host().tolist() == [0.0] * 40
    kernel.tune(x, out)  # an explicit request tunes; the call then hits
    kernel(x, out)
    assert out.copy_to_host().tolist() == [3.0 * i for i in range(40)]


@pytest.mark.parametrize("value", ["later", "NEAREST ", 1])
def test_an_unknown_on_miss_option_is_refused_when_the_kernel_is_defined(value):
    message = (
        r"^autotune\(triple\): on_miss must be one of tune, nearest, background, error \(or "
        rf"None for the on_miss setting, NUMBATUNE_ON_MISS\), got {re.escape(repr(value))}$"
    )
    with pytest.raises(ValueError, match=message):
        tuned(on_miss=value)


def test_the_record_setting_records_each_key_once_per_process(on_miss, tmp_path, monkeypatch):
    path = tmp_path / "keys.jsonl"
    monkeypatch.setattr(nt.settings, "record", path)
    kernel = tuned()
    for n in (40, 40, 64, 40):
        kernel(*arrays(n))
    a = np.float32(2.5)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["key"][:4] for line in lines] == ["(40,", "(64,"]
    assert record.describe(a) == {"scalar": 2.5, "type": "float32"}
    (again,) = [r for r in record.read(path).records if r.key.startswith("(64,")]
    rebuilt = record.rebuild_all(again.arguments)
    assert rebuilt[0].shape == (64,) and rebuilt[0].dtype == np.float32


@pytest.mark.parametrize(
    "line",
    ['{"format": 2}', "not json", '{"format": 1, "function": "f", "module": "m", "qualname": "q", '
     '"arguments": [{"shape": [4], "strides": [2], "dtype": "float32"}]}',
     '{"format": 1, "function": "f", "module": "m", "qua',
     '{"format": 1, "function": "f", "module": "m", "qualname": "q", '
     '"arguments": [{"shape": [4], "strides": [4], "dtype": "S"}]}'],
    ids=["another format", "not JSON", "half an element's stride", "a line cut short",
         "a dtype of no size"],
)  # fmt: skip
def test_a_record_line_that_is_not_a_record_is_named_and_the_others_read(tmp_path, line):
    path = tmp_path / "record.jsonl"
    good = '{"format": 1, "function": "%s", "module": "m", "qualname": "q", "arguments": []}'
    path.write_text(f"{good % 'f'}\n{line}\n{good % 'g'}\n")
    found = record.read(path)
    assert [r.function for r in found.records] == ["f", "g"]
    ((number, why),) = [(u.line, u.why) for u in found.unreadable]
    assert number == 2 and why.startswith("not a numbatune record")


@pytest.mark.parametrize(
    ("strides", "layout"),
    [((16, 4), "C"), ((4, 12), "F"), ((32, 8), "A"), ((-16, 4), "A"), ((16, -8), "A"),
     ((0, 4), "A")],
    ids=["C order", "Fortran order", "strided", "rows reversed", "every other column reversed",
         "broadcast rows"],
)  # fmt: skip
def test_a_recorded_array_is_rebuilt_with_its_layout(strides, layout):
    rebuilt = record.rebuild({"shape": [3, 4], "strides": list(strides), "dtype": "float32"})
    assert rebuilt.shape == (3, 4) and tuple(rebuilt.strides) == strides
    assert nt_arrays.read(rebuilt) == ((3, 4), "float32", layout)


def test_the_lines_recorded_for_reversed_and_broadcast_arrays_are_read_and_rebuilt(tmp_path):
    reversed_view = cuda.to_device(np.arange(8, dtype=np.float32))[::-1]
    broadcast = nt_arrays.laid_out(np.ones(8, np.float32), (0,))
    path = tmp_path / "keys.jsonl"
    record.write(path, "m.k", "m", "k", "key", (reversed_view, broadcast))
    (found,) = record.read(path).records
    rebuilt = record.rebuild_all(found.arguments)
    assert [(a.shape, tuple(a.strides)) for a in rebuilt] == [((8,), (-4,)), ((8,), (0,))]


@cuda.jit
def scale(a, x, out):
    i = cuda.grid(1)
    if i < x.shape[0] and BLOCK > 0:
        out[i] = a * x[i]


@pytest.mark.parametrize("a", [np.complex64(2 - 0.5j), np.complex128(1e300 + 3j), 2 - 0.5j],
                         ids=["complex64", "complex128", "Python complex"])  # fmt: skip
def test_a_complex_scalar_argument_is_recorded_and_rebuilt_as_it_was(
    on_miss, tmp_path, monkeypatch, a
):
    path = tmp_path / "keys.jsonl"
    monkeypatch.setattr(nt.settings, "record", path)
    kernel = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda a, x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    )(scale)
    x = cuda.to_device(np.arange(8, dtype=np.complex128))
    kernel(a, x, cuda.device_array(8, np.complex128))
    (found,) = record.read(path).records
    rebuilt = record.rebuild_all(found.arguments)[0]
    assert type(rebuilt) is type(a) and rebuilt == a


def test_a_key_whose_record_could_not_be_written_is_written_when_it_is_next_met(
    on_miss, tmp_path, monkeypatch, caplog
):
    blocker = tmp_path / "records"
    blocker.write_text("a file where the record's folder should be")
    path = blocker / "keys.jsonl"
    monkeypatch.setattr(nt.settings, "record", path)
    kernel = tuned()
    kernel(*arrays(40))
    assert "could not record key" in caplog.text and not path.exists()
    blocker.unlink()
    kernel.tune(*arrays(40))  # the key is met again (every tune asks for it)
    assert [r.key[:4] for r in record.read(path).records] == ["(40,"]


def test_a_line_cut_short_is_not_counted_as_written_nor_swallows_the_next(
    on_miss, tmp_path, monkeypatch
):
    """A full disk writes part of a line: the write raises (the caller warns), the key is
    written when next met, and the next line starts a line of its own."""
    path = tmp_path / "keys.jsonl"
    record.write(path, "m.k", "m", "k", "key-1", (np.float32(1),))
    write = os.write
    with monkeypatch.context() as disk_full:
        disk_full.setattr(os, "write", lambda descriptor, data: write(descriptor, data[:40]))
        with pytest.raises(OSError, match="cut short"):
            record.write(path, "m.k", "m", "k", "key-2", (np.float32(2),))
    for key in ("key-2", "key-3"):
        record.write(path, "m.k", "m", "k", key, (np.float32(3),))
    found = record.read(path)
    assert [r.key for r in found.records] == ["key-1", "key-2", "key-3"]
    assert [u.line for u in found.unreadable] == [2]


def test_processes_appending_to_one_record_at_once_leave_no_empty_line(tmp_path):
    import multiprocessing

    path, writers, count = tmp_path / "record.jsonl", 8, 60
    # Spawned, not forked: a fork of a test process that holds a CUDA context (on a GPU) dies.
    start = multiprocessing.get_context("spawn")
    processes = [
        start.Process(target=workers.append_records, args=(path, w, count)) for w in range(writers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    assert [process.exitcode for process in processes] == [0] * writers
    lines = path.read_text().splitlines()
    assert [line for line in lines if not line.strip()] == []
    found = record.read(path)
    assert len(found.records) == writers * count and found.unreadable == ()


def test_lookup_says_what_a_call_launches_and_where_it_comes_from_without_tuning(
    on_miss, monkeypatch, numbatune_cache
):
    kernel, (x, out) = tuned(), arrays(40)
    first = kernel.lookup(x, out)  # a call would tune
    assert first.origin is nt.Origin.NONE and first.variant is None and first.key[0] == 40
    assert kernel.stats["benchmarks"] == 0 and out.copy_to_host().tolist() == [0.0] * 40
    winning(monkeypatch, 4)
    report = kernel.tune(x, out)
    assert kernel.lookup(x, out) == nt.Lookup(report.key, nt.Origin.TUNED, report.winner, True)
    forget_shared_state(monkeypatch)  # as a fresh process
    fresh = tuned()
    assert fresh.lookup(x, out) == nt.Lookup(report.key, nt.Origin.DISK, report.winner, False)
    on_miss("nearest")
    other = fresh.lookup(*arrays(64))
    assert other.origin == "nearest" and other.variant == report.winner and not other.in_memory
    assert fresh.stats == {"compiles": 0, "loaded": 0, "benchmarks": 0}
    assert not (numbatune_cache / "record.jsonl").exists()  # nothing recorded either
    forget_shared_state(monkeypatch)
    monkeypatch.setattr(nt.settings, "cache_dir", numbatune_cache / "empty")
    assert tuned().lookup(x, out).origin is nt.Origin.AS_WRITTEN
    assert tuned().lookup(x, out).variant == nt.Variant({"BLOCK": 8})
