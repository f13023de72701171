"""Core behaviour on a real GPU: timing decides, clones are faithful, every array kind works."""

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import arraykinds, arrays
from tests import kernels

pytestmark = pytest.mark.gpu

N = 1 << 20


def test_a_variant_doing_64_times_the_work_loses():
    tuned = nt.autotune(
        variants=nt.product(REPS=[64, 1]),
        launch=lambda a, out: (nt.cdiv(a.shape[0], 256), 256),
    )(kernels.repeated_sine)
    a = cuda.to_device(np.random.default_rng(0).random(N, dtype=np.float32))
    report = tuned.tune(a, cuda.device_array(N, np.float32))
    slow, fast = report.results
    assert report.best == {"REPS": 1}
    assert slow.median_s > 4 * fast.median_s


def test_an_accumulating_kernel_holds_one_launch_after_a_tuned_call():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[64, 128, 256, 512, 1024]), launch=kernels.accumulate_launch
    )(kernels.accumulate)
    a = cuda.to_device(np.ones(N, np.float32))
    out = cuda.to_device(np.zeros(N, np.float32))
    tuned(a, out)
    assert np.all(out.copy_to_host() == 1)
    tuned(a, out)
    assert np.all(out.copy_to_host() == 2)
    # The variants differ only in the block size, which the kernel does not read: one compile.
    assert tuned.stats == {"compiles": 1, "loaded": 0, "benchmarks": 1}


@pytest.mark.parametrize(
    "view", [lambda m: m, lambda m: m[::2, 1::3], lambda m: m.T, lambda m: m[5:, :7]]
)
def test_clones_keep_contents_strides_and_numba_type(view):
    matrix = cuda.to_device(np.arange(64 * 48, dtype=np.float32).reshape(64, 48))
    original = view(matrix)
    clone = arrays.clone(original)
    assert clone.strides == original.strides
    assert cuda.jit(lambda x: None).typeof_pyval(clone) == cuda.jit(lambda x: None).typeof_pyval(
        original
    )
    np.testing.assert_array_equal(clone.copy_to_host(), original.copy_to_host())
    assert clone.device_ctypes_pointer.value != original.device_ctypes_pointer.value


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_cuda_array_interface_arguments_are_tuned_and_launched(library):
    module = pytest.importorskip(library)
    device = {"device": "cuda"} if library == "torch" else {}
    a = module.ones(N, dtype=module.float32, **device)
    out = module.zeros(N, dtype=module.float32, **device)
    tuned = nt.autotune(variants=nt.product(BLOCK=[128, 256]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    tuned(a, out)
    cuda.synchronize()
    assert float(out.sum()) == N


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_fast_array_readers_agree_with_the_cuda_array_interface(library):
    module = pytest.importorskip(library)
    device = {"device": "cuda"} if library == "torch" else {}
    matrix = module.zeros((6, 10), dtype=module.float32, **device)
    for view in (matrix, matrix.T, matrix[::2, 1::3], matrix[2:, :], matrix[:1, :]):
        assert arrays.read(view) == arraykinds._read_interface(view)
