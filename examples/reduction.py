"""Sums: of a large array, and of every row of a matrix, by one tuned kernel.

``row_sums(m, out)`` adds the sum of row r of m to out[r]; the sum of a vector x is
``row_sums(x.reshape(1, n), total)``. Each block sums STEPS * BLOCK * ITEMS of one row's columns
(more if the row needs over 65535 blocks) in registers, combines its threads' sums with warp
shuffles or a shared-memory tree, and adds the block's sum to out[r] atomically.
Run it: python examples/reduction.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import config, cuda, float32

BLOCK = 256  # threads per block
ITEMS = 4  # loads per thread per step, BLOCK apart so that accesses coalesce
STEPS = 4  # steps of BLOCK * ITEMS columns a block sums (the grid has a block per STEPS steps)
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second dimension: past it, blocks take more steps
SHUFFLE = False  # combine a block's sums with warp shuffles (else a shared-memory tree)
FULL_MASK = 0xFFFFFFFF


@cuda.jit(device=True)
def warp_sum(value):
    """The sum of ``value`` over the 32 lanes of a warp, in lane 0."""
    for offset in (16, 8, 4, 2, 1):
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)
    return value


@nt.autotune(
    variants=nt.product(
        BLOCK=[128, 256, 512, 1024],
        ITEMS=[1, 4, 16],
        STEPS=[1, 4, 16, 64],
        # numba's simulator has no warp shuffles: those variants run on a GPU only.
        SHUFFLE=[False] if config.ENABLE_CUDASIM else [False, True],
    ),
    launch=lambda m, out, *, BLOCK, ITEMS, STEPS: (
        (m.shape[0], max(1, min(MAX_GRID_Y, nt.cdiv(m.shape[1], BLOCK * ITEMS * STEPS)))),
        BLOCK,
    ),
)
@cuda.jit
def row_sums(m, out):
    """out[r] += m[r, :].sum() for every row r."""
    partial = cuda.shared.array(BLOCK, float32)
    row, t = cuda.blockIdx.x, cuda.threadIdx.x
    total = float32(0)
    step = cuda.gridDim.y * BLOCK * ITEMS
    for start in range(cuda.blockIdx.y * BLOCK * ITEMS + t, m.shape[1], step):
        for k in range(ITEMS):
            if start + k * BLOCK < m.shape[1]:
                total += m[row, start + k * BLOCK]
    if SHUFFLE:
        total = warp_sum(total)
        if t % 32 == 0:
            partial[t // 32] = total
        cuda.syncthreads()
        if t < 32:
            total = warp_sum(partial[t] if t < BLOCK // 32 else float32(0))
    else:
        partial[t] = total
        cuda.syncthreads()
        width = BLOCK // 2
        while width > 0:
            if t < width:
                partial[t] += partial[t + width]
            cuda.syncthreads()
            width //= 2
        total = partial[0]
    if t == 0:
        cuda.atomic.add(out, row, total)


def _arguments(shape):
    m = cuda.to_device(np.random.default_rng(0).random(shape, dtype=np.float32))
    return row_sums, (m, cuda.to_device(np.zeros(shape[0], np.float32)))


def example(small: bool = False):
    """The sum of one large array (a matrix of one row), and arguments to tune it on."""
    return _arguments((1, 1000 if small else 1 << 28))


def example_rows(small: bool = False):
    """The sums of the rows of a matrix, and arguments to tune it on."""
    return _arguments((3, 300) if small else (1 << 14, 1 << 14))


def reference(m, out):
    """What row_sums computes from a zeroed out, on the host (in float64)."""
    return m.copy_to_host().sum(axis=1, dtype=np.float64)


def work(m, out):
    """Bytes moved: m read, out written, each once."""
    return {"bytes": m.nbytes + out.nbytes}


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example, example_rows])
