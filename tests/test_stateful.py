"""Kernels whose runs depend on state: every tuning run starts from what the caller passed."""

import numpy as np
import pytest
from numba import cuda

import numbatune as nt


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


def test_read_only_names_arguments_of_the_kernel():
    with pytest.raises(ValueError, match=r"read_only names \['y'\], which are not arguments"):
        _compact(read_only=["y"])
    with pytest.raises(TypeError, match="read_only must be a list of argument names"):
        _compact(read_only="x")
