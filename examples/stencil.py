"""The 5-point Laplacian of a 2D grid, tuned over the block's shape, how many rows of a column
each thread walks down, and where a thread gets its left and right neighbours: read directly,
from a shared-memory tile of the block's rows with a one-column halo, or from the adjacent
lanes of its warp by shuffles (the warp's two edge lanes read theirs).

A thread keeps the ROWS + 2 values of its column that its ROWS points need in registers, so it
loads each value of a once however many rows it computes, and it issues all of its loads before
it stores any point: out may alias a, so the compiler keeps a load after a store behind it, and
such a load waits a round trip to memory. Read directly, each neighbour is a second and third
read of the same lines (from the L1 or the L2 cache, not from memory); shuffles take them from
registers (on the H200 the direct reads won: the L1 serves them). Run it:
python examples/stencil.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import config, cuda, float32

BX, BY = 64, 2  # threads of a block: BX columns by BY rows of threads
ROWS = 4  # points a thread computes, down its column
COLUMN = ROWS + 2  # values of its column a thread keeps: its points, one above and one below
HALO_X, HALO_Y = BX + 2, BY * ROWS  # the shared-memory tile: a block's rows, a column each side
SHARED_BYTES = 48 * 1024  # the most shared memory a block can declare statically
SHARED = False  # stage the rows and the halo in shared memory
SHUFFLE = False  # take the neighbours from the adjacent lanes (else, and not SHARED: read them)
FULL_MASK = 0xFFFFFFFF
#: Where the neighbours come from: (SHARED, SHUFFLE). numba's simulator has no warp shuffles:
#: those variants run on a GPU only.
NEIGHBOURS = [(False, False), (True, False)] + ([] if config.ENABLE_CUDASIM else [(False, True)])


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
            "SHUFFLE": shuffle,
        }
        for bx in (32, 64, 128, 256)
        for by in (1, 2, 4)
        for rows in (4, 8, 16)
        for shared, shuffle in NEIGHBOURS
        # 64 to 1024 threads (512 where a thread keeps 16 rows: some 96 registers), and the
        # shared tile within the limit
        if 64 <= bx * by <= (512 if rows == 16 else 1024)
        and by * rows * (bx + 2) * 4 <= SHARED_BYTES
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
    left = cuda.local.array(ROWS, float32)  # a[first : first + ROWS, col - 1]
    right = cuda.local.array(ROWS, float32)  # a[first : first + ROWS, col + 1]
    tx, ty = nt.nonnegative(cuda.threadIdx.x), nt.nonnegative(cuda.threadIdx.y)
    col = nt.nonnegative(cuda.blockIdx.x) * BX + tx
    first = (nt.nonnegative(cuda.blockIdx.y) * BY + ty) * ROWS  # this thread's first row
    lane = tx % 32  # BX is a multiple of 32: a warp lies in one row of threads
    rows, cols = a.shape
    for k in nt.static_range(COLUMN):  # registers: the arrays are indexed by constants only
        inside = 0 < first + k <= rows and col < cols
        column[k] = a[first + k - 1, col] if inside else float32(0)
    if SHARED:
        for k in nt.static_range(ROWS):
            row, y = first + k, ty * ROWS + k
            tile[y, tx + 1] = column[k + 1]
            if tx == 0 and col > 0 and row < rows:
                tile[y, 0] = a[row, col - 1]
            if tx == BX - 1 and col + 1 < cols and row < rows:
                tile[y, BX + 1] = a[row, col + 1]
        cuda.syncthreads()
        for k in nt.static_range(ROWS):
            left[k], right[k] = tile[ty * ROWS + k, tx], tile[ty * ROWS + k, tx + 2]
    elif SHUFFLE:
        for k in nt.static_range(ROWS):  # the edge lanes' loads, issued with the others
            inside = first + k < rows
            edge = lane == 0 and inside and 0 < col <= cols
            left[k] = a[first + k, col - 1] if edge else float32(0)
            edge = lane == 31 and inside and col + 1 < cols
            right[k] = a[first + k, col + 1] if edge else float32(0)
        for k in nt.static_range(ROWS):  # every lane takes part (none has returned)
            from_left = cuda.shfl_up_sync(FULL_MASK, column[k + 1], 1)
            from_right = cuda.shfl_down_sync(FULL_MASK, column[k + 1], 1)
            if lane > 0:
                left[k] = from_left
            if lane < 31:
                right[k] = from_right
    else:
        for k in nt.static_range(ROWS):
            inside = first + k < rows and 0 < col < cols - 1
            left[k] = a[first + k, col - 1] if inside else float32(0)
            right[k] = a[first + k, col + 1] if inside else float32(0)
    if 0 < col < cols - 1:
        for k in nt.static_range(ROWS):
            row = first + k
            if 0 < row < rows - 1:
                up, here, down = column[k], column[k + 1], column[k + 2]
                out[row, col] = up + down + left[k] + right[k] - float32(4) * here


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


def baseline(a, out):
    """The same Laplacian as a 3 x 3 convolution of the interior (torch's conv2d, cuDNN with
    TF32 off: float32 arithmetic, as the kernel's), for comparison (bench/ceilings.py)."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    grid = torch.as_tensor(a, device="cuda")[None, None]
    weights = torch.tensor([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=torch.float32)
    weights = weights.to("cuda")[None, None]
    return "torch conv2d 3x3", lambda: torch.nn.functional.conv2d(grid, weights)


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
