"""Failing variants and bad input: recorded, or refused with a clear error."""

import re

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from tests import kernels


def sine(reps, launch=lambda a, out: (1, a.shape[0])):
    """REPS=None fails: a TypeError under the simulator, a typing error when compiling."""
    return nt.autotune(variants=nt.product(REPS=reps), launch=launch)(kernels.repeated_sine)


def arrays(n=4):
    return cuda.to_device(np.arange(n, dtype=np.float32)), cuda.to_device(np.zeros(n, np.float32))


def test_a_failing_variant_is_recorded_and_skipped():
    tuned = sine([None, 1])
    a, out = arrays()
    report = tuned.tune(a, out)
    failed, good = report.results
    assert failed.median_s is None and "Error" in failed.error
    assert good.error is None and report.best == {"REPS": 1}
    tuned(a, out)
    np.testing.assert_allclose(out.copy_to_host(), np.sin(np.arange(4)) + np.arange(4), rtol=1e-6)


def test_when_every_variant_fails_one_error_names_them_all_and_nothing_is_kept():
    tuned = sine([None, "two"])
    a, out = arrays()
    with pytest.raises(nt.TuningError) as raised:
        tuned(a, out)
    message = str(raised.value)
    assert "REPS=None" in message and "REPS='two'" in message and "Error" in message
    with pytest.raises(nt.TuningError):
        tuned(a, out)  # nothing was cached for the key: it is tried again
    assert tuned.stats["benchmarks"] == 0
    np.testing.assert_array_equal(out.copy_to_host(), np.zeros(4))


def test_a_variant_whose_launch_config_is_invalid_is_recorded():
    def launch(a, out, *, REPS):
        return (1, 0 if REPS == 2 else a.shape[0])

    tuned = sine([2, 1], launch=launch)
    report = tuned.tune(*arrays())
    assert "launch function returned" in report.results[0].error
    assert report.best == {"REPS": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"variants": []}, "variants is empty"),
        ({"variants": [{"BLOCK": 2}, {"BLOCK": 2}]}, "listed twice"),
        ({"variants": {"BLOCK": 2}}, "variants must be a list"),
        ({"variants": [{"BLOCK": 2, "NOT_READ": 2}]}, "parameters NOT_READ are used neither"),
        ({"variants": [nt.Variant({"BLOCK": 2})], "launch": 5}, "launch must be a function"),
        ({"key": 5}, "key must be None"),
        ({"key": ["a", "nope"]}, r"key names \['nope'\] are not arguments"),
    ],
)
def test_bad_decorator_arguments_are_refused_at_decoration(options, message):
    arguments = {"variants": nt.product(BLOCK=[2]), "launch": kernels.accumulate_launch}
    with pytest.raises((TypeError, ValueError), match=message):
        nt.autotune(**{**arguments, **options})(kernels.accumulate)


def test_a_misspelt_parameter_is_refused_naming_the_globals_read_and_the_closest():
    with pytest.raises(ValueError) as refused:
        sine([1, 2]).with_variants(nt.product(REPZ=[1, 2]))
    message = str(refused.value)
    assert "\n" not in message
    assert "parameters REPZ (did you mean REPS?) are used neither by the kernel" in message
    assert message.endswith("The kernel reads the globals REPS")  # (not cuda, math: modules)


def test_a_parameter_only_valid_reads_is_used():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[2], EVEN=[False, True]),
        launch=kernels.accumulate_launch,
        valid=lambda a, out, *, EVEN: not EVEN or a.shape[0] % 2 == 0,
    )(kernels.accumulate)
    assert len(tuned.variants) == 2


def test_unknown_jit_options_are_refused():
    with pytest.raises(ValueError, match=r"unknown numba\.cuda\.jit options"):
        nt.Variant({"BLOCK": 2}, fast_math=True)


def test_decorating_something_that_is_not_a_kernel_is_refused():
    with pytest.raises(TypeError, match=r"expected a numba\.cuda\.jit kernel"):
        nt.autotune(variants=[{"BLOCK": 2}], launch=kernels.accumulate_launch)(42)


def test_decorating_a_device_function_is_refused():
    @cuda.jit(device=True)
    def helper(x):
        return x + kernels.BLOCK

    with pytest.raises(TypeError, match="device function"):
        nt.autotune(variants=[{"BLOCK": 2}], launch=kernels.accumulate_launch)(helper)


def tuned_accumulate(**options):
    return nt.autotune(
        variants=nt.product(BLOCK=[2, 4]), launch=kernels.accumulate_launch, **options
    )(kernels.accumulate)


def test_host_numpy_arrays_are_refused_by_name():
    with pytest.raises(TypeError, match="argument 'out' is a host \\(NumPy\\) array"):
        tuned_accumulate()(cuda.to_device(np.ones(4, np.float32)), np.zeros(4, np.float32))


def test_torch_tensors_in_host_memory_are_refused_by_name():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="argument 'a' is a torch tensor on cpu"):
        tuned_accumulate()(torch.ones(4), cuda.to_device(np.zeros(4, np.float32)))


def test_an_array_on_another_gpu_than_the_current_one_is_refused_by_name(monkeypatch):
    """(As a process with two GPUs sees it; tests/test_devices.py runs it on two.)"""
    from numbatune import devices

    a, out = arrays()
    monkeypatch.setattr(devices, "several", lambda: True)
    monkeypatch.setattr(devices, "current_index", lambda: 0)
    monkeypatch.setattr(devices, "array_device", lambda array, kind: 1 if array is out else 0)
    tuned = tuned_accumulate()
    expected = r"argument 'out' is on GPU 1, but the kernel launches on GPU 0 .*gpus\[1\]"
    with pytest.raises(ValueError, match=expected):
        tuned(a, out)
    assert tuned.stats["benchmarks"] == 0
    np.testing.assert_array_equal(out.copy_to_host(), 0.0)


def test_a_wrong_number_of_arguments_is_refused():
    with pytest.raises(TypeError, match=r"takes 2 arguments \(a, out\), got 1"):
        tuned_accumulate()(cuda.to_device(np.ones(4, np.float32)))


def test_a_key_function_that_raises_is_reported_as_such():
    tuned = tuned_accumulate(key=lambda a, out: a.no_such_attribute)
    with pytest.raises(nt.TuningKeyError, match="key function raised AttributeError"):
        tuned(*arrays())


def test_an_unhashable_key_is_reported_as_such():
    tuned = tuned_accumulate(key=lambda a, out: [a.shape[0]])
    with pytest.raises(nt.TuningKeyError, match="not hashable"):
        tuned(*arrays())


def test_a_malformed_launch_config_for_the_only_variant_is_reported():
    tuned = nt.autotune(variants=[{"BLOCK": 2}], launch=lambda a, out, BLOCK: (1,))(
        kernels.accumulate
    )
    with pytest.raises(ValueError, match=r"expected \(grid, block\)"):
        tuned(*arrays())


@cuda.jit
def iota(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = i


def test_concurrent_calls_of_other_sizes_each_launch_their_own_grid():
    import threading

    tuned = nt.autotune(
        variants=nt.product(BLOCK=[4, 8]),
        launch=lambda out, *, BLOCK: (nt.cdiv(out.shape[0], BLOCK), BLOCK),
        key=lambda out: "one key for every size",
    )(iota)
    sizes = [4 + (i % 12) * 4 for i in range(120)]
    outputs = [cuda.to_device(np.full(n, -1, np.int64)) for n in sizes]
    tuned(outputs[0])
    threads = [threading.Thread(target=tuned, args=(out,)) for out in outputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wrong = [
        n
        for n, out in zip(sizes, outputs, strict=True)
        if (out.copy_to_host() != np.arange(n)).any()
    ]
    assert wrong == []


@pytest.mark.parametrize("first", [0, 1])
def test_an_empty_grid_launches_nothing_whether_its_key_is_new_or_tuned(first):
    """With the documented cdiv launch, n = 0 gives a grid of 0 blocks: the call returns,
    tuning nothing, whether the key is new or was tuned with n = 1 (the same anchored key)."""
    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    if first:
        tuned(*arrays(first))
    empty = (cuda.to_device(np.zeros(0, np.float32)), cuda.to_device(np.zeros(0, np.float32)))
    tuned(*empty)
    tuned(*empty)
    assert tuned.stats["benchmarks"] == first
    assert tuned.tune(*arrays(1)).source == ("memory" if first else "benchmark")


def test_a_variant_whose_grid_is_empty_cannot_win_while_others_run():
    def launch(a, out, *, BLOCK):
        return a.shape[0] // BLOCK, BLOCK  # 0 blocks for fewer than BLOCK elements

    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 8]), launch=launch)(kernels.accumulate)
    report = tuned.tune(*arrays(4))
    assert report.best == {"BLOCK": 2}
    empty = next(r for r in report.results if r.params == {"BLOCK": 8})
    assert "empty grid" in empty.error


def test_a_nan_in_a_key_finds_its_result_again():
    @cuda.jit
    def shift(a, out, offset):
        i = cuda.grid(1)
        if i < a.shape[0]:
            out[i] = a[i] + offset

    tuned = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda a, out, offset, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
        key=["offset"],
    )(shift)
    a, out = arrays(4)
    for _ in range(3):
        tuned(a, out, float("nan"))
    assert tuned.stats["benchmarks"] == 1


@pytest.mark.parametrize("stream", ["0", 1.5, object()], ids=["text", "a float", "an object"])
def test_a_stream_that_is_not_a_stream_is_refused_naming_the_argument(stream):
    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    for call in (tuned, tuned.tune, tuned):  # tuning, and a known key's launch
        with pytest.raises(TypeError, match="stream must be a numba, torch or CuPy stream"):
            call(*arrays(4), stream=stream)
        tuned(*arrays(4))


@pytest.mark.parametrize(
    ("config", "beyond"),
    [(((1,), (2048,)), "a block of 2048 threads; the device allows 1024"),
     (((1,), (1, 1, 65)), "65 threads in z; the device allows 64"),
     (((2**31,), (1,)), "2147483648 blocks in x; the device allows 2147483647"),
     (((1, 65536), (1,)), "65536 blocks in y; the device allows 65535"),
     (((1,), (1,), 64 * 1024), "65536 bytes of dynamic shared memory; the device allows 49152")],
    ids=["threads per block", "threads in z", "blocks in x", "blocks in y", "shared memory"],
)  # fmt: skip
def test_a_launch_beyond_the_devices_limits_is_refused_before_it_runs(config, beyond):
    tuned = nt.autotune(variants=[{"BLOCK": 1}], launch=lambda a, out, *, BLOCK: config)(
        kernels.accumulate
    )
    a, out = arrays(4)
    with pytest.raises(ValueError, match=f"beyond the device's limits: {re.escape(beyond)}"):
        tuned(a, out)
    assert out.copy_to_host().tolist() == [0.0] * 4  # nothing ran


def test_a_variant_beyond_the_devices_limits_fails_while_tuning_and_the_others_are_tuned():
    tuned = nt.autotune(variants=nt.product(BLOCK=[4, 2048]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    report = tuned.tune(*arrays(8))
    assert report.best == {"BLOCK": 4}
    (failed,) = [r for r in report.results if r.status == "failed"]
    assert failed.params == {"BLOCK": 2048} and "the device allows 1024" in failed.error


def test_a_first_call_tunes_when_the_kernel_as_written_is_beyond_the_devices_limits():
    """The kernel as written (BLOCK=4) asks for 2**31 blocks: the first call tunes as tune()
    does, that variant fails, and the other wins and runs."""

    def launch(a, out, *, BLOCK):
        return (2**31 if BLOCK == 4 else nt.cdiv(a.shape[0], BLOCK)), BLOCK

    tuned = nt.autotune(variants=nt.product(BLOCK=[4, 8]), launch=launch)(kernels.accumulate)
    a, out = arrays(8)
    tuned(a, out)
    assert out.copy_to_host().tolist() == list(range(8))
    report = tuned.tune(a, out)
    assert report.best == {"BLOCK": 8} and "the device allows" in report.results[0].error
