"""Kernels written as numba-cuda's own tests write them: what numba runs, a tuned kernel runs
and tunes; what numba refuses, it refuses with numba's error."""

import collections
import math

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR
from numbatune.compilers import payloads
from numbatune.config import Isolate

Point = collections.namedtuple("Point", "x y")


class KernelError(Exception):
    """What a debug kernel raises."""


def _blocks(out, *rest, BLOCK):
    return nt.cdiv(out.shape[0], BLOCK), BLOCK


def _tuned(kernel):
    return nt.autotune(variants=nt.product(BLOCK=[16, 32]), launch=_blocks)(kernel)


def _no_general_path(tuned, monkeypatch):
    """Make a call of ``tuned`` that leaves its fast path fail the test (on a GPU)."""

    def general_path(*args):
        raise AssertionError(f"{tuned.name}: a call with a known key left the fast path")

    if not SIMULATOR:
        monkeypatch.setattr(tuned._winners, "launch", general_path)


@cuda.jit
def line(out, p):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = p.x + p.y * i


def test_a_named_tuple_reaches_every_variant_as_one():
    tuned = _tuned(line)
    out = cuda.device_array(64)
    report = tuned.tune(out, Point(1.0, 2.0))
    assert all(result.error is None for result in report.results)
    tuned(out, Point(1.0, 2.0))
    np.testing.assert_array_equal(out.copy_to_host(), 1.0 + 2.0 * np.arange(64))


@cuda.jit
def scaled(out, scale=2.0):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = scale * i


def test_a_parameter_with_a_default_may_be_left_out_as_numba_allows(monkeypatch):
    tuned = _tuned(scaled)
    out = cuda.device_array(64)
    assert tuned.tune(out).winner in tuned.variants
    tuned(out)
    np.testing.assert_array_equal(out.copy_to_host(), 2.0 * np.arange(64))
    _no_general_path(tuned, monkeypatch)
    tuned(out, 3.0)
    np.testing.assert_array_equal(out.copy_to_host(), 3.0 * np.arange(64))
    tuned(out)  # a hit: the fast path, the default filled in
    np.testing.assert_array_equal(out.copy_to_host(), 2.0 * np.arange(64))


@cuda.jit(debug=True, opt=False)
def checked_sqrt(out, x):
    i = cuda.grid(1)
    if i < out.shape[0]:
        if x[i] < 0:
            raise KernelError
        out[i] = math.sqrt(x[i])


def test_a_debug_kernels_own_exception_is_raised_at_the_first_call_as_on_hits():
    tuned = _tuned(checked_sqrt)
    out = cuda.device_array(64)
    with pytest.raises(KernelError) as raised:  # every variant raises it
        tuned(out, cuda.to_device(-np.ones(64)))
    assert isinstance(raised.value, nt.TuningError)  # naming every variant's error
    assert isinstance(raised.value.__cause__, KernelError)
    tuned(out, cuda.to_device(np.full(64, 4.0)))  # the same key, now tuned
    np.testing.assert_array_equal(out.copy_to_host(), np.full(64, 2.0))
    with pytest.raises(KernelError):  # a hit raises it too
        tuned(out, cuda.to_device(-np.ones(64)))


def test_a_kernel_payload_carries_a_script_s_exception_class_there_and_back():
    """A debug kernel's exception class defined in the user's script (``__main__``, which a
    compile worker cannot import) crosses in a kernel's payload, and comes back as the
    script's own class."""
    from numba.cuda import cloudpickle

    script_error = type("ScriptError", (Exception,), {"__module__": "__main__"})
    payload = payloads.pack(1, {"raises": script_error}, pickler=cloudpickle)
    assert payloads.unpack(payload, 1, "numba-cuda")["raises"] is script_error


@pytest.mark.gpu
@pytest.mark.parametrize(("isolate", "workers"), [("all", 4), ("off", 0)])
def test_fp16_kernels_tune(isolate, workers, monkeypatch):
    from numba.cuda import fp16

    monkeypatch.setattr(nt.settings, "isolate", Isolate(isolate))
    monkeypatch.setattr(nt.settings, "compile_workers", workers)

    @cuda.jit
    def add_halves(out, a, b):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = fp16.hadd(a[i], b[i])

    tuned = _tuned(add_halves)
    a = np.arange(64, dtype=np.float16)
    out = cuda.device_array(64, np.float16)
    report = tuned.tune(out, cuda.to_device(a), cuda.to_device(a))
    assert all(result.error is None for result in report.results), report.results
    tuned(out, cuda.to_device(a), cuda.to_device(a))
    np.testing.assert_array_equal(out.copy_to_host(), a + a)


class _Unpicklable(np.ndarray):
    """Under the simulator, where a kernel's Python function goes to the trial worker: an
    array that no pickle takes."""

    def __reduce_ex__(self, protocol):
        raise TypeError("an array that does not pickle")


# A global array numba reads, in a kernel the trial worker cannot be sent: on a GPU a device
# array (numba refuses to serialise a kernel that reads one: its pointer is in the code).
ONES = np.ones(1).view(_Unpicklable) if SIMULATOR else cuda.to_device(np.ones(1))


@cuda.jit
def from_a_global_array(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = ONES[0]


def test_a_kernel_that_cannot_go_to_the_trial_worker_runs_untried(monkeypatch):
    """numba runs a kernel that reads a global device array, and does not serialise it for the
    trial worker: the tuned kernel runs it too."""
    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)
    tuned = _tuned(from_a_global_array)
    out = cuda.device_array(64)
    tuned(out)
    np.testing.assert_array_equal(out.copy_to_host(), np.ones(64))


RECORD = np.dtype([("x", np.float64), ("y", np.int32)], align=True)


@cuda.jit
def from_record(out, r):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = r.x + r.y


@pytest.mark.gpu
def test_a_record_passed_by_value_tunes_and_passes_its_trial(monkeypatch):
    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)
    tuned = _tuned(from_record)
    record = np.array([(1.5, 2)], dtype=RECORD)[0]
    out = cuda.device_array(64)
    report = tuned.tune(out, record)
    assert all(result.error is None for result in report.results), report.results
    tuned(out, record)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(64, 3.5))


@cuda.jit(["void(float32[:])", "void(int32[:])"])
def incremented(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] += 1


@pytest.mark.gpu
def test_a_kernel_of_two_signatures_refuses_arguments_of_neither_with_numbas_error():
    tuned = _tuned(incremented)
    with pytest.raises(TypeError, match="No matching definition"):
        incremented[1, 64](cuda.device_array(64, np.float64))
    with pytest.raises(TypeError, match="No matching definition"):
        tuned(cuda.device_array(64, np.float64))
    a = cuda.to_device(np.arange(64, dtype=np.int32))
    tuned(a)
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(1, 65))


@cuda.jit
def doubled(out, x):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = 2 * x[i]


@pytest.mark.gpu
@pytest.mark.parametrize("memory", ["mapped", "managed"])
def test_mapped_and_managed_arrays_take_the_fast_path(memory, monkeypatch):
    allocate = getattr(cuda, f"{memory}_array")
    tuned = _tuned(doubled)
    x, out = allocate(64, np.float32), allocate(64, np.float32)
    x[:] = np.arange(64)
    tuned(out, x)
    cuda.synchronize()
    _no_general_path(tuned, monkeypatch)
    x[:] = 1
    tuned(out, x)
    cuda.synchronize()
    np.testing.assert_array_equal(np.asarray(out), np.full(64, 2.0))
