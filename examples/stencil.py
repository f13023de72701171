"""The 5-point Laplacian of a 2D grid, tuned over the block's width, how many columns and rows
of points each thread computes, and where a thread gets its left and right neighbours: from
the adjacent lanes of its warp by shuffles, or read directly.

A block is one row of BX threads. A thread computes COLS columns a warp apart (a warp covers
32 * COLS adjacent columns, each of its loads a whole run of 128 bytes) by ROWS rows, and keeps
the ROWS + 2 values of each of its columns in registers: it loads each value of its columns
once however many rows it computes, and it issues all of its loads before it stores any point
(out may alias a, so the compiler keeps a load after a store behind it). All of a thread's loads
and stores are a few addresses plus constant offsets, which the compiler folds into the
instructions, and blocks wholly inside the grid (all but the border's) take a copy of the code
with no bounds checks (``points`` is compiled once with ``checked`` false, once true): 17 to 20
instructions an output point (4 x 4 points a thread, sm_90), against 45 for a thread of one
column with its bounds checked at every load. With shuffles, a lane takes its neighbours from
the lanes beside it, the warp's edge lanes passing on the values of the next column of the
thread (or, at the warp's ends, the two values beyond its columns, which they load): each value
is loaded once, against three times when read directly (the second and third from the L1 cache:
2.5 times the L1's traffic, the same from the L2, by ncu). numba's simulator has no warp
shuffles: those variants run on a GPU only.

On the H200 (bench/limits.py, bench/results/limits-h200-2026-12-04-b.json, all in one
process) the earlier space, a column a thread with its neighbours read, reached 593.7 us, 85.8%
of the copy bandwidth, at best; this one 526.3 us, 96.8% (4 columns by 4 rows a thread, 128
threads a block, neighbours from shuffles; read, they took 587.9 us at best), and a numba copy
laid out as it, four bytes a load, 100.7%. Its columns times rows set a thread's loads in flight
(8 to 32 values of a) and its registers, whose balance differs with a device's bandwidth and
size: the tuner picks them on each device.
Run it: python examples/stencil.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import config, cuda, float32

BX = 128  # threads of a block, one row of them
COLS = 4  # columns of points a thread computes, a warp (32 columns) apart
ROWS = 4  # rows of points a thread computes
SHUFFLE = False  # take the neighbours from the adjacent lanes (else: read them)
FULL_MASK = 0xFFFFFFFF
#: Where the neighbours come from. numba's simulator has no warp shuffles: those variants run on
#: a GPU only.
NEIGHBOURS = [False] + ([] if config.ENABLE_CUDASIM else [True])
#: (COLS, ROWS): a thread's points.
POINTS = [(2, 2), (2, 4), (2, 8), (4, 2), (4, 4), (8, 2)]


@cuda.jit(device=True)
def points(a, out, top, base, lane, checked):
    """A thread's points: rows top + 1 to top + ROWS, columns base + 32 j (j < COLS); bounds
    checked where ``checked`` is true (a constant where it is called: the compiler keeps one
    copy of this code for each value)."""
    rows, cols = a.shape
    column = cuda.local.array((ROWS + 2) * COLS, float32)  # a[top + k, base + 32 j]: k COLS + j
    left = cuda.local.array(ROWS * COLS, float32)  # a[top + 1 + k, base + 32 j - 1]
    right = cuda.local.array(ROWS * COLS, float32)  # a[top + 1 + k, base + 32 j + 1]
    for k in nt.static_range(ROWS + 2):  # registers: the arrays are indexed by constants only
        for j in nt.static_range(COLS):
            row, col = top + k, base + 32 * j
            inside = not checked or (row < rows and col < cols)
            column[k * COLS + j] = a[row, col] if inside else float32(0)
    if SHUFFLE:
        first = base - lane  # the warp's first column
        for k in nt.static_range(ROWS):  # the edge lanes' loads, issued with the others
            row = top + 1 + k
            inside = not checked or row < rows
            edge = lane == 31 and inside and (not checked or first > 0)
            before = a[row, nt.nonnegative(first - 1)] if edge else float32(0)
            edge = lane == 0 and inside and (not checked or first + 32 * COLS < cols)
            after = a[row, first + 32 * COLS] if edge else float32(0)
            for j in nt.static_range(COLS):  # every lane takes part (none has returned)
                here = column[(k + 1) * COLS + j]
                # lane 31 passes lane 0 the value left of its column, lane 0 passes lane 31
                # the value right of its column: the thread's next column, or the edge's
                passed = column[(k + 1) * COLS + j - 1] if j > 0 else before
                passed = passed if lane == 31 else here
                left[k * COLS + j] = cuda.shfl_sync(FULL_MASK, passed, (lane + 31) % 32)
                passed = column[(k + 1) * COLS + j + 1] if j < COLS - 1 else after
                passed = passed if lane == 0 else here
                right[k * COLS + j] = cuda.shfl_sync(FULL_MASK, passed, (lane + 1) % 32)
    else:
        for k in nt.static_range(ROWS):
            for j in nt.static_range(COLS):
                row, col = top + 1 + k, base + 32 * j
                inside = not checked or (row < rows and 0 < col < cols - 1)
                left[k * COLS + j] = a[row, nt.nonnegative(col - 1)] if inside else float32(0)
                right[k * COLS + j] = a[row, col + 1] if inside else float32(0)
    for k in nt.static_range(ROWS):
        for j in nt.static_range(COLS):
            row, col = top + 1 + k, base + 32 * j
            if not checked or (row < rows - 1 and 0 < col < cols - 1):
                up, here = column[k * COLS + j], column[(k + 1) * COLS + j]
                down, i = column[(k + 2) * COLS + j], k * COLS + j
                out[row, col] = up + down + left[i] + right[i] - float32(4) * here


@nt.autotune(
    variants=[
        {"BX": bx, "COLS": cols, "ROWS": rows, "SHUFFLE": shuffle}
        for bx in (64, 128, 256)
        for cols, rows in POINTS
        for shuffle in NEIGHBOURS
    ],
    launch=lambda a, out, *, BX, COLS, ROWS: (
        (max(1, nt.cdiv(a.shape[1], BX * COLS)), max(1, nt.cdiv(a.shape[0] - 2, ROWS))),
        BX,
    ),
)
@cuda.jit
def laplace(a, out):
    """out = the 5-point Laplacian of a at its interior points (the border is left as it is)."""
    tx = nt.nonnegative(cuda.threadIdx.x)
    lane = tx % 32
    top = nt.nonnegative(cuda.blockIdx.y) * ROWS  # the row above the block's points
    first = nt.nonnegative(cuda.blockIdx.x) * (BX * COLS)  # the block's first column
    base = first + (tx // 32) * (32 * COLS) + lane  # the thread's first column
    rows, cols = a.shape
    if first > 0 and first + BX * COLS < cols and top + ROWS + 2 <= rows:
        points(a, out, top, base, lane, False)  # the block's points and neighbours lie inside
    else:
        points(a, out, top, base, lane, True)


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    shape = (11, 260) if small else (1 << 14, 1 << 14)  # small: some blocks lie inside
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
