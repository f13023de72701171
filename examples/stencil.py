"""The 5-point Laplacian of a 2D grid, tuned over the block's tile shape and whether a block
first stages its tile and a one-point halo in shared memory or reads neighbours directly.

Run it: python examples/stencil.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda, float32

BX, BY = 32, 8  # a block's tile: BX columns by BY rows, one thread per point
HALO_X, HALO_Y = BX + 2, BY + 2  # the tile with its halo (constants of each variant)
SHARED = False  # stage the tile and its halo in shared memory (else read neighbours directly)


@nt.autotune(
    variants=[
        {"BX": bx, "BY": by, "HALO_X": bx + 2, "HALO_Y": by + 2, "SHARED": shared}
        for bx in (32, 64, 128, 256)
        for by in (1, 2, 4, 8, 16)
        for shared in (False, True)
        if 64 <= bx * by <= 1024
    ],
    launch=lambda a, out, *, BX, BY: (
        (max(1, nt.cdiv(a.shape[1], BX)), max(1, nt.cdiv(a.shape[0], BY))),
        (BX, BY),
    ),
)
@cuda.jit
def laplace(a, out):
    """out = the 5-point Laplacian of a at its interior points (the border is left as it is)."""
    tile = cuda.shared.array((HALO_Y, HALO_X), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.grid(2)
    rows, cols = a.shape
    inside = row < rows and col < cols
    if SHARED:
        if inside:
            tile[ty + 1, tx + 1] = a[row, col]
            if tx == 0 and col > 0:
                tile[ty + 1, 0] = a[row, col - 1]
            if tx == BX - 1 and col + 1 < cols:
                tile[ty + 1, BX + 1] = a[row, col + 1]
            if ty == 0 and row > 0:
                tile[0, tx + 1] = a[row - 1, col]
            if ty == BY - 1 and row + 1 < rows:
                tile[BY + 1, tx + 1] = a[row + 1, col]
        cuda.syncthreads()
    if 0 < row < rows - 1 and 0 < col < cols - 1:
        if SHARED:
            up, down = tile[ty, tx + 1], tile[ty + 2, tx + 1]
            left, here, right = tile[ty + 1, tx], tile[ty + 1, tx + 1], tile[ty + 1, tx + 2]
        else:
            up, down = a[row - 1, col], a[row + 1, col]
            left, here, right = a[row, col - 1], a[row, col], a[row, col + 1]
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
