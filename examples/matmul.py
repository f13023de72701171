"""numba-cuda's documentation matrix product, tuned over its tile size by one decorator.

The kernel body is the documentation's `fast_matmul`, unchanged: TPB is a module global, so each
variant compiles with its own shared-memory tile size. Run it: python examples/matmul.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda, float32

TPB = 16  # threads per block along each axis, and the shared-memory tile size


@nt.autotune(
    variants=nt.product(TPB=[8, 16, 32]),
    launch=lambda A, B, C, *, TPB: (
        (nt.cdiv(C.shape[0], TPB), nt.cdiv(C.shape[1], TPB)),
        (TPB, TPB),
    ),
)
@cuda.jit
def fast_matmul(A, B, C):
    sA = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    sB = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bpg = cuda.gridDim.x  # blocks per grid
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


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    n = 16 if small else 2048  # the documentation's kernel assumes square matrices
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.random((n, n), dtype=np.float32))
    b = cuda.to_device(rng.random((n, n), dtype=np.float32))
    return fast_matmul, (a, b, cuda.device_array((n, n), np.float32))


def reference(A, B, C):
    """What fast_matmul computes, on the host."""
    return A.copy_to_host() @ B.copy_to_host()


def work(A, B, C):
    """Floating-point operations: a multiply and an add per term."""
    return {"flops": 2 * A.shape[0] * A.shape[1] * B.shape[1]}


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
