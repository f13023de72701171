"""Variants valid only for some arguments (``valid=``), and launch functions that cost time on
every launch."""

import logging
import time

import numpy as np
import pytest
from numba import cuda, float32

import numbatune as nt

TILE = 4


@cuda.jit
def doubled_by_tiles(x, out):
    """Reads a whole tile with no bounds check: TILE must divide len(x)."""
    tile = cuda.shared.array(TILE, float32)
    i = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    tile[cuda.threadIdx.x] = x[i]
    cuda.syncthreads()
    out[i] = 2 * tile[cuda.threadIdx.x]


def _tiled(tiles):
    return nt.autotune(
        variants=nt.product(TILE=tiles),
        launch=lambda x, out, *, TILE: (x.shape[0] // TILE, TILE),
        valid=lambda x, out, *, TILE: x.shape[0] % TILE == 0,
        key=lambda x, out: "one key for every size",
    )(doubled_by_tiles)


def _arrays(n):
    x = np.random.default_rng(n).normal(size=n).astype(np.float32)
    return x, cuda.to_device(x), cuda.to_device(np.zeros(n, np.float32))


def test_tuning_tries_only_the_variants_valid_for_the_arguments():
    tuned = _tiled([3, 4, 5])
    x, dx, out = _arrays(12)
    report = tuned.tune(dx, out)
    tried = {r.params["TILE"] for r in report.results if r.tried}
    assert tried == {3, 4} and all(r.error is None for r in report.results)
    tuned(dx, out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * x)


def test_a_winner_not_valid_for_a_call_gives_way_to_the_fastest_valid_one():
    tuned = _tiled([3, 4])
    _, dx, out = _arrays(12)
    won = tuned.tune(dx, out).best["TILE"]
    n = 9 if won == 4 else 8  # the same key, where only the other variant is valid
    x, dx, out = _arrays(n)
    for _ in range(2):  # the second call is a hit (on a GPU, the fast path)
        tuned(dx, out)
        np.testing.assert_array_equal(out.copy_to_host(), 2 * x)
    assert tuned.best(dx, out) == {"TILE": 7 - won}
    assert tuned.stats["benchmarks"] == 1


def test_a_call_no_measured_variant_is_valid_for_is_refused_clearly():
    tuned = _tiled([3, 4, 5])
    tuned(*_arrays(12)[1:])
    with pytest.raises(ValueError, match="no other variant measured for that key is"):
        tuned(*_arrays(10)[1:])  # only TILE=5 divides 10, and it was never valid to measure


def test_a_call_no_variant_is_valid_for_is_refused_before_tuning():
    with pytest.raises(ValueError, match="no variant is valid for these arguments"):
        _tiled([3, 4])(*_arrays(7)[1:])


def test_valid_must_be_a_function():
    with pytest.raises(TypeError, match="valid must be a function"):
        nt.autotune(variants=nt.product(TILE=[4]), launch=lambda x, out: (1, 4), valid=True)(
            doubled_by_tiles
        )


def _scale_kernel():
    @cuda.jit
    def scale(x, out, factor):
        i = cuda.grid(1)
        if i < x.shape[0]:
            out[i] = x[i] * factor

    return scale


def test_a_slow_launch_function_is_named_in_a_warning_once(caplog):
    def slow_launch(x, out, factor, *, BLOCK):
        time.sleep(0.002)  # as a copy from the device would
        return nt.cdiv(x.shape[0], BLOCK), BLOCK

    caplog.set_level(logging.WARNING, logger="numbatune")
    tuned = nt.autotune(variants=nt.product(BLOCK=[4, 8]), launch=slow_launch)(_scale_kernel())
    _, dx, out = _arrays(8)
    tuned(dx, out, 2.0)
    tuned(*_arrays(64)[1:], 2.0)  # another key: tuned again, not warned again
    warned = [r.getMessage() for r in caplog.records if "launch function" in r.getMessage()]
    assert len(warned) == 1 and "slow_launch" in warned[0]


def test_host_side_values_as_scalar_arguments_cost_nothing_per_call(caplog):
    """The documented way for launch values only the host knows: pass them as arguments."""
    caplog.set_level(logging.WARNING, logger="numbatune")
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[4, 8]),
        launch=lambda x, out, factor, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
        key=["x", "factor"],
    )(_scale_kernel())
    x, dx, out = _arrays(8)
    for factor in (2.0, 3.0):
        tuned(dx, out, factor)
        np.testing.assert_allclose(out.copy_to_host(), factor * x, rtol=1e-6)
    assert tuned.stats["benchmarks"] == 2  # one key per factor, as key= asks
    assert "launch function" not in caplog.text
