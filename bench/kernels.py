"""The suite's kernels: numba kernels written as users write them, with variant spaces in which
the variants really differ in speed, and the sizes each is tuned at.

Each kernel's tunable names are module globals (numbatune compiles one kernel per variant with
them as constants). Every launch function returns (grid, block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda, float32

import numbatune as nt
from numbatune.variants import Variant

BLOCK = 256  # threads per block (1-D kernels), and a block's width in x (2-D kernels)
ITEMS = 1  # elements per thread, strided by BLOCK so that accesses coalesce
TILE = 32  # square tile edge of the tiled kernels
ROWS = 8  # rows of a tile one block of the transpose handles at a time
WPT = 1  # outputs per thread of the matrix product
BLOCK_Y = 1  # a 2-D block's height

# Shared-memory tiles are allocated at the largest TILE by every variant, the transpose's padded
# by one column against bank conflicts: numba needs shapes that are constants to its typing, and
# an expression such as TILE + 1 in the kernel is not one.
MAX_TILE = 32
PADDED_TILE = MAX_TILE + 1


def scale_add(a, x, y, out):
    """out = a * x + y, ITEMS elements a thread BLOCK apart: the plain loop Triton's kernel
    (bench/triton_scale_add.py) is, kept here rather than taken from examples/saxpy.py, whose
    unrolled loads cost numba several times the compile time, so that the tuning time follows
    the engine and not the example."""
    first = cuda.blockIdx.x * BLOCK * ITEMS + cuda.threadIdx.x
    for k in range(ITEMS):
        i = first + k * BLOCK
        if i < x.shape[0]:
            out[i] = a * x[i] + y[i]


def scale_add_launch(a, x, y, out, *, BLOCK, ITEMS):
    return nt.cdiv(x.shape[0], BLOCK * ITEMS), BLOCK


@cuda.jit
def block_sum(x, out):
    """out[0] += sum(x): per-thread sums, a shared-memory tree per block, one atomic per block."""
    partial = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    first = cuda.blockIdx.x * BLOCK * ITEMS + t
    total = float32(0.0)
    for k in range(ITEMS):
        i = first + k * BLOCK
        if i < x.shape[0]:
            total += x[i]
    partial[t] = total
    cuda.syncthreads()
    width = BLOCK // 2
    while width > 0:
        if t < width:
            partial[t] += partial[t + width]
        cuda.syncthreads()
        width //= 2
    if t == 0:
        cuda.atomic.add(out, 0, partial[0])


def block_sum_launch(x, out, *, BLOCK, ITEMS):
    return nt.cdiv(x.shape[0], BLOCK * ITEMS), BLOCK


@cuda.jit
def transpose(a, out):
    """out = a.T through a shared-memory tile; a block of TILE x ROWS threads moves a tile."""
    tile = cuda.shared.array((MAX_TILE, PADDED_TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    first_row = cuda.blockIdx.y * TILE
    first_col = cuda.blockIdx.x * TILE
    col = first_col + tx
    for k in range(0, TILE, ROWS):
        row = first_row + ty + k
        if row < a.shape[0] and col < a.shape[1]:
            tile[ty + k, tx] = a[row, col]
    cuda.syncthreads()
    out_col = first_row + tx
    for k in range(0, TILE, ROWS):
        out_row = first_col + ty + k
        if out_row < out.shape[0] and out_col < out.shape[1]:
            out[out_row, out_col] = tile[tx, ty + k]


def transpose_launch(a, out, *, TILE, ROWS):
    return (nt.cdiv(a.shape[1], TILE), nt.cdiv(a.shape[0], TILE)), (TILE, ROWS)


@cuda.jit
def matmul(A, B, C):
    """C = A @ B with TILE x TILE shared-memory tiles; each thread computes WPT rows of a column."""
    sA = cuda.shared.array((MAX_TILE, MAX_TILE), float32)
    sB = cuda.shared.array((MAX_TILE, MAX_TILE), float32)
    acc = cuda.local.array(WPT, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    step = TILE // WPT
    first_row = cuda.blockIdx.y * TILE
    col = cuda.blockIdx.x * TILE + tx
    for w in range(WPT):
        acc[w] = 0
    for t in range(0, A.shape[1], TILE):
        for w in range(WPT):
            r = ty + w * step
            sA[r, tx] = 0
            sB[r, tx] = 0
            if first_row + r < A.shape[0] and t + tx < A.shape[1]:
                sA[r, tx] = A[first_row + r, t + tx]
            if t + r < B.shape[0] and col < B.shape[1]:
                sB[r, tx] = B[t + r, col]
        cuda.syncthreads()
        for k in range(TILE):
            b = sB[k, tx]
            for w in range(WPT):
                acc[w] += sA[ty + w * step, k] * b
        cuda.syncthreads()
    for w in range(WPT):
        row = first_row + ty + w * step
        if row < C.shape[0] and col < C.shape[1]:
            C[row, col] = acc[w]


def matmul_launch(A, B, C, *, TILE, WPT):
    return (nt.cdiv(C.shape[1], TILE), nt.cdiv(C.shape[0], TILE)), (TILE, TILE // WPT)


@cuda.jit
def laplace(a, out):
    """The 5-point Laplacian of a at interior points; a BLOCK x BLOCK_Y block of threads."""
    col, row = cuda.grid(2)
    if 0 < row < a.shape[0] - 1 and 0 < col < a.shape[1] - 1:
        out[row, col] = (
            a[row - 1, col] + a[row + 1, col] + a[row, col - 1] + a[row, col + 1] - 4 * a[row, col]
        )


def laplace_launch(a, out, *, BLOCK, BLOCK_Y):
    return (nt.cdiv(a.shape[1], BLOCK), nt.cdiv(a.shape[0], BLOCK_Y)), (BLOCK, BLOCK_Y)


def _random(shape: int | tuple[int, ...], seed: int) -> Any:
    return cuda.to_device(np.random.default_rng(seed).random(shape, dtype=np.float32))


def _empty(shape: int | tuple[int, ...]) -> Any:
    return cuda.device_array(shape, np.float32)


@dataclass(frozen=True)
class Case:
    """A kernel of the suite, its variant space, and how to make its arguments at a size."""

    name: str
    kernel: Any
    variants: Sequence[Variant]
    launch: Callable[..., tuple]
    arguments: Callable[[int], tuple[Any, ...]]
    #: Sizes on a GPU (four, from a fraction of the L2 to several times it), and under the
    #: simulator (as few as the smoke run needs: warm_start uses scale_add's two).
    sizes: Sequence[int]
    smoke_sizes: Sequence[int]

    def variants_for(self, smoke: bool) -> list[Variant]:
        """All variants; under the simulator (smoke) only the two with the fewest threads."""
        if not smoke:
            return list(self.variants)
        args = self.arguments(self.smoke_sizes[0])

        def threads(variant: Variant) -> int:
            block = self.launch(*args, **variant.params)[1]
            return int(np.prod(block))

        return sorted(self.variants, key=threads)[:2]

    def tuned(self, smoke: bool = False) -> nt.TunedKernel:
        """A fresh tuned kernel (nothing compiled or tuned yet) over ``variants_for(smoke)``."""
        return nt.autotune(
            self.kernel,
            variants=self.variants_for(smoke),
            launch=self.launch,
            name=f"bench_{self.name}",
        )

    def sizes_for(self, smoke: bool) -> Sequence[int]:
        """The sizes to tune at."""
        return self.smoke_sizes if smoke else self.sizes


CASES: list[Case] = [
    Case(
        "scale_add",
        scale_add,
        nt.product(BLOCK=[64, 128, 256, 512, 1024], ITEMS=[1, 2, 4, 8]),
        scale_add_launch,
        lambda n: (np.float32(2.0), _random(n, 1), _random(n, 2), _empty(n)),
        sizes=[1 << 16, 1 << 20, 1 << 24, 1 << 26],
        smoke_sizes=[32, 64],
    ),
    Case(
        "block_sum",
        block_sum,
        nt.product(BLOCK=[64, 128, 256, 512, 1024], ITEMS=[1, 4, 16]),
        block_sum_launch,
        lambda n: (_random(n, 3), cuda.to_device(np.zeros(1, np.float32))),
        sizes=[1 << 16, 1 << 20, 1 << 24, 1 << 26],
        smoke_sizes=[32],
    ),
    Case(
        "transpose",
        transpose,
        nt.product(TILE=[8, 16, 32], ROWS=[1, 2, 4, 8]),
        transpose_launch,
        lambda n: (_random((n, n), 4), _empty((n, n))),
        sizes=[256, 1024, 4096, 8192],
        smoke_sizes=[8],
    ),
    Case(
        "matmul",
        matmul,
        nt.product(TILE=[16, 32], WPT=[1, 2, 4, 8]),
        matmul_launch,
        lambda n: (_random((n, n), 5), _random((n, n), 6), _empty((n, n))),
        sizes=[128, 256, 512, 1024],
        smoke_sizes=[16],
    ),
    Case(
        "laplace",
        laplace,
        nt.product(
            BLOCK=[16, 32, 64, 128, 256],
            BLOCK_Y=[1, 2, 4, 8, 16],
            where=lambda BLOCK, BLOCK_Y: 64 <= BLOCK * BLOCK_Y <= 1024,
        ),
        laplace_launch,
        lambda n: (_random((n, n), 7), _empty((n, n))),
        sizes=[256, 1024, 4096, 8192],
        smoke_sizes=[8],
    ),
]


def case(name: str) -> Case:
    """The case of this name."""
    for candidate in CASES:
        if candidate.name == name:
            return candidate
    raise ValueError(f"bench: no kernel named {name!r}; kernels are {[c.name for c in CASES]}")
