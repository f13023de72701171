"""Transpose of a float32 matrix through shared-memory tiles, tuned over the tile size, the
tile's row stride in shared memory (padded against bank conflicts or not), rows per thread and
the order in which blocks take their tiles.

Run it: python examples/transpose.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda, float32

TILE = 32  # a block moves a TILE x TILE tile
ROWS = 8  # a block has TILE x ROWS threads: each moves TILE / ROWS elements of the tile
STRIDE = 33  # the tile's row stride in shared memory: TILE, or TILE + 1 against bank conflicts
DIAGONAL = False  # blocks of a row of the grid take tiles along a diagonal (spreads the writes)


@nt.autotune(
    variants=[
        {"TILE": tile, "ROWS": rows, "STRIDE": tile + pad, "DIAGONAL": diagonal}
        for tile in (16, 32, 64)
        for rows in (2, 4, 8, 16)
        for pad in (0, 1)
        for diagonal in (False, True)
        if rows <= tile and 64 <= tile * rows <= 1024
    ],
    launch=lambda a, out, *, TILE, ROWS: (
        (max(1, nt.cdiv(a.shape[1], TILE)), max(1, nt.cdiv(a.shape[0], TILE))),
        (TILE, ROWS),
    ),
)
@cuda.jit
def transpose(a, out):
    """out = a.T"""
    tile = cuda.shared.array((TILE, STRIDE), float32)
    tx, ty = nt.nonnegative(cuda.threadIdx.x), nt.nonnegative(cuda.threadIdx.y)
    x, y = nt.nonnegative(cuda.blockIdx.x), nt.nonnegative(cuda.blockIdx.y)
    if DIAGONAL:  # each row of the grid still takes each of its tiles once
        x = (x + y) % nt.nonnegative(cuda.gridDim.x)
    first_row, first_col = y * TILE, x * TILE
    for k in range(0, TILE, ROWS):  # read rows of a's tile: consecutive threads, adjacent columns
        row, col = first_row + ty + k, first_col + tx
        if row < a.shape[0] and col < a.shape[1]:
            tile[ty + k, tx] = a[row, col]
    cuda.syncthreads()
    for k in range(0, TILE, ROWS):  # write rows of out's tile: the columns of a's
        row, col = first_col + ty + k, first_row + tx
        if row < out.shape[0] and col < out.shape[1]:
            out[row, col] = tile[tx, ty + k]


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    rows, cols = (37, 70) if small else (1 << 14, 1 << 14)
    a = cuda.to_device(np.random.default_rng(0).random((rows, cols), dtype=np.float32))
    return transpose, (a, cuda.device_array((cols, rows), np.float32))


def reference(a, out):
    """What transpose computes, on the host."""
    return a.copy_to_host().T


def work(a, out):
    """Bytes moved: a read, out written, each once."""
    return {"bytes": a.nbytes + out.nbytes}


def baseline(a, out):
    """torch's transposing copy of the same matrix, for comparison (bench/ceilings.py)."""
    import torch

    source, destination = torch.as_tensor(a, device="cuda"), torch.as_tensor(out, device="cuda")
    return "torch copy_(a.T)", lambda: destination.copy_(source.T)


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
