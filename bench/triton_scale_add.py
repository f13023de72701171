"""The Triton side of the tuning-time comparison: out = a * x + y under ``@triton.autotune``.

Imported only on a GPU machine with Triton and torch. Its configs for K = 4, 16 and 64 are
disjoint (they differ in pipeline stages), so no config of one space is found compiled by another.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

# An empty disk cache: every config is compiled for real. Set before Triton reads it.
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="numbatune-bench-triton-")

import numpy as np
import torch
import triton
import triton.language as tl


def _scale_add(x_ptr, y_ptr, out_ptr, a, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


def configs(k: int) -> list[triton.Config]:
    """K configs of block size x warps x stages; the spaces of different K share none."""
    if k == 4:
        space = [(b, 4, 1) for b in (512, 1024, 2048, 4096)]
    elif k == 16:
        space = [(b, w, 2) for b in (512, 1024, 2048, 4096) for w in (1, 2, 4, 8)]
    elif k == 64:
        blocks = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
        space = [(b, w, s) for b in blocks for w in (1, 2, 4, 8) for s in (3, 4)]
    else:
        raise ValueError(f"bench: no Triton space of {k} configs; there are 4, 16 and 64")
    return [triton.Config({"BLOCK_SIZE": b}, num_warps=w, num_stages=s) for b, w, s in space]


def _autotuned(space: list[triton.Config]) -> Any:
    # A new JITFunction each time: an in-memory cache of its own.
    return triton.autotune(configs=space, key=["n"])(triton.jit(_scale_add))


def _arguments(size: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(size, device="cuda", generator=generator)
    y = torch.rand(size, device="cuda", generator=generator)
    return x, y, torch.empty_like(x)


def _call(kernel: Any, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, 2.0, n)


def tuning_times(ks: list[int], size: int) -> dict[str, Any]:
    """Seconds from the first call to its result, for each K; after one throwaway tuning."""
    x, y, out = _arguments(size)
    throwaway = [triton.Config({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=s) for s in (5, 6)]
    _call(_autotuned(throwaway), x, y, out)
    torch.cuda.synchronize()
    times = {}
    for k in ks:
        kernel = _autotuned(configs(k))
        torch.cuda.synchronize()
        started = time.perf_counter()
        _call(kernel, x, y, out)
        torch.cuda.synchronize()
        times[str(k)] = {"total_s": time.perf_counter() - started, "best": str(kernel.best_config)}
    return times


def first_tune(k: int, size: int) -> dict[str, Any]:
    """Seconds from the first call in this process to its result, with K configs (cold)."""
    x, y, out = _arguments(size)
    torch.cuda.synchronize()
    kernel = _autotuned(configs(k))
    started = time.perf_counter()
    _call(kernel, x, y, out)
    torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - started, "best": str(kernel.best_config)}


def result(size: int) -> np.ndarray:
    """a * x + y by the tuned Triton kernel, on the arrays ``kernels.scale_add`` gets."""
    from bench import kernels

    args = kernels.case("scale_add").arguments(size)
    x, y = (torch.as_tensor(a.copy_to_host(), device="cuda") for a in args[1:3])
    out = torch.empty_like(x)
    _call(_autotuned(configs(4)), x, y, out)
    return out.cpu().numpy()
