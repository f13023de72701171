"""Dispatch cost on a cache hit: a tuned call against plain numba launches and Triton's autotune.

The kernel is ``out[i] = a * x[i]`` on two 1 Ki float32 arrays and one scalar: it runs for a
few microseconds, so what is measured is the host's cost per call. Each figure is the median
over batches of the time per call, a batch being many calls followed by one synchronisation.
All methods of all array kinds take turns batch by batch (A B C A B C ...), after a warm-up of
about two seconds, so that clock changes and other load on the host hit them all alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR

SIZE = 1024
BLOCK = 256


@cuda.jit
def scale(x, out, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i]


def tuned_scale(kind: str) -> nt.TunedKernel:
    """``scale`` tuned over two block sizes; one tuned kernel per array kind, as a program
    that uses one array library has."""
    return nt.autotune(
        variants=nt.product(BLOCK=[128, 256]),
        launch=lambda x, out, a, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
        name=f"bench_dispatch_scale_{kind}",
    )(scale)


def per_call_us(
    calls: dict[Any, Callable[[], Any]], batches: int, per_batch: int, warmup_s: float
) -> dict[Any, float]:
    """For each method, the median over ``batches`` of the wall time per call of a batch of
    ``per_batch`` calls and one synchronisation; the methods take turns batch by batch."""
    started = time.perf_counter()
    while time.perf_counter() - started < warmup_s:
        for call in calls.values():
            for _ in range(per_batch):
                call()
    cuda.synchronize()
    samples: dict[Any, list[float]] = {name: [] for name in calls}
    for _ in range(batches):
        for name, call in calls.items():
            started = time.perf_counter()
            for _ in range(per_batch):
                call()
            cuda.synchronize()
            samples[name].append((time.perf_counter() - started) / per_batch * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def _array_kinds() -> dict[str, Callable[[np.ndarray], Any]]:
    kinds: dict[str, Callable[[np.ndarray], Any]] = {"numba": cuda.to_device}
    if SIMULATOR:
        return kinds
    try:
        import cupy

        kinds["cupy"] = cupy.asarray
    except ImportError:
        pass
    try:
        import torch

        kinds["torch"] = lambda host: torch.from_numpy(host).cuda()
    except ImportError:
        pass
    return kinds


def _triton_hit() -> Callable[[], Any] | str:
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as error:
        return f"not run: {error}"

    @triton.autotune(
        configs=[triton.Config({"BLOCK_SIZE": b}) for b in (128, 256, 512, 1024)], key=["n"]
    )
    @triton.jit
    def triton_scale(x_ptr, out_ptr, a, n, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n
        tl.store(out_ptr + offsets, a * tl.load(x_ptr + offsets, mask=mask), mask=mask)

    x = torch.rand(SIZE, device="cuda")
    out = torch.empty_like(x)

    def call() -> None:
        triton_scale[lambda meta: (triton.cdiv(SIZE, meta["BLOCK_SIZE"]),)](x, out, 2.0, SIZE)

    call()  # tune: what is measured are cache hits
    return call


def measure_dispatch(out_dir: Path | None = None, smoke: bool = False) -> dict[str, Any]:
    """Median microseconds per call for each way of launching, per array kind."""
    batches, per_batch, warmup_s = (2, 3, 0.0) if smoke else (30, 300, 2.0)
    host = np.random.default_rng(0).random(SIZE, dtype=np.float32)
    a = np.float32(2.0)
    grid = nt.cdiv(SIZE, BLOCK)
    configured = scale[grid, BLOCK]
    calls: dict[tuple[str, str], Callable[[], Any]] = {}
    for kind, make in _array_kinds().items():
        x, out = make(host), make(np.zeros_like(host))
        tuned = tuned_scale(kind)
        tuned(x, out, a)  # tune: what follows are cache hits
        calls[kind, "numbatune hit"] = lambda t=tuned, x=x, out=out: t(x, out, a)
        calls[kind, "numba k[grid, block](...)"] = lambda x=x, out=out: scale[grid, BLOCK](
            x, out, a
        )
        calls[kind, "numba cfg = k[grid, block]; cfg(...)"] = lambda x=x, out=out: configured(
            x, out, a
        )
    triton = "not run: simulator" if SIMULATOR else _triton_hit()
    if callable(triton):
        calls["torch", "triton autotune hit"] = triton
    medians = per_call_us(calls, batches, per_batch, warmup_s)
    results: dict[str, Any] = {"size": SIZE, "batches": batches, "calls_per_batch": per_batch}
    for (kind, method), median in medians.items():
        results.setdefault(kind, {})[method] = median
    if isinstance(triton, str) and not SIMULATOR:
        results.setdefault("torch", {})["triton autotune hit"] = triton
    return results


def table(result: dict[str, Any]) -> str:
    """One line per launch method and array kind, in microseconds per call."""
    lines = [f"{'array kind':<8} {'launch':<40} us/call"]
    for kind in ("numba", "cupy", "torch"):
        for method, value in result.get(kind, {}).items():
            figure = f"{value:8.1f}" if isinstance(value, float) else value
            lines.append(f"{kind:<8} {method:<40} {figure}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure_dispatch()))
