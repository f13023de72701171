"""Kernels for the tests, written as numba users write them: constants are module globals."""

import math

from numba import cuda, float32

import numbatune as nt

TPB = 4
BLOCK = 4
REPS = 1


def matmul_launch(A, B, C, *, TPB):
    return (nt.cdiv(C.shape[0], TPB), nt.cdiv(C.shape[1], TPB)), (TPB, TPB)


@cuda.jit
def fast_matmul(A, B, C):
    """numba-cuda's documentation example, unchanged."""
    sA = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    sB = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bpg = cuda.gridDim.x
    tmp = float32(0.0)
    for i in range(bpg):
        sA[tx, ty] = 0
        sB[tx, ty] = 0
        if x < A.shape[0] and (ty + i * TPB) < A.shape[1]:
            sA[tx, ty] = A[x, ty + i * TPB]
        if y < B.shape[1] and (tx + i * TPB) < B.shape[0]:
            sB[tx, ty] = B[tx + i * TPB, y]
        cuda.syncthreads()
        for j in range(TPB):
            tmp += sA[tx, j] * sB[j, ty]
        cuda.syncthreads()
    if x < C.shape[0] and y < C.shape[1]:
        C[x, y] = tmp


def accumulate_launch(a, out, *, BLOCK):
    return nt.cdiv(a.shape[0], BLOCK), BLOCK


@cuda.jit
def accumulate(a, out):
    """out += a: a second launch would show in the result."""
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] += a[i]


@cuda.jit
def repeated_sine(a, out):
    """REPS dependent sines per element: more REPS is more work for the same result shape."""
    i = cuda.grid(1)
    if i < a.shape[0]:
        s = a[i]
        for _ in range(REPS):
            s = math.sin(s) + a[i]
        out[i] = s
