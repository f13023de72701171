"""The 5-point Laplacian of a 2D grid, tuned over the block's width, the rows a block walks down
(its strip), the rows a thread loads and computes a step, and where a thread gets its left and
right neighbours: read directly, or from the adjacent lanes of its warp by shuffles (the warp's
two edge lanes read theirs).

A block covers BX columns of a strip of STRIP rows, a thread a column. The thread walks down
its column ROWS rows a step, keeping the ROWS + 2 values of the column that the step's points
need in registers as a rolling window, so it loads each value of its column once for the whole
strip: only the strip's two halo rows are read twice, 2 / STRIP of the grid (through the L2
cache, where the blocks of the strips above and below ran close in time). Before it stores a
step's points it issues the loads of the next: out may alias a, so the compiler keeps a load
after a store behind it, and a thread that loaded each step only after storing the last would
wait a round trip to memory every step; loaded ahead, a step's ROWS loads of its column (and
of its neighbours) stay in flight while it computes and stores the step before. STRIP = ROWS is
one step a block, every load issued at once, and no window to keep (fewer registers, so more
threads a multiprocessor): the tuner weighs the registers a long strip's window costs against
the halo rows and the short blocks it saves. None of it depends on the grid's size or the
device's: many strips fill a device of any size, and what a faster one needs, more loads in
flight a multiprocessor, is the rows a step and the threads the registers allow, which the
tuner picks on each device. Read directly, each neighbour is a second and third read of the
same lines (from the L1 or the L2 cache, not from memory); shuffles take them from registers.
A shared-memory tile of a block's rows with a one-column halo, tried before, ran slower on the
H200 than either. Run it: python examples/stencil.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import config, cuda, float32

BX = 128  # threads of a block, one a column
ROWS = 4  # rows of its column a thread loads a step, and computes
STRIP = 128  # rows a block walks down: a multiple of ROWS
SHUFFLE = False  # take the neighbours from the adjacent lanes (else read them)
FULL_MASK = 0xFFFFFFFF
#: numba's simulator has no warp shuffles: those variants run on a GPU only.
NEIGHBOURS = [False] if config.ENABLE_CUDASIM else [False, True]


@nt.autotune(
    variants=[
        {"BX": bx, "ROWS": rows, "STRIP": strip, "SHUFFLE": shuffle}
        for bx in (64, 128, 256)
        for rows in (4, 8)
        for strip in (rows, 32, 128, 512)
        for shuffle in NEIGHBOURS
    ],
    launch=lambda a, out, *, BX, STRIP: (
        (max(1, nt.cdiv(a.shape[1], BX)), max(1, nt.cdiv(a.shape[0], STRIP))),
        BX,
    ),
)
@cuda.jit
def laplace(a, out):
    """out = the 5-point Laplacian of a at its interior points (the border is left as it is)."""
    # Registers: the arrays are indexed by constants only. The step's points are rows
    # first .. first + ROWS - 1 of column col.
    column = cuda.local.array(ROWS + 2, float32)  # a[first - 1 : first + ROWS + 1, col]
    left = cuda.local.array(ROWS, float32)  # a[first : first + ROWS, col - 1]
    right = cuda.local.array(ROWS, float32)  # a[first : first + ROWS, col + 1]
    ahead = cuda.local.array(ROWS, float32)  # the next step's new values of the column
    ahead_left = cuda.local.array(ROWS, float32)  # and its neighbours
    ahead_right = cuda.local.array(ROWS, float32)
    tx = nt.nonnegative(cuda.threadIdx.x)
    col = nt.nonnegative(cuda.blockIdx.x) * BX + tx
    # The neighbours' columns, as indices the compiler knows are not negative (col - 1 is read
    # only where col > 0): no wraparound guard.
    west, east = nt.nonnegative(col - 1), col + 1
    start = nt.nonnegative(cuda.blockIdx.y) * STRIP  # the strip's first row
    lane = tx % 32  # BX is a multiple of 32
    rows, cols = a.shape
    end = min(start + STRIP, rows)
    inside = col < cols
    # Where this thread reads its neighbours: every thread inside the grid's interior columns,
    # or under SHUFFLE only a warp's edge lanes (the others take theirs from the adjacent lanes).
    reads_left = 0 < col < cols - 1 and (not SHUFFLE or lane == 0)
    reads_right = 0 < col < cols - 1 and (not SHUFFLE or lane == 31)
    above = nt.nonnegative(start - 1)  # read only where start > 0
    column[0] = a[above, col] if start > 0 and inside else float32(0)
    for k in nt.static_range(ROWS + 1):
        row = start + k
        column[k + 1] = a[row, col] if row < rows and inside else float32(0)
    for k in nt.static_range(ROWS):
        row = start + k
        left[k] = a[row, west] if row < rows and reads_left else float32(0)
        right[k] = a[row, east] if row < rows and reads_right else float32(0)
    for step in range(start, end, ROWS):  # one step where STRIP is ROWS
        first = nt.nonnegative(step)
        if STRIP > ROWS:  # the next step's loads, issued before this step's stores
            more = first + ROWS < end  # none past the strip
            for k in nt.static_range(ROWS):
                row = first + ROWS + 1 + k
                ahead[k] = a[row, col] if more and row < rows and inside else float32(0)
                row = first + ROWS + k
                ahead_left[k] = a[row, west] if more and row < rows and reads_left else float32(0)
                ahead_right[k] = a[row, east] if more and row < rows and reads_right else float32(0)
        if SHUFFLE:
            for k in nt.static_range(ROWS):  # every lane takes part (none has returned)
                from_left = cuda.shfl_up_sync(FULL_MASK, column[k + 1], 1)
                from_right = cuda.shfl_down_sync(FULL_MASK, column[k + 1], 1)
                if lane > 0:
                    left[k] = from_left
                if lane < 31:
                    right[k] = from_right
        if 0 < col < cols - 1:
            for k in nt.static_range(ROWS):
                row = first + k
                if 0 < row < rows - 1:
                    up, here, down = column[k], column[k + 1], column[k + 2]
                    out[row, col] = up + down + left[k] + right[k] - float32(4) * here
        if STRIP > ROWS:  # the window rolls down a step
            column[0], column[1] = column[ROWS], column[ROWS + 1]
            for k in nt.static_range(ROWS):
                column[k + 2] = ahead[k]
                left[k], right[k] = ahead_left[k], ahead_right[k]


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
