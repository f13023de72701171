"""Kernels whose runs depend on state: every tuning run starts from what the caller passed."""

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import arrays, references


@cuda.jit
def compact(x, out, count):
    """Stream compaction: the positive elements of x, in any order, and how many."""
    i = cuda.grid(1)
    if i < x.shape[0] and x[i] > 0:
        out[cuda.atomic.add(count, 0, 1)] = x[i]


def _compact(**options):
    return nt.autotune(
        variants=nt.product(BLOCK=[4, 8, 16]),
        launch=lambda x, out, count, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
        **options,
    )(compact)


@pytest.mark.parametrize("read_only", [(), ("x",)])
def test_a_kernel_that_writes_its_inputs_is_tuned_as_it_runs_once(read_only):
    values = np.array([3, -1, 5, 0, 7, -2, 9, 1, -4, 2], np.float32)
    x = cuda.to_device(values)
    out = cuda.to_device(np.zeros(6, np.float32))  # room for exactly the positive ones
    count = cuda.to_device(np.zeros(1, np.int32))
    tuned = _compact(read_only=read_only)
    report = tuned.tune(x, out, count)
    assert all(r.median_s is not None for r in report.results), [r.error for r in report.results]
    tuned(x, out, count)
    assert count.copy_to_host()[0] == 6
    assert sorted(out.copy_to_host()) == sorted(values[values > 0])


@cuda.jit
def bump_first(arrays_, n):
    i = cuda.grid(1)
    if i < n:
        arrays_[0][i] += 1


def test_arrays_passed_in_a_tuple_are_tuned_on_copies_and_written_once():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[8, 16, 32]),
        launch=lambda arrays_, n, *, BLOCK: (nt.cdiv(n, BLOCK), BLOCK),
    )(bump_first)
    a = cuda.to_device(np.zeros(32, np.float32))
    tuned.tune((a,), 32)
    assert a.copy_to_host().tolist() == [0] * 32  # tuning writes no array of the caller's
    tuned((a,), 32)
    assert a.copy_to_host().tolist() == [1] * 32


def test_read_only_names_arguments_of_the_kernel():
    with pytest.raises(ValueError, match=r"read_only names \['y'\], which are not arguments"):
        _compact(read_only=["y"])
    for bad in ("x", None, 5, [1]):
        with pytest.raises(TypeError, match=r"^autotune\(compact\): read_only must be a list of"):
            _compact(read_only=bad)


@pytest.mark.parametrize(("name", "error"), [(5, TypeError), (["x"], TypeError), ("", ValueError)])
def test_a_name_must_be_a_non_empty_string(name, error):
    with pytest.raises(error, match=r"^autotune\(compact\): name must be a non-empty string"):
        _compact(name=name)


@cuda.jit
def _scale_rows(m, factors, out):
    i, j = cuda.grid(2)
    if i < m.shape[0] and j < len(factors):
        row = m[i]  # a view: what is done with it is not followed
        out[i, j] = row[j] * factors[j]


@cuda.jit
def _in_place(a, b):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] += 1
        b[i] = b[i] * 2


def test_the_kernels_element_uses_say_which_arrays_it_only_reads_or_only_writes():
    uses = references.element_uses(compact)
    assert uses["x"] == references.ElementUse(reads=True, indices=frozenset({1}))
    assert uses["out"] == references.ElementUse(writes=True, indices=frozenset({1}))
    assert uses["count"].reads and uses["count"].writes  # passed to an atomic
    assert uses["x"].rerun_changes_nothing(ndim=1, records=False)
    assert uses["out"].rerun_changes_nothing(ndim=1, records=False)
    assert not uses["out"].rerun_changes_nothing(ndim=1, records=True)  # records are views
    assert not uses["count"].rerun_changes_nothing(ndim=1, records=False)
    scaled = references.element_uses(_scale_rows)
    assert not scaled["m"].rerun_changes_nothing(ndim=2, records=False)  # m[i] is a row
    assert scaled["factors"].rerun_changes_nothing(ndim=1, records=False)
    in_place = references.element_uses(_in_place).values()
    assert not any(use.rerun_changes_nothing(ndim=1, records=False) for use in in_place)


def _restored_names(monkeypatch, tuned, args):
    """The names of the arguments tuning copies back before each run."""
    names = []
    real = arrays.restorer

    def restorer(clones, originals, stream=0):
        copied = [o is not None for o in originals]
        names.append({name for name, copy in zip("abc", copied, strict=False) if copy})
        return real(clones, originals, stream)

    monkeypatch.setattr(arrays, "restorer", restorer)
    tuned.tune(*args)
    return names[-1]


def test_tuning_copies_back_only_the_arrays_a_run_can_change(monkeypatch):
    x = cuda.to_device(np.arange(-4, 6, dtype=np.float32))
    out = cuda.to_device(np.zeros(10, np.float32))
    count = cuda.to_device(np.zeros(1, np.int32))
    assert _restored_names(monkeypatch, _compact(), (x, out, count)) == {"c"}
    m = cuda.to_device(np.ones((3, 4), np.float32))
    factors = cuda.to_device(np.arange(4, dtype=np.float32))
    scaled = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda m, factors, out, *, BLOCK: ((3, nt.cdiv(4, BLOCK)), (1, BLOCK)),
    )(_scale_rows)
    assert _restored_names(monkeypatch, scaled, (m, factors, cuda.device_array((3, 4)))) == {"a"}
    twice = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda a, b, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
    )(_in_place)
    a, b = cuda.to_device(np.zeros(8, np.float32)), cuda.to_device(np.ones(8, np.float32))
    assert _restored_names(monkeypatch, twice, (a, b)) == {"a", "b"}
    assert (a.copy_to_host() == 0).all() and (b.copy_to_host() == 1).all()  # tuning wrote clones


@cuda.jit
def _bump_through_a_slice(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        one = slice(i, i + 1)  # a[one] is a view of a, as a[i : i + 1] is
        view = a[one]
        view[0] += 1
        out[i] = view[0]


def test_a_view_taken_through_a_slice_held_in_a_name_is_copied_back_before_each_run(
    monkeypatch,
):
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
    )(_bump_through_a_slice)
    a, out = cuda.to_device(np.zeros(8, np.float32)), cuda.device_array(8, np.float32)
    assert _restored_names(monkeypatch, tuned, (a, out)) == {"a"}
    assert not references.element_uses(_bump_through_a_slice)["a"].rerun_changes_nothing(
        ndim=1, records=False
    )
