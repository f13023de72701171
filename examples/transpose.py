"""Transpose of a float32 matrix through shared-memory tiles, tuned over the tile's width and
height, the tile's row stride in shared memory (padded against bank conflicts or not), rows
per thread and the order in which blocks take their tiles.

A block reads a HEIGHT x TILE tile of a, row by row (runs of TILE adjacent elements), and
writes it as a TILE x HEIGHT tile of out (runs of HEIGHT): the longer the runs, the fewer
places of memory a block's reads and writes touch. Each thread issues all of its loads before
it stores any of them (into the shared tile, then into out). Run it: python examples/transpose.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import itertools

import numpy as np
from numba import cuda, float32

TILE = 32  # a block moves a HEIGHT x TILE tile of a: TILE columns wide
HEIGHT = 32  # the tile's rows
ROWS = 8  # a block has TILE x ROWS threads: each reads HEIGHT / ROWS elements of the tile
OUT_ROWS = 8  # rows of out's tile the block's threads write at once: TILE * ROWS / HEIGHT
STRIDE = 33  # the tile's row stride in shared memory: TILE, or TILE + 1 against bank conflicts
DIAGONAL = False  # blocks of a row of the grid take tiles along a diagonal (spreads the writes)
SHARED_BYTES = 48 * 1024  # the most shared memory a block can declare statically


def variants():
    """Square tiles of 16 to 64, padded or not; tiles of 128 x 32, 128 x 64 and 64 x 128,
    padded; each with 2 to 16 rows of threads and both orders of tiles."""
    shapes = [(t, t, pad) for t in (16, 32, 64) for pad in (0, 1)]
    shapes += [(128, 32, 1), (128, 64, 1), (64, 128, 1)]
    for (tile, height, pad), rows, diagonal in itertools.product(
        shapes, [2, 4, 8, 16], [False, True]
    ):
        threads = tile * rows
        if rows > height or not 64 <= threads <= 1024 or threads % height:
            continue
        if height * (tile + pad) * 4 > SHARED_BYTES:
            continue
        yield {
            "TILE": tile,
            "HEIGHT": height,
            "ROWS": rows,
            "OUT_ROWS": threads // height,
            "STRIDE": tile + pad,
            "DIAGONAL": diagonal,
        }


@nt.autotune(
    variants=list(variants()),
    launch=lambda a, out, *, TILE, HEIGHT, ROWS: (
        (max(1, nt.cdiv(a.shape[1], TILE)), max(1, nt.cdiv(a.shape[0], HEIGHT))),
        (TILE, ROWS),
    ),
)
@cuda.jit
def transpose(a, out):
    """out = a.T"""
    tile = cuda.shared.array((HEIGHT, STRIDE), float32)
    tx, ty = nt.nonnegative(cuda.threadIdx.x), nt.nonnegative(cuda.threadIdx.y)
    x, y = nt.nonnegative(cuda.blockIdx.x), nt.nonnegative(cuda.blockIdx.y)
    if DIAGONAL:  # each row of the grid still takes each of its tiles once
        x = (x + y) % nt.nonnegative(cuda.gridDim.x)
    first_row, first_col = y * HEIGHT, x * TILE
    read = cuda.local.array(HEIGHT, float32)  # registers: a thread's elements of a's tile
    for k in nt.static_range(0, HEIGHT, ROWS):  # rows of a's tile, every load issued first
        row, col = first_row + ty + k, first_col + tx
        read[k] = a[row, col] if row < a.shape[0] and col < a.shape[1] else float32(0)
    for k in nt.static_range(0, HEIGHT, ROWS):
        tile[ty + k, tx] = read[k]
    cuda.syncthreads()
    t = ty * TILE + tx  # the threads again, HEIGHT wide: consecutive ones write adjacent columns
    wx, wy = t % HEIGHT, t // HEIGHT
    written = cuda.local.array(TILE, float32)  # a thread's elements of out's tile
    for k in nt.static_range(0, TILE, OUT_ROWS):  # rows of out's tile: the columns of a's
        written[k] = tile[wx, wy + k]
    for k in nt.static_range(0, TILE, OUT_ROWS):
        row, col = first_col + wy + k, first_row + wx
        if row < out.shape[0] and col < out.shape[1]:
            out[row, col] = written[k]


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
