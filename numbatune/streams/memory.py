"""Cached device memory: how much there is, and giving it back."""

from __future__ import annotations

import sys

from numba import cuda

from numbatune.arrays import SIMULATOR
from numbatune.streams.monitor import monitor


def memory_usage() -> dict[str, int]:
    """The current device's memory, and what the array libraries' allocators cache.

    Returns
    -------
    dict[str, int]
        In bytes: the device's ``"total"`` and ``"free"`` (not under the simulator);
        ``"torch_allocated"`` and ``"torch_reserved"`` when torch's CUDA is initialised;
        ``"cupy_used"`` and ``"cupy_held"`` (CuPy's default memory pool) when CuPy is
        imported. And ``"kept_arrays"``: how many arrays numbatune keeps alive for launches
        the device may not have passed yet (a count, not bytes).
    """
    usage: dict[str, int] = {}
    if not SIMULATOR:
        free, total = cuda.current_context().get_memory_info()
        usage.update(total=int(total), free=int(free))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        usage["torch_allocated"] = int(torch.cuda.memory_allocated())
        usage["torch_reserved"] = int(torch.cuda.memory_reserved())
    cupy = sys.modules.get("cupy")
    if cupy is not None and not SIMULATOR:
        pool = cupy.get_default_memory_pool()
        usage["cupy_used"] = int(pool.used_bytes())
        usage["cupy_held"] = int(pool.total_bytes())
    usage["kept_arrays"] = monitor.kept_arrays()
    return usage


def memory_cleanup() -> None:
    """Give cached device memory back.

    Frees numba's pending deallocations, and the cached blocks of torch's and CuPy's
    allocators where those libraries are imported. Arrays still kept for launches in flight
    stay until the device passes them.
    """
    if not SIMULATOR:
        cuda.current_context().deallocations.clear()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None and not SIMULATOR:
        cupy.get_default_memory_pool().free_all_blocks()
