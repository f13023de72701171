"""Transpose of a float32 matrix through shared-memory tiles, tuned over the tile's width and
height, rows per thread and how many tiles a block moves, one after the other.

A block reads a HEIGHT x TILE tile of a, row by row (runs of TILE adjacent elements), and
writes it as a TILE x HEIGHT tile of out (runs of HEIGHT): the longer the runs, the fewer
places of memory a block's reads and writes touch. The tile's rows are padded by one element
in shared memory, so that a warp reading one of its columns touches 32 banks (on the H200,
unpadded 32- and 64-wide tiles, tried before, ran half as fast, 16 x 16 tiles 19% slower, and
taking the tiles in diagonal order instead of row order gained nothing). Each thread issues
all of its loads before it stores any of them (into the shared tile, then into out): out may
alias a, so the compiler keeps a load after a store behind it. A block that moves TILES tiles
along a row of a issues the next tile's loads before it stores the last one's, so its loads
stay in flight while it writes: the bytes in flight are set by the tiles and by the threads a
multiprocessor holds, not by the size of the matrix or of the device. TILES = 1 is one tile a
block, the fewest registers. Run it: python examples/transpose.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import itertools

import numpy as np
from numba import cuda, float32

TILE = 64  # a block moves HEIGHT x TILE tiles of a: TILE columns wide
HEIGHT = 64  # the tile's rows
ROWS = 8  # a block has TILE x ROWS threads: each reads HEIGHT / ROWS elements of a tile
OUT_ROWS = 8  # rows of out's tile the block's threads write at once: TILE * ROWS / HEIGHT
STRIDE = 65  # the tile's row stride in shared memory: TILE + 1 against bank conflicts
TILES = 1  # tiles a block moves, adjacent along a row of a
SHARED_BYTES = 48 * 1024  # the most shared memory a block can declare statically


def variants():
    """Tiles of 32 x 32, 64 x 64, 128 x 64 and 64 x 128, 4 to 16 rows of threads, a block moving
    1, 2 or 4 tiles; at most 16 elements a thread over all its tiles (HEIGHT / ROWS * TILES):
    for sm_90 a thread of 8 took 32 registers at most, of 16 up to 48, of 32 some 70 (a
    multiprocessor then holds under 1024 threads, and fewer loads in flight)."""
    for (tile, height), rows, tiles in itertools.product(
        [(32, 32), (64, 64), (128, 64), (64, 128)], [4, 8, 16], [1, 2, 4]
    ):
        threads = tile * rows
        if rows > height or not 64 <= threads <= 1024 or threads % height:
            continue
        if height * (tile + 1) * 4 > SHARED_BYTES or height // rows * tiles > 16:
            continue
        yield {
            "TILE": tile,
            "HEIGHT": height,
            "ROWS": rows,
            "OUT_ROWS": threads // height,
            "STRIDE": tile + 1,
            "TILES": tiles,
        }


@nt.autotune(
    variants=list(variants()),
    launch=lambda a, out, *, TILE, HEIGHT, ROWS, TILES: (
        (max(1, nt.cdiv(a.shape[1], TILE * TILES)), max(1, nt.cdiv(a.shape[0], HEIGHT))),
        (TILE, ROWS),
    ),
)
@cuda.jit
def transpose(a, out):
    """out = a.T"""
    tile = cuda.shared.array((HEIGHT, STRIDE), float32)
    tx, ty = nt.nonnegative(cuda.threadIdx.x), nt.nonnegative(cuda.threadIdx.y)
    first_row = nt.nonnegative(cuda.blockIdx.y) * HEIGHT
    first_col = nt.nonnegative(cuda.blockIdx.x) * TILE * TILES  # of the block's first tile
    t = ty * TILE + tx  # the threads again, HEIGHT wide: consecutive ones write adjacent columns
    wx, wy = t % HEIGHT, t // HEIGHT
    read = cuda.local.array(HEIGHT, float32)  # registers: a thread's elements of a's tile
    written = cuda.local.array(TILE, float32)  # a thread's elements of out's tile
    for k in nt.static_range(0, HEIGHT, ROWS):  # rows of a's first tile
        row, col = first_row + ty + k, first_col + tx
        read[k] = a[row, col] if row < a.shape[0] and col < a.shape[1] else float32(0)
    for j in nt.static_range(TILES):
        for k in nt.static_range(0, HEIGHT, ROWS):
            tile[ty + k, tx] = read[k]
        cuda.syncthreads()
        if j + 1 < TILES:  # the next tile's loads, issued before this tile's stores
            for k in nt.static_range(0, HEIGHT, ROWS):
                row, col = first_row + ty + k, first_col + (j + 1) * TILE + tx
                read[k] = a[row, col] if row < a.shape[0] and col < a.shape[1] else float32(0)
        for k in nt.static_range(0, TILE, OUT_ROWS):  # rows of out's tile: the columns of a's
            written[k] = tile[wx, wy + k]
        if j + 1 < TILES:  # every thread has read the tile before the next overwrites it
            cuda.syncthreads()
        for k in nt.static_range(0, TILE, OUT_ROWS):
            row, col = first_col + j * TILE + wy + k, first_row + wx
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
