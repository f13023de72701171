"""Warm start: a second process finds every key in the disk cache.

A first process (cold) calls each kernel of the suite at two sizes with an empty disk cache, so it
tunes every key and stores the results; a second process (warm) makes the same calls with that
cache. Each reports its kernels' counters (``tuned.stats``: variants compiled, keys benchmarked)
and the time from the first call to its result. Both processes first create the CUDA context and
compile one unrelated kernel, so that the times are numbatune's work, not numba's start-up.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from typing import Any

#: Indices into each kernel's sizes used as keys.
SIZE_INDICES = (1, 2)
SMOKE_KERNELS = ("scale_add",)


def _keys(smoke: bool) -> list[tuple[str, int]]:
    from bench import kernels

    if smoke:
        return [(name, size) for name in SMOKE_KERNELS for size in kernels.case(name).smoke_sizes]
    return [(case.name, case.sizes[i]) for case in kernels.CASES for i in SIZE_INDICES]


def _warm_up_numba() -> None:
    from numba import cuda

    @cuda.jit
    def touch(out):
        out[0] = 1

    touch[1, 1](cuda.device_array(1))
    cuda.synchronize()


def _child(smoke: bool) -> None:
    import numbatune  # noqa: F401  (first: it chooses the simulator when there is no GPU)
    from bench import kernels, measuring

    _warm_up_numba()
    keys = _keys(smoke)
    calls = [(kernels.case(name), kernels.case(name).arguments(size)) for name, size in keys]
    tuned = {case.name: case.tuned(smoke) for case, _ in calls}
    measuring.synchronize()
    times = []
    for case, args in calls:
        started = time.perf_counter()
        tuned[case.name](*args)
        measuring.synchronize()
        times.append(time.perf_counter() - started)
    stats = {name: dict(kernel.stats) for name, kernel in tuned.items()}
    print(
        json.dumps(
            {
                "keys": len(keys),
                "first_result_s": times[0],
                "all_results_s": sum(times),
                "compiles": sum(s["compiles"] for s in stats.values()),
                "benchmarks": sum(s["benchmarks"] for s in stats.values()),
                "stats": stats,
            }
        )
    )


def run(smoke: bool) -> dict[str, Any]:
    """Run the cold process, then the warm one, on one fresh disk cache."""
    from bench import measuring

    arguments = ["--smoke"] if smoke else []
    with tempfile.TemporaryDirectory(prefix="numbatune-bench-") as cache_dir:
        environment = {"NUMBATUNE_CACHE_DIR": cache_dir}
        cold = measuring.run_module(__name__, arguments, environment)
        warm = measuring.run_module(__name__, arguments, environment)
    return {
        "keys": [f"{name}:{size}" for name, size in _keys(smoke)],
        "cold": cold,
        "warm": warm,
        "targets": {"warm_benchmarks": 0, "warm_compiles_at_most": cold["keys"]},
    }


def table(result: dict[str, Any]) -> str:
    """The cold and the warm process side by side."""
    from numbatune.demo import format_table

    rows = [
        [
            phase,
            *map(str, (r["keys"], r["benchmarks"], r["compiles"])),
            f"{r['first_result_s']:.3f}",
        ]
        for phase, r in (("cold", result["cold"]), ("warm", result["warm"]))
    ]
    return format_table(["process", "keys", "benchmarks", "compiles", "first result (s)"], rows)


if __name__ == "__main__":
    _child(smoke="--smoke" in sys.argv)
