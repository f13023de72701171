"""The stopwatch's rules (rounds, early stop, L2 flush, settings) and the benchmark suite."""

import json
import math
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

import numbatune as nt
from bench import kernels, real_kernels, tables
from bench import run as bench_run
from numbatune.arrays import SIMULATOR
from numbatune.compilers.numba_cuda_mlir import NO_SIMULATOR
from numbatune.config import LEVELS
from numbatune.tuning import bench
from numbatune.tuning.results import Timed
from tests import kernels as test_kernels

MB = 1 << 20


def test_a_variant_whose_fastest_run_exceeds_ratio_times_the_leaders_median_stops():
    samples = {
        "leader": [1.0, 1.1, 0.9, 1.0, 1.0],  # median 1.0: the limit is 1.5
        "close": [1.4, 1.6, 1.5, 1.45, 1.5],  # fastest 1.4: might still win on a good day
        "slow": [1.6, 1.7, 1.8, 1.6, 1.9],
    }
    assert bench.early_stopped(samples, rounds=5) == {"slow"}


def test_no_variant_stops_before_early_stop_rounds_or_when_early_stop_is_off():
    samples = {"leader": [1.0] * 4, "slow": [9.0] * 4}
    assert bench.early_stopped(samples, rounds=4) == set()
    nt.configure(early_stop_ratio=math.inf)
    try:
        assert bench.early_stopped({"leader": [1.0] * 9, "slow": [9.0] * 9}, rounds=9) == set()
    finally:
        nt.configure(early_stop_ratio=1.5)


@given(
    st.dictionaries(
        st.integers(0, 9),
        st.lists(st.floats(1e-6, 1.0), min_size=5, max_size=12),
        min_size=2,
        max_size=6,
    )
)
def test_the_variant_with_the_lowest_median_is_never_stopped(samples):
    stopped = bench.early_stopped(samples, rounds=12)
    medians = {name: float(np.median(runs)) for name, runs in samples.items()}
    assert min(medians, key=medians.get) not in stopped
    assert len(stopped) < len(samples)


def test_the_l2_is_flushed_with_twice_its_size_only_for_working_sets_under_twice_its_size():
    assert bench.flush_bytes(10 * MB, 50 * MB) == 100 * MB
    assert bench.flush_bytes(99 * MB, 50 * MB) == 100 * MB
    assert bench.flush_bytes(100 * MB, 50 * MB) == 0
    nt.configure(flush_l2=False)
    try:
        assert bench.flush_bytes(10 * MB, 50 * MB) == 0
    finally:
        nt.configure(flush_l2=True)


def test_the_working_set_counts_every_array_argument_and_no_scalar():
    inputs = (np.float32(2.0), cuda.device_array(10, np.float32), cuda.device_array((4, 4)), 3)
    assert bench.working_set_bytes(inputs) == 10 * 4 + 16 * 8


def held_rounds(queueing_s, work_s, rounds=8):
    """The device holds of ``rounds`` rounds where the host takes ``queueing_s`` to queue a
    round and the device ``work_s`` to run it: the device, released after its hold, finishes
    after its work or right after the host's last launch, whichever is later."""
    hold, holds = bench.next_hold(0.0, 0.0, 0.0), []
    for _ in range(rounds):
        holds.append(hold)
        hold = bench.next_hold(hold, queueing_s, max(work_s, queueing_s - hold))
    return holds


@pytest.mark.parametrize("queueing_s", [0.004, 0.05, 1.0])
def test_the_device_is_held_long_enough_for_the_host_to_queue_a_round_of_short_kernels(
    queueing_s,
):
    work_s = queueing_s / 10  # kernels faster than their launches
    holds = held_rounds(queueing_s, work_s)
    assert all(hold >= queueing_s - work_s for hold in holds[1:])  # the runs go back to back
    assert holds[-1] == holds[-2] <= 2 * queueing_s  # and it settles


def test_a_round_of_long_kernels_is_not_held_for_as_long_as_it_runs():
    # A round of 1,000 kernels of 10 ms fills the launch queue: queueing it takes as long as
    # running it. Holding the device for twice that tripled such rounds.
    holds = held_rounds(queueing_s=10.0, work_s=10.0)
    assert max(holds) == holds[-1] <= 0.002


def test_launches_that_wait_for_the_device_are_held_no_longer_than_the_first_round():
    # A debug kernel's launch reads its exception flag: the host waits for the hold and each
    # run, so queueing a round takes the hold and the work. Taken as the host's lag, that held
    # the device twice as long each round: a debug kernel's tuning ran past 150 s on the H200.
    work_s = 0.001
    hold, holds = bench.next_hold(0.0, 0.0, 0.0), []
    for _ in range(16):
        holds.append(hold)
        hold = bench.next_hold(hold, hold + work_s, work_s, waited=True)
    assert max(holds) == holds[0] <= 0.002


@pytest.mark.skipif(not SIMULATOR, reason="counts rounds; on a GPU warm-up and budget add some")
def test_rounds_interleave_the_variants_in_an_order_that_rotates():
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    nt.configure(simulator_runs=3)
    try:
        timings = bench.measure(runs)
    finally:
        nt.configure(simulator_runs=2)
    assert calls == list("abcbcacab")
    assert all(timing.runs == 3 and not timing.stopped_early for timing in timings.values())


def test_a_run_that_raises_is_recorded_and_not_run_again():
    calls = []

    def broken():
        calls.append("broken")
        raise RuntimeError("launch failed")

    timings = bench.measure({"ok": lambda: calls.append("ok"), "broken": broken})
    assert calls.count("broken") == 1
    assert isinstance(timings["broken"], RuntimeError)
    assert isinstance(timings["ok"], Timed)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("early_stop_ratio", "1", "number > 1"),
        ("early_stop_rounds", "0", "integer >= 1"),
        ("warmup_s", "-1", "number >= 0"),
        ("flush_l2", "maybe", "true/false"),
    ],
)
def test_bad_timing_settings_are_refused_with_the_setting_named(name, value, expected):
    with pytest.raises(ValueError, match=f"{name}.*{expected}"):
        nt.configure(**{name: value})


def test_flush_l2_reads_the_usual_words_for_yes_and_no():
    try:
        assert nt.configure(flush_l2="off").flush_l2 is False
        assert nt.configure(flush_l2="1").flush_l2 is True
    finally:
        nt.configure(flush_l2=True)


def _reference(name, args):
    host = [a.copy_to_host() if hasattr(a, "copy_to_host") else a for a in args]
    if name == "scale_add":
        return host[0] * host[1] + host[2]
    if name == "block_sum":
        return np.array([host[0].sum()])
    if name == "transpose":
        return host[0].T
    if name == "matmul":
        return host[0] @ host[1]
    laplace = host[1].copy()
    a = host[0]
    laplace[1:-1, 1:-1] = (
        a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4 * a[1:-1, 1:-1]
    )
    return laplace


def _check_variants(case, size, smoke):
    tuned = case.tuned(smoke)
    for variant in tuned.variants:
        args = case.arguments(size)
        if case.name == "laplace":  # the border is not written: give it known values
            args[1].copy_to_device(np.zeros((size, size), np.float32))
        expected = _reference(case.name, args)
        tuned.run_variant(variant, *args)
        np.testing.assert_allclose(
            args[-1].copy_to_host(), expected, rtol=1e-4, atol=1e-4, err_msg=variant.label
        )


@pytest.mark.parametrize("case", kernels.CASES, ids=lambda case: case.name)
def test_the_suites_kernels_compute_their_function_in_the_variants_the_smoke_run_uses(case):
    size = {"transpose": 12, "matmul": 20, "laplace": 10}.get(case.name, 40)
    _check_variants(case, size, True)


@pytest.mark.gpu
@pytest.mark.parametrize("case", kernels.CASES, ids=lambda case: case.name)
def test_every_variant_of_the_suites_kernels_computes_its_function(case):
    _check_variants(
        case, {"transpose": 300, "matmul": 200, "laplace": 300}.get(case.name, 5000), False
    )


@pytest.mark.gpu
def test_a_variant_doing_64_times_the_work_stops_being_measured_early():
    tuned = nt.autotune(
        variants=nt.product(REPS=[1, 64]),
        launch=lambda a, out: (nt.cdiv(a.shape[0], 256), 256),
    )(test_kernels.repeated_sine)
    a = cuda.to_device(np.random.default_rng(0).random(1 << 20, dtype=np.float32))
    fast, slow = tuned.tune(a, cuda.device_array(1 << 20, np.float32)).results
    assert slow.runs == nt.settings.early_stop_rounds
    assert fast.runs >= nt.settings.min_runs


TINY_EXAMPLE = """
import numbatune as nt
import numpy as np
from numba import cuda

BLOCK = 4


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4]),
    launch=lambda x, out, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def double(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = 2 * x[i]


def example(small=False):
    x = cuda.to_device(np.arange(8, dtype=np.float32))
    return double, (x, cuda.device_array(8, np.float32))


def reference(x, out):
    return 2 * x.copy_to_host()


def work(x, out):
    return {"bytes": x.nbytes + out.nbytes}
"""


def _check_real_kernels(real, printed):
    assert set(real["kernels"]) == {"stumpy", "ising", "reduce"}
    assert "syncwarp" in real["kernels"]["reduce"]["skipped"]
    for row in (real["kernels"]["stumpy"], real["kernels"]["ising"]):
        assert row["correct"], row["mismatch"]
        assert row["ratio"] > 0 and row["winner"] and row["tuning"]["not_timed"] == {}
    assert "STUMPY_THREADS_PER_BLOCK=" in printed  # the real kernels' table, with the winners
    written = tables.real_kernels(real)  # docs/benchmarks.md's table, a skipped kernel said
    assert "| `stumpy` |" in written and "| `reduce` |" + "  |" * 6 + " not measured: " in written


def _check_search(searched, printed):
    assert set(searched) == {"sgemm", "softmax", "stencil"}
    assert all(example["space"] == 2 for example in searched.values())
    # each strategy once, over the examples in turn
    assert {s: c["strategy"] for e in searched.values() for s, c in e["cases"].items()} == {
        "pattern": "pattern",
        "random": "random",
        "model": "model",
    }


def _check_warm_start(warm, printed):
    assert warm["cold"]["benchmarks"] == warm["cold"]["keys"]
    assert warm["warm"]["benchmarks"] == 0


def _check_ceilings(ceilings, printed):
    (tiny,) = ceilings["examples"]
    assert tiny["kernel"] == "double" and tiny["ceiling"] == "copy"
    assert "| `double` | 8 | 2 |" in tables.ceilings(ceilings)  # docs/benchmarks.md's table


def _check_levels(levels, printed):
    # Each level tuned the kernel (loaded afresh) itself, not served by the memory cache of
    # the tunings before it: minimal launched the defaults unmeasured, the others measured.
    (tiny,) = levels["examples"]
    sources = [(row["level"], row["source"]) for row in tiny["levels"]]
    assert sources == [(LEVELS[0], "single"), *((level, "benchmark") for level in LEVELS[1:])]
    written = tables.levels(levels)  # docs/benchmarks.md's table: a row per level
    assert [line.split(" | ")[0] for line in written.splitlines()[2:6]] == [
        f"| `{level}`" for level in LEVELS
    ]


def _check_accuracy(accuracy, printed):
    assert len(accuracy["keys"]) == sum(len(c.smoke_sizes) for c in kernels.CASES)


def _check_compilers(compilers, printed):
    (example,) = compilers["examples"].values()  # the first example function only
    numba_cuda, mlir = example["numba-cuda"], example["numba-cuda-mlir"]
    assert numba_cuda["correct"] and numba_cuda["first_tune_s"] > 0, numba_cuda
    assert numba_cuda["winner_us"] > 0 and numba_cuda["hit_us"] > 0, numba_cuda
    assert mlir == {"skipped": NO_SIMULATOR}
    assert "skipped: numba-cuda-mlir has no simulator" in printed


#: What the smoke run's result of a section must hold, beyond its running without an error.
def _check_reproducibility(result, printed):
    """Each key tuned in two fresh processes, its winners counted and timed again."""
    assert result["processes"] == 2 and [k["key"] for k in result["keys"]] == [
        "saxpy 64",
        "transpose 8x16",
    ]
    for key in result["keys"]:
        assert sum(key["winners"].values()) == 2 and 1 <= key["agreed"] <= 2
        assert key["worst_winner_vs_fastest"] >= 1.0
    assert "keys: the same winner in all 2 processes" in printed


SMOKE_CHECKS = {
    "reproducibility": _check_reproducibility,
    "search": _check_search,
    "real_kernels": _check_real_kernels,
    "warm_start": _check_warm_start,
    "ceilings": _check_ceilings,
    "levels": _check_levels,
    "accuracy": _check_accuracy,
    "compilers": _check_compilers,
}

#: The smoke run in parts of about the same length, which the test workers run side by side.
SMOKE_PARTS = [
    ("search", "space_cost", "compilers"),
    ("reproducibility", "graphs", "dispatch", "real_kernels", "stability"),
    ("first_tune", "tuning_time", "accuracy", "warm_start", "ceilings", "levels"),
]


def test_the_smoke_parts_cover_every_section_once():
    assert sorted(s for part in SMOKE_PARTS for s in part) == sorted(bench_run.SECTIONS)


@pytest.mark.skipif(not SIMULATOR, reason="the smoke run is the simulator's")
@pytest.mark.parametrize("sections", SMOKE_PARTS, ids=lambda part: part[0])
def test_the_smoke_run_measures_its_sections_and_writes_them(sections, tmp_path, capsys):
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "tiny.py").write_text(textwrap.dedent(TINY_EXAMPLE))
    arguments = ["--smoke", "--examples", str(examples), "--kernels", "stumpy", "ising", "reduce"]
    status = bench_run.main([str(tmp_path / "out"), *arguments, "--only", *sections])
    results = json.loads((tmp_path / "out" / "results.json").read_text())["sections"]
    assert status == 0, {name: s["result"] for name, s in results.items()}
    assert list(results) == list(sections)
    printed = capsys.readouterr().out
    assert "times say nothing about speed" in printed
    for section in sections:
        if section in SMOKE_CHECKS:
            SMOKE_CHECKS[section](results[section]["result"], printed)


@pytest.mark.skipif(not SIMULATOR, reason="the smoke run is the simulator's")
def test_a_real_kernel_that_fails_is_recorded_and_the_next_is_measured_and_saved(monkeypatch):
    from bench.real import ising

    def fails(size, rng):
        raise RuntimeError("no inputs today")

    monkeypatch.setattr(ising, "make_inputs", fails)
    saved = []
    result = real_kernels.run(True, lambda partial: saved.append(json.dumps(partial)),
                              ("ising", "csr_spmv"))  # fmt: skip
    assert "RuntimeError: no inputs today" in result["kernels"]["ising"]["error"]
    assert result["kernels"]["csr_spmv"]["correct"]
    assert [list(json.loads(s)["kernels"]) for s in saved] == [["ising"], ["ising", "csr_spmv"]]
    assert "FAILED: RuntimeError: no inputs today" in real_kernels.table(result)


@pytest.mark.skipif(not SIMULATOR, reason="the smoke run is the simulator's")
def test_a_tuned_real_kernel_whose_outputs_differ_from_its_projects_is_not_correct(monkeypatch):
    from bench.real import csr_spmv

    monkeypatch.setattr(csr_spmv, "original", lambda inputs, args: None)  # computes nothing
    row = real_kernels.run(True, names=("csr_spmv",))["kernels"]["csr_spmv"]
    assert not row["correct"] and row["mismatch"].startswith("y: Not equal to tolerance")


def test_dispatch_medians_at_the_issues_host_speed_take_the_rounds_where_numba_was_as_fast():
    from bench.dispatch_cost import at_host_speed

    samples = {"numba cfg": [27.0, 45.0, 28.0, 50.0], "hit": [5.0, 9.0, 6.0, 9.5]}
    assert at_host_speed(samples, "numba cfg", 28.0) == (2, {"numba cfg": 27.5, "hit": 5.5})
    assert at_host_speed(samples, "numba cfg", 20.0) == (0, {})


def test_each_hit_is_reported_as_a_multiple_of_the_driver_floor_timed_in_its_phase():
    from bench.dispatch_cost import FLOOR, to_the_floor

    results = {
        FLOOR: {"cuLaunchKernel, packed once, phase 1": 4.0,
                "cuLaunchKernel, packed once, phase 2": 5.0},
        "numba": {"numbatune hit": 4.8, "hit that waits for another stream": 8.0},
        "torch": {"numbatune hit": 6.0, "26 arguments: numbatune hit": 7.0},
    }  # fmt: skip
    ratios = to_the_floor(results)
    assert ratios["numba: numbatune hit"] == {"ratio": pytest.approx(1.2), "target": 1.25,
                                              "met": True}  # fmt: skip
    assert ratios["numba: hit that waits for another stream"]["ratio"] == pytest.approx(1.6)
    assert not ratios["numba: hit that waits for another stream"]["met"]  # (over 1.5)
    assert not ratios["torch: numbatune hit"]["met"]  # 1.5 over 1.35
    assert ratios["torch: 26 arguments: numbatune hit"]["met"]  # 1.75, under 2
    assert "cupy: numbatune hit" not in ratios  # not measured: no ratio
    assert to_the_floor({"numba": {"numbatune hit": 4.8}}) == {}  # no floor: none


def test_a_replay_holds_each_search_against_an_exhaustive_runs_times():
    from bench import search as bench_search

    space = bench_search.SPACES["softmax"](False)
    fastest = space[len(space) // 2]
    medians = {v.label: 2.0 for v in space} | {fastest.label: 1.0, space[0].label: None}
    whole = bench_search.replay("softmax", {"medians": medians}, len(space), 128, 2)
    few = bench_search.replay("softmax", {"medians": medians}, 3, 128, 4)
    for strategy in bench_search.STRATEGIES:  # trying every variant finds the fastest
        assert whole[strategy] == {
            "within_2_percent": 2,
            "median": 1.0,
            "worst": 1.0,
            "variants_measured": len(space),
        }
        assert few[strategy]["worst"] == 2.0  # three variants at random: the fastest is rare


def test_the_mlir_version_of_an_example_takes_numbas_names_from_numba_cuda_mlir_on_its_lines():
    from bench.compilers import for_mlir

    source = textwrap.dedent("""\
        import numbatune as nt
        from numba import config, cuda, float32 as f32
        from numba.cuda.random import (
            xoroshiro128p_uniform_float32,
        )


        def kernel():
            from numba import cuda; x = 1
        """)  # fmt: skip
    assert for_mlir(source).splitlines() == [
        "import numbatune as nt",
        "from numba import config; from numba_cuda_mlir import cuda; "
        "from numba_cuda_mlir.cuda import float32 as f32",
        "from numba_cuda_mlir.cuda.random import xoroshiro128p_uniform_float32",
        "",
        "",
        "",
        "",
        "def kernel():",
        "    from numba_cuda_mlir import cuda; x = 1",
    ]


def test_the_compilers_table_says_why_a_row_was_not_measured():
    from bench.compilers import table

    error = "TypingError: Failed in mlir mode pipeline\n\x1b[1mUnknown attribute 'nonnegative'\n"
    measured = {"variants": 2, "first_tune_s": 1.5, "winner_us": 10.0, "hit_us": 5.0,
                "correct": False, "winner": "BLOCK=4"}  # fmt: skip
    printed = table({"examples": {"tiny.example": {
        "numba-cuda": measured,
        "numba-cuda-mlir": {"failed": "first tune", "error": error + "Traceback ..."},
    }, "other.example": {"numba-cuda": {"error": "stopped after 150 s"}}}})  # fmt: skip
    lines = printed.splitlines()
    assert lines[1].split()[2:] == ["2", "1.50", "10.0", "5.00", "5.00", "NO", "BLOCK=4"]
    assert lines[2].endswith(
        "not supported (first tune): TypingError: Failed in mlir mode pipeline Unknown "
        "attribute 'nonnegative' Traceback ..."
    )
    assert lines[3].endswith("FAILED: stopped after 150 s")


def test_an_example_that_cannot_be_made_is_recorded_with_the_stage_it_failed_in(tmp_path):
    from bench.compilers import Compiler, measure

    broken = tmp_path / "broken.py"
    raising = "raise RuntimeError('no x')\n    x = cuda.to_device"
    broken.write_text(TINY_EXAMPLE.replace("x = cuda.to_device", raising))
    row = measure(broken, "example", Compiler.NUMBA_CUDA, small=True)
    assert row["failed"] == "example" and row["error"].startswith("RuntimeError: no x")


def test_the_performance_tables_of_readme_and_benchmarks_are_their_results_files():
    # Each block of each page is what bench.summary writes from the results files its begin line
    # names, and both pages' summaries name the same files: one figure, one source.
    from bench import summary

    readme, benchmarks = ({name: (text, files) for text, name, files in summary.page_blocks(page)}
                          for page in summary.PAGES)  # fmt: skip
    assert set(readme) == {"summary"} and readme["summary"][1] == benchmarks["summary"][1]
    for page, blocks in zip(summary.PAGES, (readme, benchmarks), strict=True):
        for name, (text, files) in blocks.items():
            assert all(path.is_file() for path in files), name
            if files:  # (a block naming no file is not written from one yet)
                assert text == summary.block(name, files, page), name
    assert set(benchmarks) >= {"summary", "hits", "streams", "tuning_time", "graphs"}
    # README shows the headlines of the same table: each of its rows is one of benchmarks.md's.
    assert set(readme["summary"][0].splitlines()[3:]) <= set(benchmarks["summary"][0].splitlines())
    assert "| a cache hit, 1 Ki float32" in readme["summary"][0]


def test_the_dispatch_benchs_profile_takes_a_fast_paths_launch_apart(monkeypatch):
    """The hit's profile rows (on a GPU) time the launcher's parts: the driver's launch of the
    parameters packed once, and the generated code with the launch stubbed. Here a torch CPU
    tensors' fast path, its launch a capture."""
    torch = pytest.importorskip("torch")
    import types

    from bench.dispatch_cost import _LaunchParts, launch_stubbed
    from numbatune.cache.tunecache import WinnerTable
    from numbatune.keys import default_key
    from tests.test_dlpack import _fast_path

    example = (torch.zeros(5), torch.zeros(5), 2.5)
    winners = WinnerTable()
    winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
    path, launched = _fast_path(example, monkeypatch, winners=winners)
    parts = _LaunchParts.of(path.call.__globals__, example)
    assert (parts.function, parts.packed) == (1, launched.pop())
    assert parts.run((1, 1), 0) == 0 and launched.pop() == parts.packed
    launch_stubbed(path.call)(example, None)
    assert not launched  # (the stub launched it)
    path.call(example, None)
    assert launched.pop() == parts.packed
