"""numbatune's helpers (:mod:`numbatune.intrinsics`) as numba-cuda-mlir compiles them: the
kernels of that compiler call these instead (``NumbaCudaMlir.own_helper``). Imported only where
numba-cuda-mlir is installed."""

from numba_cuda_mlir import cuda
from numba_cuda_mlir.cuda import int64, uint32


@cuda.jit(device=True)
def nonnegative(index: int) -> int:
    """:func:`numbatune.intrinsics.nonnegative`, compiled by numba-cuda-mlir."""
    return int64(uint32(index))
