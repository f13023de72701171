"""numbatune.nonnegative: the value is kept, and numba's negative-index wraparound goes."""

import numpy as np
import pytest
from numba import cuda, float32

import numbatune as nt


@cuda.jit
def copy_signed(a, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < a.shape[0]:
        out[i] = a[i]


@cuda.jit
def copy_nonnegative(a, out):
    i = nt.nonnegative(cuda.blockIdx.x) * nt.nonnegative(cuda.blockDim.x)
    i += nt.nonnegative(cuda.threadIdx.x)
    if i < a.shape[0]:
        out[i] = a[i]


def test_nonnegative_keeps_the_index():
    a = np.arange(100, dtype=np.float32)
    out = np.zeros_like(a)
    copy_nonnegative[4, 32](a, out)
    np.testing.assert_array_equal(out, a)


@pytest.mark.gpu
def test_nonnegative_removes_the_wraparound_of_an_index():
    signature = (float32[::1], float32[::1])
    copy_signed.compile(signature)
    copy_nonnegative.compile(signature)
    signed = copy_signed.inspect_asm(signature)
    nonnegative = copy_nonnegative.inspect_asm(signature)
    # numba's wraparound of a signed index i: i + (shape if i < 0 else 0), as a shift of the
    # sign bit across the word, masking the shape
    assert "shr.s64" in signed
    assert "shr.s64" not in nonnegative
