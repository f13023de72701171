"""Softmax over the rows of a matrix, tuned over the threads per row, rows per block, how much
of a row each thread keeps in registers, and fast or exact math.

A row is read once when ``32 * WARPS * ITEMS`` covers it (one pass over memory); the columns
past that are read again for the sum and the output (more passes). Run it:
python examples/softmax.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import math

import numpy as np
from numba import cuda, float32

WARPS = 8  # warps per row
ROWS = 1  # rows per block
ITEMS = 8  # columns each thread keeps in registers
MAX_THREADS = 1024  # a block's limit, and the size of the scratch space of its reductions
LOWEST = np.float32(-np.inf)


@cuda.jit(device=True)
def row_reduce(scratch, value, is_max):
    """The max (or the sum) of ``value`` over the threads of this block's row, to all of them."""
    t = nt.nonnegative(cuda.threadIdx.x)
    scratch[t] = value
    cuda.syncthreads()
    width = cuda.blockDim.x // 2
    while width > 0:
        if t < width:
            other = scratch[t + width]
            scratch[t] = max(scratch[t], other) if is_max else scratch[t] + other
        cuda.syncthreads()
        width //= 2
    result = scratch[0]
    cuda.syncthreads()  # every thread has read it before the scratch space is used again
    return result


@nt.autotune(
    variants=nt.product(
        WARPS=[1, 4, 8, 16, 32],
        ROWS=[1, 2, 4, 8],
        ITEMS=[1, 8, 16, 32],
        # 128 to 1024 threads a block; a block of 1024 has 64 registers a thread
        where=lambda WARPS, ROWS, ITEMS: (
            4 <= WARPS * ROWS <= MAX_THREADS // 32 and (WARPS * ROWS <= 16 or ITEMS <= 16)
        ),
        jit={"fastmath": [False, True]},  # fast exp: a few ulp less accurate
    ),
    launch=lambda x, out, *, WARPS, ROWS: (max(1, nt.cdiv(x.shape[0], ROWS)), (32 * WARPS, ROWS)),
)
@cuda.jit
def softmax(x, out):
    """out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)) for every row r."""
    width = 32 * WARPS  # threads per row: a constant of the variant, unlike cuda.blockDim.x
    t, y = nt.nonnegative(cuda.threadIdx.x), nt.nonnegative(cuda.threadIdx.y)
    scratch = cuda.shared.array(MAX_THREADS, float32)[y * width : (y + 1) * width]
    row = nt.nonnegative(cuda.blockIdx.x) * ROWS + y
    cols = x.shape[1] if row < x.shape[0] else 0  # threads past the last row join the syncs
    kept = cuda.local.array(ITEMS, float32)
    top = LOWEST
    for k in range(ITEMS):
        kept[k] = x[row, t + k * width] if t + k * width < cols else LOWEST
        top = max(top, kept[k])
    for c in range(t + ITEMS * width, cols, width):
        top = max(top, x[row, c])
    top = row_reduce(scratch, top, True)
    total = float32(0)
    for k in range(ITEMS):
        kept[k] = math.exp(kept[k] - top) if t + k * width < cols else float32(0)
        total += kept[k]
    for c in range(t + ITEMS * width, cols, width):
        total += math.exp(x[row, c] - top)
    total = row_reduce(scratch, total, False)
    scale = float32(1) / total if cols > 0 else float32(0)
    for k in range(ITEMS):
        if t + k * width < cols:
            out[row, t + k * width] = kept[k] * scale
    for c in range(t + ITEMS * width, cols, width):
        out[row, c] = math.exp(x[row, c] - top) * scale


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    shape = (3, 70) if small else (1 << 14, 1 << 14)
    x = cuda.to_device(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
    return softmax, (x, cuda.device_array(shape, np.float32))


def reference(x, out):
    """What softmax computes, on the host."""
    e = np.exp(x.copy_to_host() - x.copy_to_host().max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def work(x, out):
    """Bytes moved: x read, out written, each once."""
    return {"bytes": x.nbytes + out.nbytes}


def baseline(x, out):
    """torch.softmax over the same rows, for comparison (bench/ceilings.py)."""
    import torch

    rows = torch.as_tensor(x, device="cuda")
    return "torch.softmax", lambda: torch.softmax(rows, dim=1)


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
