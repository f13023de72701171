"""Tuning time: from the first call of a new key to its result, for K = 4, 16 and 64 variants.

numbatune tunes ``kernels.scale_add`` (out = a * x + y) over K variants of block size and items
per thread; Triton's ``@triton.autotune`` tunes the equivalent Triton kernel over K configs of
block size, warps and pipeline stages (``bench/triton_scale_add.py``), on arrays of the same size.
numbatune's time is split into measuring (the time inside its stopwatch) and the rest (compiling
the variants, cloning the inputs); Triton compiles inside its benchmark loop, so only its total is
given. Before timing, each tool tunes one throwaway kernel in the same process, so that one-time
start-up (CUDA context, compiler initialisation, launcher build) is not counted for either. No
variant or config appears in two spaces, so nothing is reused from an earlier tuning: every
compile is a real one (Triton's disk cache is pointed at an empty directory first).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import numbatune as nt
from bench import kernels, measuring
from numbatune.demo import format_table
from numbatune.variants import Variant

SIZE, SMOKE_SIZE = 1 << 24, 64

#: numbatune's spaces: K variants each.
SPACES: dict[int, list[Variant]] = {
    4: nt.product(BLOCK=[128, 256, 512, 1024], ITEMS=[1]),
    16: nt.product(BLOCK=[128, 256, 512, 1024], ITEMS=[1, 2, 4, 8]),
    64: nt.product(BLOCK=[32, 64, 96, 128, 192, 256, 512, 1024], ITEMS=[1, 2, 3, 4, 6, 8, 12, 16]),
}
#: Under the simulator: two variants of few threads, so that the smoke run stays quick.
SMOKE_SPACES: dict[int, list[Variant]] = {2: nt.product(BLOCK=[8, 16], ITEMS=[1])}


def _tuned(variants: list[Variant]) -> nt.TunedKernel:
    return nt.autotune(
        kernels.scale_add, variants=variants, launch=kernels.scale_add_launch, name="bench_k"
    )


def _numbatune(space: list[Variant], size: int) -> dict[str, Any]:
    tuned = _tuned(space)
    args = kernels.case("scale_add").arguments(size)
    measuring.synchronize()
    with measuring.StopwatchClock().active() as clock:
        started = time.perf_counter()
        tuned(*args)
        measuring.synchronize()
        total = time.perf_counter() - started
    return {
        "total_s": total,
        "measure_s": clock.seconds,
        "compile_and_rest_s": total - clock.seconds,
        "compiles": tuned.stats["compiles"],
    }


def run(smoke: bool) -> dict[str, Any]:
    """Time numbatune's tuning for each K, and Triton's where it can run (a GPU with Triton)."""
    spaces = SMOKE_SPACES if smoke else SPACES
    size = SMOKE_SIZE if smoke else SIZE
    results: dict[str, Any] = {"size": size, "numbatune": {}, "triton": {}}
    _numbatune(nt.product(BLOCK=[8, 16], ITEMS=[32]), size)  # throwaway: start-up costs
    for k, space in spaces.items():
        results["numbatune"][str(k)] = _numbatune(space, size)
    if smoke:
        results["triton"] = "not run: simulator"
        return results
    try:
        from bench import triton_scale_add
    except ImportError as error:
        results["triton"] = f"not run: {error}"
        return results
    results["triton"] = triton_scale_add.tuning_times(list(spaces), size)
    results["triton_version"] = triton_scale_add.triton.__version__
    results["check"] = "numbatune and Triton results compared with NumPy: " + _check(size)
    return results


def _check(size: int) -> str:
    """Both tools' tuned kernels compute a * x + y (so the comparison is between equals)."""
    from bench import triton_scale_add

    args = kernels.case("scale_add").arguments(size)
    _tuned(SPACES[4])(*args)
    expected = args[0] * args[1].copy_to_host() + args[2].copy_to_host()
    np.testing.assert_allclose(args[3].copy_to_host(), expected, rtol=1e-6)
    np.testing.assert_allclose(triton_scale_add.result(size), expected, rtol=1e-6)
    return "equal"


def table(result: dict[str, Any]) -> str:
    """K, numbatune's time split, Triton's time."""
    triton = result["triton"]
    rows = [
        [
            k,
            f"{r['total_s']:.3f}",
            f"{r['measure_s']:.3f}",
            f"{r['compile_and_rest_s']:.3f}",
            f"{triton[k]['total_s']:.3f}" if isinstance(triton, dict) and k in triton else "-",
        ]
        for k, r in result["numbatune"].items()
    ]
    header = ["K", "numbatune (s)", "measure (s)", "compile+rest (s)", "triton.autotune (s)"]
    note = "" if isinstance(triton, dict) else f"\ntriton: {triton}"
    return format_table(header, rows) + note
