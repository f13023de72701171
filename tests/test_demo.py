"""numbatune demo: one row per kernel and key, at most 100 columns wide (the winner, its time,
its speedup over the kernel as written, on a GPU the rate it reached); --all, every variant."""

import re
import textwrap

import pytest

from numbatune import demo
from numbatune.arrays import SIMULATOR
from numbatune.cli import main
from numbatune.tuning.results import Failed, Source, Timed, TuneReport, VariantResult
from numbatune.variants import Variant
from tests.kernels import forget_shared_state

#: An example module as users write them: BLOCK is 4 as written, tuned over 2, 4 and 8; two
#: example functions, two keys.
TINY = """
import numbatune as nt

import numpy as np
from numba import cuda

BLOCK = 4


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4, 8]),
    launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def double(a, out):
    i = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
    if i < a.shape[0]:
        out[i] = 2 * a[i]


def _arguments(n):
    return double, (cuda.to_device(np.ones(n, np.float32)), cuda.device_array(n, np.float32))


def example(small=False):
    return _arguments(8)


def example_longer(small=False):
    return _arguments(20)


def work(a, out):
    return {"bytes": a.nbytes + out.nbytes}
"""


@pytest.fixture
def examples(tmp_path):
    """A folder with the one example module TINY."""
    folder = tmp_path / "examples"
    folder.mkdir()
    (folder / "tiny.py").write_text(textwrap.dedent(TINY))
    return folder


def cells(line: str) -> list[str]:
    """A table line's cells (columns are two spaces apart or more)."""
    return re.split(r" {2,}", line.strip())


def test_demo_prints_one_row_per_kernel_and_key_in_100_columns(capsys, examples, monkeypatch):
    assert main(["demo", "--examples", str(examples)]) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert all(len(line) <= demo.WIDTH for line in lines)
    # As it tunes, a line per example on stderr, then one with what it did and the winner.
    progress = printed.err.splitlines()
    assert progress[::2] == ["double: tuning 3 variants..."] * 2
    assert all(
        re.fullmatch(r"double: (3 compiled in [\d.]+ s, )?3 timed in [\d.]+ s, winner .+", line)
        for line in progress[1::2]
    )
    if SIMULATOR:
        assert lines.pop(0) == demo.SIMULATED and "times mean nothing" in demo.SIMULATED
    header, *rows, legend = lines
    assert cells(header) == ["kernel", "key", "tried", "winner", "time", "speedup"] + (
        [] if SIMULATOR else ["achieved"]
    )
    assert [cells(row)[:3] for row in rows] == [
        ["double", "2 of 8 float32 C", "3/3"],
        ["double", "2 of 32 float32 C", "3/3"],
    ]
    for row in rows:
        winner, time, speedup = cells(row)[3:6]
        assert winner in ("as written", "BLOCK=2", "BLOCK=8")
        assert re.fullmatch(r"[\d.]+ (us|ms|s)", time) and re.fullmatch(r"[\d.]+x", speedup)
        assert (winner == "as written") <= (speedup == "1.00x")
    assert legend == demo.LEGEND
    forget_shared_state(monkeypatch)
    main(["demo", "--examples", str(examples)])  # again, as in a new process: the cache answers
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [demo.LEGEND, f"2 of 2 rows: {demo.STORED}"]
    assert [cells(line)[1:4] for line in lines[-4:-2]] == [cells(row)[1:4] for row in rows]


def test_demo_all_prints_every_variant(capsys, examples):
    assert main(["demo", "--all", "--examples", str(examples)]) == 0
    rows = [cells(line) for line in capsys.readouterr().out.splitlines() if "BLOCK=" in line]
    variants = [next(cell for cell in row if cell.startswith("BLOCK=")) for row in rows]
    assert sorted(variants) == ["BLOCK=2", "BLOCK=2", "BLOCK=4", "BLOCK=4", "BLOCK=8", "BLOCK=8"]
    assert sum("*" in row for row in rows) == 2  # a winner per key


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("import not_a_module_xyz\n",
         "cannot import {path}: ModuleNotFoundError: No module named 'not_a_module_xyz'"),
        ("def example(small=False):\n    raise RuntimeError('no device memory')\n",
         "{path}: example(small=True) raised RuntimeError: no device memory"),
    ],
    ids=["a module that cannot be imported", "an example that raises"],
)  # fmt: skip
def test_a_broken_example_is_named_in_one_line_with_status_2(capsys, tmp_path, code, says):
    path = tmp_path / "broken.py"
    path.write_text(code)
    assert main(["demo", "--small", "--examples", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == ["numbatune: error: " + says.format(path=path)]


def _timed(variant: Variant, seconds: float) -> VariantResult:
    return VariantResult(variant, Timed(seconds, 0.0, 5))


def test_rows_fit_100_columns_and_give_speedup_and_rate():
    """On a GPU: the winner's changes, its time, its speedup and the rate it reached; the
    longest cells are cut, the figures never."""
    written = Variant({"BM": 64, "TM": 4, "SPREAD": False, "LOADS_A": 2})
    failed = Variant({"BM": 64, "TM": 8, "SPREAD": False, "LOADS_A": 4})
    winner = Variant({"BM": 128, "TM": 8, "SPREAD": True, "LOADS_A": 16}, max_registers=128)
    key = tuple(((4096, 4096), "float32", "C") for _ in range(3))
    results = (_timed(written, 20e-3), VariantResult(failed, Failed("boom")), _timed(winner, 10e-3))
    report = TuneReport(key, 2, Source.BENCHMARK, results)
    rows = [
        demo.Tuned("sgemm_with_a_name_longer_than_most", report, written, {"flops": 2 * 4096**3}),
        demo.Tuned("copy", report, written, {"bytes": 3 * 10**6}),
        demo.Tuned("no_kernel_as_written", report, None, None),
    ]
    lines = demo.summary_table(rows, rates=True).splitlines()
    assert all(len(line) <= demo.WIDTH for line in lines)
    assert cells(lines[0])[-1] == "achieved"
    sgemm, copy, unwritten = (cells(line) for line in lines[1:])
    assert sgemm[1:3] == ["3 of 4096x4096 float32 C", "3/3"]
    assert sgemm[3].startswith("BM=128 TM=8") and sgemm[3].endswith("...")  # changes, cut
    assert sgemm[4:] == ["10 ms", "2.00x", "13744 GFLOP/s"]
    assert copy[-1] == "0.3 GB/s"
    assert unwritten[4:] == ["10 ms", "-", "-"]  # no kernel as written, no work(): not known
    assert [row.untimed for row in rows] == [None, None, demo.UNTIMED["no variant"]]


def test_a_speedup_not_known_says_why():
    written, other = Variant({"BLOCK": 4}), Variant({"BLOCK": 8})
    skipped = TuneReport(((8,), "float32", "C"), 0, Source.BENCHMARK, (_timed(other, 1e-3),))
    alone = TuneReport(((8,), "float32", "C"), 0, Source.SINGLE, (VariantResult(other),))
    assert (
        demo.Tuned("k", skipped, written, None).untimed
        == demo.UNTIMED["simulator" if SIMULATOR else "skipped"]
    )
    assert demo.Tuned("k", alone, written, None).untimed == demo.UNTIMED["winner"]
    assert all(len(f"speedup -: {reason}") <= demo.WIDTH for reason in demo.UNTIMED.values())


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ((((128,), "float32", "C"),) * 3, "3 of 128 float32 C"),
        ((((64, 20), "float32", "C"), ((20, 64), "float32", "C")), "64x20, 20x64 float32 C"),
        ((((8,), "float32", "C"), ((8,), "int32", "F")), "8 float32 C, 8 int32 F"),
        ((1024, "rows", ("float32", "C", 2)), "1024, rows, float32 C 2d"),
        ((), "()"),
        (7, "7"),
    ],
)
def test_keys_print_short_and_without_quotes(key, label):
    assert demo.key_label(key) == label
