"""The 5-point Laplacian of a 2D grid, tuned over the block's shape, how many rows of a column
each thread walks down, and whether a block stages its rows with a one-column halo in shared
memory or reads left and right neighbours directly.

A thread keeps the ROWS + 2 values of its column that its ROWS points need in registers, so it
loads each value of a once however many rows it computes. Run it: python examples/stencil.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda, float32

BX, BY = 32, 8  # threads of a block: BX columns by BY rows of threads
ROWS = 1  # points a thread computes, down its column
COLUMN = ROWS + 2  # values of its column a thread keeps: its points, one above and one below
HALO_X, HALO_Y = BX + 2, BY * ROWS  # the shared-memory tile: a block's rows, a column each side
SHARED_BYTES = 48 * 1024  # the most shared memory a block can declare statically
SHARED = False  # stage the rows and the halo in shared memory (else read neighbours directly)


@nt.autotune(
    variants=[
        {
            "BX": bx,
            "BY": by,
            "ROWS": rows,
            "COLUMN": rows + 2,
            "HALO_X": bx + 2,
            "HALO_Y": by * rows,
            "SHARED": shared,
        }
        for bx in (32, 64, 128)
        for by in (1, 2, 4, 8)
        for rows in (1, 4, 8, 16)
        for shared in (False, True)
        if 64 <= bx * by <= 1024 and by * rows * (bx + 2) * 4 <= SHARED_BYTES
    ],
    launch=lambda a, out, *, BX, BY, ROWS: (
        (max(1, nt.cdiv(a.shape[1], BX)), max(1, nt.cdiv(a.shape[0], BY * ROWS))),
        (BX, BY),
    ),
)
@cuda.jit
def laplace(a, out):
    """out = the 5-point Laplacian of a at its interior points (the border is left as it is)."""
    tile = cuda.shared.array((HALO_Y, HALO_X), float32)
    column = cuda.local.array(COLUMN, float32)  # a[first - 1 : first + ROWS + 1, col]
    tx, ty = nt.nonnegative(cuda.threadIdx.x), nt.nonnegative(cuda.threadIdx.y)
    col = nt.nonnegative(cuda.blockIdx.x) * BX + tx
    first = (nt.nonnegative(cuda.blockIdx.y) * BY + ty) * ROWS  # this thread's first row
    rows, cols = a.shape
    for k in range(COLUMN):  # all of a thread's loads are issued before any is used
        inside = 0 < first + k <= rows and col < cols
        column[k] = a[first + k - 1, col] if inside else float32(0)
    if SHARED:
        for k in range(ROWS):
            row, y = first + k, ty * ROWS + k
            tile[y, tx + 1] = column[k + 1]
            if tx == 0 and col > 0 and row < rows:
                tile[y, 0] = a[row, col - 1]
            if tx == BX - 1 and col + 1 < cols and row < rows:
                tile[y, BX + 1] = a[row, col + 1]
        cuda.syncthreads()
    if 0 < col < cols - 1:
        for k in range(ROWS):
            row = first + k
            if 0 < row < rows - 1:
                if SHARED:
                    left, right = tile[ty * ROWS + k, tx], tile[ty * ROWS + k, tx + 2]
                else:
                    left, right = a[row, col - 1], a[row, col + 1]
                up, here, down = column[k], column[k + 1], column[k + 2]
                out[row, col] = up + down + left + right - float32(4) * here


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    shape = (19, 70) if small else (1 << 14, 1 << 14)
    a = cuda.to_device(np.random.default_rng(0).random(shape, dtype=np.float32))
    return laplace, (a, cuda.to_device(np.zeros(shape, np.float32)))


def reference(a, out):
    """What laplace computes from a zeroed out, on the host."""
    a = a.copy_to_host()
    expected = np.zeros_like(a)
    expected[1:-1, 1:-1] = (
        a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4 * a[1:-1, 1:-1]
    )
    return expected


def work(a, out):
    """Bytes moved: a read, out written, each once."""
    return {"bytes": a.nbytes + out.nbytes}


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
