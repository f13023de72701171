"""numbatune.static_range: loops written out when a variant is compiled, with the same result."""

import numpy as np
import pytest
from numba import cuda, float32

import numbatune as nt

STEPS = 4


@nt.autotune(variants=nt.product(STEPS=[1, 3, 4]), launch=lambda a, out: (1, 1))
@cuda.jit
def prefix_sums(a, out):
    """out[k] = a[0] + ... + a[k] for k < STEPS; the inner bound is the outer loop's value."""
    for k in nt.static_range(STEPS):
        total = float32(0)
        for j in nt.static_range(k + 1):
            total += a[j]
        out[k] = total


@pytest.mark.parametrize("steps", [1, 3, 4])
def test_static_loops_compute_what_range_loops_do(steps):
    a = np.arange(1, 9, dtype=np.float32)
    out = cuda.to_device(np.zeros(8, np.float32))
    prefix_sums.run_variant({"STEPS": steps}, cuda.to_device(a), out)
    expected = np.zeros(8, np.float32)
    expected[:steps] = np.cumsum(a)[:steps]
    np.testing.assert_array_equal(out.copy_to_host(), expected)


def make_shifted_copy(shift):
    """A kernel whose static loop reads a closure variable, in its bound and in its body."""

    @nt.autotune(variants=nt.product(STEPS=[2, 3]), launch=lambda a, out: (1, 1))
    @cuda.jit
    def shifted_copy(a, out):
        for k in nt.static_range(shift, shift + STEPS):
            out[k] = a[k] + shift

    return shifted_copy


def test_static_loops_read_closure_variables():
    kernel = make_shifted_copy(2)
    a = np.arange(8, dtype=np.float32)
    out = cuda.to_device(np.zeros(8, np.float32))
    kernel.run_variant({"STEPS": 3}, cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), [0, 0, 4, 5, 6, 0, 0, 0])


@nt.autotune(variants=nt.product(STEPS=[2, 3]), launch=lambda a, out: (1, 1))
@cuda.jit
def runtime_bound(a, out):
    for k in nt.static_range(a.shape[0]):
        out[k] = a[k] * STEPS


@nt.autotune(variants=nt.product(STEPS=[2, 3]), launch=lambda a, out: (1, 1))
@cuda.jit
def breaks_out(a, out):
    for k in nt.static_range(STEPS):
        if a[k] < 0:
            break
        out[k] = a[k]


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        (runtime_bound, r"runtime_bound, line \d+\): its bounds must be compile-time integers"),
        (breaks_out, r"breaks_out, line \d+\): the body cannot break or continue the loop"),
    ],
)
def test_a_static_loop_that_cannot_be_written_out_is_refused_by_name(kernel, message):
    a = cuda.to_device(np.ones(4, np.float32))
    with pytest.raises(TypeError, match=message):
        kernel.run_variant({"STEPS": 2}, a, cuda.device_array(4, np.float32))


@nt.autotune(variants=nt.product(STEPS=[2, 3]), launch=lambda a, out: (1, 1))
@cuda.jit
def local_array_per_step(a, out):
    """Each step sizes a local array by the loop variable: a constant only once written out."""
    for k in nt.static_range(1, STEPS + 1):
        scratch = cuda.local.array(k, float32)
        for j in range(k):
            scratch[j] = a[j]
        out[k - 1] = scratch[k - 1]


@pytest.mark.gpu
def test_the_loop_variable_is_a_compile_time_constant_on_a_gpu():
    a = np.arange(1, 5, dtype=np.float32)
    out = cuda.to_device(np.zeros(4, np.float32))
    local_array_per_step.run_variant({"STEPS": 3}, cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), [1, 2, 3, 0])


def test_a_kernel_whose_source_cannot_be_read_is_refused_by_name():
    namespace = {"cuda": cuda, "nt": nt, "N": 2}
    exec(
        "def no_source(out):\n    for k in nt.static_range(N):\n        out[k] = k\n",
        namespace,
    )
    tuned = nt.autotune(variants=[{"N": 2}], launch=lambda out: (1, 1))(namespace["no_source"])
    with pytest.raises(nt.KernelSourceError, match=r"no_source.*cannot be read"):
        tuned(cuda.to_device(np.zeros(2, np.int64)))


@pytest.mark.parametrize(
    "function",
    [prefix_sums.py_func, make_shifted_copy(1).py_func, make_shifted_copy],
    ids=["decorated kernel", "kernel in a closure", "plain function"],
)
def test_a_kernels_source_is_read_as_inspect_reads_it(function):
    """(Through linecache, not inspect's search of every loaded module.)"""
    import inspect

    from numbatune.unroll import _source_lines

    assert _source_lines(function.__code__) == inspect.getsourcelines(function.__code__)


WIDTH, SPREAD, HUGE = 4, False, 1 << 62


@nt.autotune(variants=nt.product(WIDTH=[4, 8], SPREAD=[False, True]), launch=lambda a, out: (1, 1))
@cuda.jit
def gather(a, out):
    """Indices computed from constants, chosen by a constant flag; one beyond 64-bit range."""
    for k in nt.static_range(2):
        out[k] = a[k * (WIDTH // 4) + 1 if SPREAD else k]
    out[2] = WIDTH * 2 if not SPREAD and WIDTH > 4 else -1
    if a.shape[0] < 0:  # never: a product past 64 bits, left for numba to compute
        out[0] = HUGE * 4


@pytest.mark.parametrize(("width", "spread"), [(4, False), (4, True), (8, False), (8, True)])
def test_written_out_loops_have_their_constant_expressions_computed(width, spread):
    function = gather._template.specialised_function(nt.Variant({"WIDTH": width, "SPREAD": spread}))
    # The constants' expressions were computed when written out, but the product past 64 bits:
    # it is left as written (not to Python, which would compute it past numba's range).
    code = function.__code__
    assert set(code.co_names) & {"WIDTH", "SPREAD", "HUGE"} == {"HUGE"}
    assert HUGE * 4 not in code.co_consts
    a = np.arange(10, 20, dtype=np.float32)
    out = cuda.to_device(np.zeros(3, np.float32))
    gather.run_variant({"WIDTH": width, "SPREAD": spread}, cuda.to_device(a), out)
    first, second = (a[1], a[width // 4 + 1]) if spread else (a[0], a[1])
    third = 16 if width == 8 and not spread else -1
    np.testing.assert_array_equal(out.copy_to_host(), [first, second, third])


LOG = 3


@nt.autotune(variants=nt.product(LOG=[3, 4]), launch=lambda a, out: (1, 1))
@cuda.jit
def guarded_shifts(a, out):
    """Shifts by counts that are negative, or huge, only in a branch never taken for them."""
    total = float32(0)
    for s in nt.static_range(LOG):
        if s > 0:
            total += a[1 << (s - 1)] * (8 >> (s - 1))
        if s > 99:
            total += 1 << (1 << 40)
    out[0] = total


@pytest.mark.parametrize("log", [3, 4])
def test_shifts_in_branches_not_taken_are_left_to_run_time(log):
    a = np.arange(10, 20, dtype=np.float32)
    out = cuda.to_device(np.zeros(1, np.float32))
    guarded_shifts.run_variant({"LOG": log}, cuda.to_device(a), out)
    expected = sum(a[1 << (s - 1)] * (8 >> (s - 1)) for s in range(1, log))
    np.testing.assert_array_equal(out.copy_to_host(), [expected])


def test_the_size_of_a_written_out_kernel_grows_with_its_static_loops():
    # prefix_sums writes out STEPS outer steps, step k holding k + 1 inner ones.
    sizes = [prefix_sums._template.written_out_size(nt.Variant({"STEPS": s})) for s in (1, 3, 4)]
    # Step k: the step's loop, total = 0, k + 1 inner steps of one add each, out[k] = total.
    assert sizes[2] - sizes[1] == 1 + 1 + 4 * 2 + 1
    assert sizes[1] - sizes[0] == (1 + 1 + 2 * 2 + 1) + (1 + 1 + 3 * 2 + 1)


@cuda.jit(device=True)
def _first_sum(a):
    total = float32(0)
    for j in nt.static_range(STEPS):
        total += a[j]
    return total


@nt.autotune(variants=nt.product(STEPS=[1, 4]), launch=lambda a, out: (1, 1))
@cuda.jit
def summed_by_a_device_function(a, out):
    out[0] = _first_sum(a)


def test_the_written_out_size_counts_the_loops_of_the_device_functions_the_kernel_calls():
    template = summed_by_a_device_function._template
    sizes = [template.written_out_size(nt.Variant({"STEPS": s})) for s in (1, 4)]
    assert sizes[1] - sizes[0] == 3 * 2  # three more steps, each of one add
