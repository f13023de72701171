"""Sums: of a large array, and of every row of a matrix, by one tuned kernel.

``row_sums(m, out)`` adds the sum of row r of m to out[r]; the sum of a vector x is
``row_sums(x.reshape(1, n), total)``. The grid is sized from the device: about WAVES times the
blocks its multiprocessors hold at once, spread over the rows (a row gets several blocks only
when the rows are fewer than that). Each block walks its row's columns in steps of
BLOCK * ITEMS, issuing a step's ITEMS loads a thread before adding any of them, sums in
registers, combines its threads' sums with warp shuffles or a shared-memory tree, and adds the
block's sum to out[r] atomically.
Run it: python examples/reduction.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import config, cuda, float32

BLOCK = 256  # threads per block
ITEMS = 4  # loads per thread per step, BLOCK apart so that accesses coalesce
WAVES = 1  # the grid holds about WAVES times the blocks the device runs at once
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second dimension
SHUFFLE = False  # combine a block's sums with warp shuffles (else a shared-memory tree)
FULL_MASK = 0xFFFFFFFF


def resident_blocks(threads: int) -> int:
    """How many blocks of ``threads`` threads the current device runs at once, if registers
    and shared memory do not limit them (numba's simulator: 1)."""
    device = cuda.get_current_device()
    per_multiprocessor = getattr(device, "MAX_THREADS_PER_MULTI_PROCESSOR", threads) // threads
    return getattr(device, "MULTIPROCESSOR_COUNT", 1) * max(1, per_multiprocessor)


def grid(m, *, BLOCK, ITEMS, WAVES):
    """A block per row, or more when there are fewer rows than WAVES waves of blocks hold."""
    blocks_per_row = nt.cdiv(WAVES * resident_blocks(BLOCK), max(1, m.shape[0]))
    steps = nt.cdiv(m.shape[1], BLOCK * ITEMS)  # more blocks than steps would idle
    return m.shape[0], max(1, min(MAX_GRID_Y, steps, blocks_per_row))


@cuda.jit(device=True)
def warp_sum(value):
    """The sum of ``value`` over the 32 lanes of a warp, in lane 0."""
    for offset in (16, 8, 4, 2, 1):
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)
    return value


@nt.autotune(
    variants=nt.product(
        BLOCK=[128, 256, 512, 1024],
        ITEMS=[4, 8, 16],
        WAVES=[1, 4],
        # numba's simulator has no warp shuffles: those variants run on a GPU only.
        SHUFFLE=[False] if config.ENABLE_CUDASIM else [False, True],
    ),
    launch=lambda m, out, *, BLOCK, ITEMS, WAVES: (
        grid(m, BLOCK=BLOCK, ITEMS=ITEMS, WAVES=WAVES),
        BLOCK,
    ),
)
@cuda.jit
def row_sums(m, out):
    """out[r] += m[r, :].sum() for every row r."""
    partial = cuda.shared.array(BLOCK, float32)
    kept = cuda.local.array(ITEMS, float32)  # registers: indexed by constants only
    row, t = nt.nonnegative(cuda.blockIdx.x), nt.nonnegative(cuda.threadIdx.x)
    cols = m.shape[1]
    total = float32(0)
    step = nt.nonnegative(cuda.gridDim.y) * BLOCK * ITEMS
    for start in range(nt.nonnegative(cuda.blockIdx.y) * BLOCK * ITEMS, cols, step):
        first = nt.nonnegative(start) + t
        for k in nt.static_range(ITEMS):  # the step's loads, all issued before any is added
            c = first + k * BLOCK
            kept[k] = m[row, c] if c < cols else float32(0)
        for k in nt.static_range(ITEMS):
            total += kept[k]
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


def baseline(m, out):
    """torch.sum of the same array (a vector: one row), or of its rows (torch.sum(dim=1)), for
    comparison (bench/ceilings.py)."""
    import torch

    rows = torch.as_tensor(m, device="cuda")
    if rows.shape[0] == 1:
        vector = rows.reshape(-1)
        return "torch.sum", lambda: torch.sum(vector)
    sums = torch.empty(rows.shape[0], device="cuda")
    return "torch.sum(dim=1)", lambda: torch.sum(rows, dim=1, out=sums)


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example, example_rows])
