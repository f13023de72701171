"""Check mode finds a wrong variant, keeps it from winning and says where it was wrong;
assert_variants_agree fails on it with a useful message."""

import json
import logging

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.testing import assert_variants_agree
from numbatune.tuning import checks

ITEMS = 1  # elements per thread
OFF_BY_ONE = 0  # 1: the deliberate bug, each thread's tile stops one element short
P = 0  # scaled's variants: from 10 on, the deliberate bug (3 * x where 2 * x is right)


@cuda.jit
def double(x, out):
    first = cuda.grid(1) * ITEMS
    for k in range(ITEMS - OFF_BY_ONE):
        i = first + k
        if i < x.shape[0]:
            out[i] = 2 * x[i]


def _double(check=None):
    return nt.autotune(
        variants=[
            {"ITEMS": 1, "OFF_BY_ONE": 0},
            {"ITEMS": 4, "OFF_BY_ONE": 1},  # wrong at every tile's last element
            {"ITEMS": 4, "OFF_BY_ONE": 0},
        ],
        launch=lambda x, out, *, ITEMS: (nt.cdiv(x.shape[0], 32 * ITEMS), 32),
        check=check,
    )(double)


def _arguments(n=100):
    x = cuda.to_device(np.arange(n, dtype=np.float32))
    return x, cuda.to_device(np.full(n, -1.0, np.float32))


def test_check_mode_excludes_and_reports_a_variant_that_is_wrong_at_a_tile_edge(caplog):
    tuned = _double(check=True)
    x, out = _arguments()
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        report = tuned.tune(x, out)
    assert report.checked
    wrong = report.results[1]
    assert wrong.median_s is None and wrong.error is None
    # 25 tiles of 4 each miss their last element, left at -1 where 2 * x is expected.
    assert wrong.mismatch == nt.Mismatch("out", 25, 100, 199.0)
    assert report.best_index != 1
    assert "ITEMS=4, OFF_BY_ONE=1 gives wrong results (out: 25 of 100 elements differ" in (
        caplog.text
    )
    np.testing.assert_array_equal(out.copy_to_host(), -1.0)  # tuning never writes the caller's


def test_a_reference_function_on_the_host_can_be_the_reference():
    def expected(x, out):
        return 2 * x

    tuned = _double(check=nt.Check(reference=expected))
    report = tuned.tune(*_arguments())
    assert [r.mismatch is not None for r in report.results] == [False, True, False]


def test_mismatches_are_kept_in_the_disk_cache_and_unchecked_results_are_checked_again(
    numbatune_cache,
):
    x, out = _arguments()
    first = _double(check=True).tune(x, out)
    # Another kernel (equal in all but its check's spelling, so it shares nothing in memory)
    # reads the disk entry, as a new process would.
    again = _double(check=nt.Check()).tune(x, out)
    assert again.source == "disk"
    assert again.results[1].mismatch == first.results[1].mismatch
    unchecked = _double().tune(x, out, force=True)
    assert not unchecked.checked
    # A checked kernel that shares nothing in memory finds only the unchecked entry on disk.
    assert _double(check=nt.Check(rtol=1e-4)).tune(x, out).source == "benchmark"


@cuda.jit
def scaled(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = (3 if P >= 10 else 2) * x[i]


def _scaled(check):
    """20 variants measured in three batches (a random search over all of them), half wrong."""
    return nt.autotune(variants=[{"P": p} for p in range(20)], launch=lambda x, out, *, P: (4, 32),
                       check=check, search="random", budget=20)(scaled)  # fmt: skip


def test_every_batch_of_a_search_is_checked_against_the_kernel_as_written():
    """A search measures its variants in batches: each batch's are compared with the outputs
    of the kernel as written, not with those of the first variant the batch runs."""
    report = _scaled(check=True).tune(*_arguments())
    assert [r.mismatch is not None for r in report.results] == [p >= 10 for p in range(20)]
    assert report.best["P"] < 10


def _cut_short(check, monkeypatch):
    """Tune ``_scaled(check)`` until its first batch is measured, then stop it (a Ctrl-C, say):
    its outcomes so far are left in its journal. Screening (on a GPU; test_screen's) is off
    here and in the tunings after: it would time variants through ``bench.measure`` too, and
    the tuning would stop within its first batch."""
    from numbatune.tuning import bench, tuner

    monkeypatch.setattr(tuner, "_screening", lambda variants: False)
    measure, measured = bench.measure, []

    def cut_short(*args, **options):
        if measured:
            raise KeyboardInterrupt
        measured.append(True)
        return measure(*args, **options)

    monkeypatch.setattr(bench, "measure", cut_short)
    with pytest.raises(KeyboardInterrupt):
        _scaled(check).tune(*_arguments())
    monkeypatch.setattr(bench, "measure", measure)


def _journal(check, cache):
    """The disk folder of ``_scaled(check)``'s tunings in ``cache``, and the key its journal is
    kept under."""
    from numbatune.cache.disk import Folder
    from numbatune.cache.tunecache import function_folder
    from numbatune.devices import current_kind

    kernel = _scaled(check)
    where = function_folder(cache / current_kind().partition, kernel.function_id)
    folder = Folder(where, kernel.function_id)
    (journal,) = folder.stored_keys()
    return folder, journal


def _twice(x, out):
    return 2 * x


def _thrice(x, out):
    return 3 * x


def test_a_checked_tuning_does_not_go_on_with_an_unfinished_unchecked_one(
    numbatune_cache, monkeypatch
):
    """An unfinished tuning that did not check outputs leaves its variants unchecked: a
    tuning of the key in check mode starts over instead of taking them."""
    _cut_short(None, monkeypatch)
    report = _scaled(check=True).tune(*_arguments())
    assert report.checked
    assert [r.mismatch is not None for r in report.results] == [p >= 10 for p in range(20)]


@pytest.mark.parametrize(
    ("before", "after", "wrong"),
    [
        (nt.Check(rtol=1.0), nt.Check(), [p >= 10 for p in range(20)]),  # tolerance tightened
        (nt.Check(), nt.Check(rtol=1.0), [False] * 20),  # loosened: 3 * x is close enough
        (nt.Check(reference=_thrice), nt.Check(reference=_twice), [p >= 10 for p in range(20)]),
        (nt.Check(), None, [False] * 20),  # check mode turned off
    ],
    ids=["tightened", "loosened", "another-reference", "unchecked"],
)
def test_a_tuning_does_not_keep_the_verdicts_of_an_unfinished_one_with_another_check(
    numbatune_cache, monkeypatch, before, after, wrong
):
    """An unfinished tuning's verdicts (which variants gave wrong results) hold for its own
    check: a tuning of the key with another check (tolerances, reference, or none) starts
    over, so that its verdicts are all its own, as if no tuning had been cut short."""
    _cut_short(before, monkeypatch)
    report = _scaled(after).tune(*_arguments())
    assert report.checked == (after is not None)
    assert [r.mismatch is not None for r in report.results] == wrong


@pytest.mark.parametrize(
    ("check", "written_before", "goes_on"),
    [
        (nt.Check(reference=_twice), False, True),
        (None, False, True),
        (None, True, True),  # a journal without a check's verdicts holds for no check
        (nt.Check(reference=_twice), True, False),  # its check is not known
    ],
    ids=["checked", "unchecked", "unchecked-older-journal", "checked-older-journal"],
)
def test_a_tuning_goes_on_with_an_unfinished_one_with_the_same_check(
    numbatune_cache, monkeypatch, caplog, check, written_before, goes_on
):
    """An unfinished tuning with the same check goes on where it stopped; one written before
    numbatune recorded its check goes on only without check mode (its check is not known)."""
    _cut_short(check, monkeypatch)
    if written_before:  # as numbatune wrote it before it recorded the check
        folder, journal = _journal(check, numbatune_cache)
        stored = json.loads(folder.get(journal))
        stored.pop("check", None)
        folder.set(journal, json.dumps(stored))
    with caplog.at_level(logging.INFO, logger="numbatune"):
        report = _scaled(check).tune(*_arguments())
    assert ("going on with an unfinished tuning" in caplog.text) == goes_on
    assert [r.mismatch is not None for r in report.results] == [
        check is not None and p >= 10 for p in range(20)
    ]


def test_a_stored_result_of_another_check_is_tuned_again(numbatune_cache):
    """A finished tuning's verdicts are its check's: with the tolerance tightened, the key is
    tuned again and the variants the looser check passed are wrong; with the same check it is
    served."""
    loose = _scaled(nt.Check(rtol=1.0)).tune(*_arguments())
    assert loose.checked and not any(r.mismatch for r in loose.results)  # 3 * x is close enough
    strict = _scaled(nt.Check()).tune(*_arguments())
    assert strict.source == "benchmark"
    assert [r.mismatch is not None for r in strict.results] == [p >= 10 for p in range(20)]
    assert strict.best["P"] < 10
    assert _scaled(nt.Check()).tune(*_arguments()).source in ("memory", "disk")


def test_the_check_setting_turns_check_mode_on_for_every_kernel():
    nt.configure(check=True)
    try:
        report = _double().tune(*_arguments())
    finally:
        nt.configure(check=False)
    assert report.checked and report.results[1].mismatch is not None


def test_tolerances_default_per_dtype_and_can_be_set():
    assert nt.Check().tolerance(np.int32) == (0.0, 0.0)
    rtol32, _ = nt.Check().tolerance(np.float32)
    rtol64, _ = nt.Check().tolerance(np.float64)
    assert rtol64 < rtol32 < nt.Check().tolerance(np.float16)[0]
    assert nt.Check(rtol=0.5).tolerance(np.float64)[0] == 0.5
    with pytest.raises(TypeError, match=r"check must be True, False, None or numbatune\.Check"):
        _double(check="yes")


def test_assert_variants_agree_names_the_wrong_variant():
    x, out = _arguments(70)
    with pytest.raises(AssertionError) as failure:
        assert_variants_agree(_double(), x, out)
    message = str(failure.value)
    assert (
        "1 of 2 variants disagree with the reference, the kernel as written (ITEMS=1, "
        "OFF_BY_ONE=0)" in message
    )
    assert "ITEMS=4, OFF_BY_ONE=1: out: 17 of 70 elements differ" in message
    np.testing.assert_array_equal(out.copy_to_host(), -1.0)


def test_assert_variants_agree_passes_for_correct_variants():
    tuned = nt.autotune(
        variants=[{"ITEMS": 1, "OFF_BY_ONE": 0}, {"ITEMS": 4, "OFF_BY_ONE": 0}],
        launch=lambda x, out, *, ITEMS: (nt.cdiv(x.shape[0], 32 * ITEMS), 32),
    )(double)
    assert_variants_agree(tuned, *_arguments(70))


def test_the_reference_is_the_kernel_as_written_not_the_first_variant():
    tuned = nt.autotune(
        variants=[
            {"ITEMS": 4, "OFF_BY_ONE": 1},
            {"ITEMS": 2, "OFF_BY_ONE": 0},
            {"ITEMS": 1, "OFF_BY_ONE": 0},
        ],  # the module's values last
        launch=lambda x, out, *, ITEMS: (nt.cdiv(x.shape[0], 32 * ITEMS), 32),
        check=True,
    )(double)
    assert tuned.reference_variant == nt.Variant({"ITEMS": 1, "OFF_BY_ONE": 0})
    report = tuned.tune(*_arguments())
    assert report.results[0].mismatch is not None  # the first variant is the wrong one
    assert report.results[1].mismatch is None
    with pytest.raises(AssertionError, match=r"1 of 2 variants disagree with the reference, "
                       r"the kernel as written \(ITEMS=1, OFF_BY_ONE=0\):\n  ITEMS=4, "
                       r"OFF_BY_ONE=1"):  # fmt: skip
        assert_variants_agree(tuned, *_arguments())


def _launch_items(x, out, *, ITEMS):
    return nt.cdiv(x.shape[0], 32 * ITEMS), 32


def test_correct_variants_are_not_reported_wrong_where_no_variant_is_the_kernel_as_written():
    variants = [{"ITEMS": 4, "OFF_BY_ONE": 1}, {"ITEMS": 2, "OFF_BY_ONE": 0}]
    tuned = nt.autotune(variants=variants, launch=_launch_items, check=True)(double)
    assert tuned.written_variant is None  # the module's ITEMS=1 is not among them
    report = tuned.tune(*_arguments())
    assert [r.mismatch is not None for r in report.results] == [True, False]
    assert report.best == {"ITEMS": 2, "OFF_BY_ONE": 0}
    with pytest.raises(AssertionError, match=r"1 of 2 variants disagree with the reference, "
                       r"the kernel as written \(ITEMS=1, OFF_BY_ONE=0\):\n  ITEMS=4, "
                       r"OFF_BY_ONE=1: out: 25 of 100"):  # fmt: skip
        assert_variants_agree(tuned, *_arguments())


WRONG = [{"ITEMS": 4, "OFF_BY_ONE": 1}, {"ITEMS": 2, "OFF_BY_ONE": 1}]


@pytest.mark.parametrize("variants", [WRONG, WRONG[:1]])  # (one variant: checked too)
def test_no_wrong_variant_is_served_where_only_the_kernel_as_written_is_right(variants):
    tuned = nt.autotune(variants=variants, launch=_launch_items, check=True)(double)
    x, out = _arguments()
    with pytest.raises(nt.TuningError, match="ITEMS=4, OFF_BY_ONE=1: wrong result: out: 25 of"):
        tuned(x, out)
    np.testing.assert_array_equal(out.copy_to_host(), -1.0)


def test_check_mode_says_why_the_kernel_as_written_cannot_run_and_measures_nothing():
    def launch(x, out, *, ITMS):  # (misspelt: the kernel reads ITEMS, which no variant sets)
        return nt.cdiv(x.shape[0], 32 * ITMS), 32

    tuned = nt.autotune(variants=nt.product(ITMS=[1, 2]), launch=launch, check=True)(double)
    why = "the launch function's parameter ITMS has no default and no value as written"
    with pytest.raises(nt.TuningError, match=f"cannot run for key .*: {why}") as refused:
        tuned.tune(*_arguments())
    assert "Nothing was measured" in str(refused.value) and tuned.stats["benchmarks"] == 0
    with pytest.raises(AssertionError, match=f"the kernel as written, cannot run: {why}"):
        assert_variants_agree(tuned, *_arguments())


@cuda.jit
def scaled_by_unset(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i] * UNSET  # noqa: F821  (no module value: only the variants set it)


def test_check_mode_says_so_where_the_kernel_as_written_reads_a_global_it_lacks():
    tuned = nt.autotune(
        variants=nt.product(UNSET=[2, 3]), launch=lambda x, out: (4, 32), check=True
    )(scaled_by_unset)
    with pytest.raises(nt.TuningError, match="it reads UNSET, which has no value as written"):
        tuned.tune(*_arguments())


def test_check_mode_says_so_where_valid_refuses_the_kernel_as_written():
    tuned = nt.autotune(
        variants=[{"ITEMS": 2, "OFF_BY_ONE": 0}],
        launch=_launch_items,
        valid=lambda x, out, *, ITEMS: ITEMS > 1,
        check=True,
    )(double)
    with pytest.raises(nt.TuningError, match=r"valid says it \(ITEMS=1, OFF_BY_ONE=0\) may not"):
        tuned.tune(*_arguments())


BLOCK = 32


@cuda.jit
def block_sums(x, partials):
    """One partial sum per block (cuda.reduce's shape): their number depends on BLOCK."""
    shared = cuda.shared.array(BLOCK, np.float32)
    i = cuda.grid(1)
    shared[cuda.threadIdx.x] = x[i] if i < x.shape[0] else 0
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        total = 0.0
        for k in range(BLOCK):
            total += shared[k]
        partials[cuda.blockIdx.x] = total


def _block_sums(check=None):
    return nt.autotune(
        variants=nt.product(BLOCK=[8, 16, 32]),
        launch=lambda x, partials, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
        check=check,
    )(block_sums)


def test_outputs_that_differ_by_design_are_compared_through_a_function_of_them():
    x = cuda.to_device(np.arange(40, dtype=np.float32))
    partials = cuda.to_device(np.zeros(5, np.float32))  # enough for the smallest block
    with pytest.raises(AssertionError, match="2 of 2 variants disagree"):
        assert_variants_agree(_block_sums(), x, partials)
    assert_variants_agree(_block_sums(), x, partials, outputs=lambda x, p: p.sum())
    report = _block_sums(nt.Check(outputs=lambda x, p: p.sum())).tune(x, partials)
    assert all(r.mismatch is None and r.median_s is not None for r in report.results)
    tuned = _block_sums()
    blocks = nt.cdiv(40, tuned.best(x, partials)["BLOCK"])  # the host sums what the winner wrote
    tuned(x, partials)
    assert partials.copy_to_host()[:blocks].sum() == np.arange(40).sum()


def test_a_variant_that_raises_is_named_with_its_error():
    def launch(x, out, *, ITEMS):
        if ITEMS == 4:
            raise ZeroDivisionError("no tile of four")
        return nt.cdiv(x.shape[0], 32 * ITEMS), 32

    tuned = nt.autotune(variants=nt.product(ITEMS=[1, 4], OFF_BY_ONE=[0]), launch=launch)(double)
    with pytest.raises(
        AssertionError,
        match=r"ITEMS=4, OFF_BY_ONE=0: raised LaunchFunctionError"
        r".*the launch function raised ZeroDivisionError: no tile of four",
    ):
        assert_variants_agree(tuned, *_arguments())


RECORD = np.dtype([("position", np.float32, (2,)), ("count", np.int32)])


@cuda.jit
def step(records):
    i = cuda.grid(1)
    if i < records.shape[0]:
        records[i]["count"] += 1
        records[i]["position"][0] += 0.5 * OFF_BY_ONE


def test_record_arrays_are_compared_field_by_field():
    records = cuda.to_device(np.zeros(10, RECORD))
    tuned = nt.autotune(
        variants=nt.product(OFF_BY_ONE=[0, 1]), launch=lambda r: (1, 32), check=True
    )(step)
    report = tuned.tune(records)
    assert report.results[0].mismatch is None
    assert report.results[1].mismatch == nt.Mismatch("records", 10, 10, float("inf"))
    with pytest.raises(AssertionError, match="OFF_BY_ONE=1: records: 10 of 10 elements differ"):
        assert_variants_agree(tuned, records)


def test_empty_record_arrays_compare_equal():
    for shape in [(0,), (3, 0)]:
        empty = [("records", np.zeros(shape, RECORD))]
        assert checks.compare(empty, [("records", np.zeros(shape, RECORD))], nt.Check()) is None


@pytest.mark.parametrize(
    "dtype, expected, got, error",
    [
        (np.int64, 2**60, 2**60 + 1, 1.0),  # equal as float64s
        (np.uint64, 2**64 - 1, 2**64 - 2, 1.0),
        (np.int64, -(2**63), 2**63 - 1, float(2**64 - 1)),  # beyond int64
    ],
)
def test_64_bit_integers_are_compared_exactly(dtype, expected, got, error):
    want = [("out", np.array([expected, 7], dtype))]
    have = [("out", np.array([got, 7], dtype))]
    assert checks.compare(want, have, nt.Check()) == nt.Mismatch("out", 1, 2, error)


@pytest.mark.parametrize("wrong", [np.inf, -np.inf, np.nan])
def test_the_largest_error_is_infinite_where_one_side_is_infinite_or_nan(wrong):
    want = [("out", np.array([1.0, 2.0]))]
    have = [("out", np.array([wrong, 2.0]))]
    assert checks.compare(want, have, nt.Check()) == nt.Mismatch("out", 1, 2, float("inf"))


@pytest.mark.gpu
def test_on_a_gpu_the_kernel_as_written_is_compiled_and_run_as_the_reference():
    variants = [
        {"ITEMS": 4, "OFF_BY_ONE": 1},
        {"ITEMS": 2, "OFF_BY_ONE": 0},
        {"ITEMS": 8, "OFF_BY_ONE": 0},
    ]
    tuned = nt.autotune(variants=variants, launch=_launch_items, check=True)(double)
    x, out = _arguments(1 << 16)
    report = tuned.tune(x, out, force=True)  # (compiled in workers, tried in the trial worker)
    assert [r.mismatch is not None for r in report.results] == [True, False, False]
    assert report.best_index != 0
    tuned(x, out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(1 << 16, dtype=np.float32))
