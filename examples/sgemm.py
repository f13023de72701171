"""Float32 matrix product C = A @ B with register tiling, tuned over the block tile (BM x BN,
stepping BK along k), the thread tile (TM x TN) and how a thread's tile lies in the block's.

Each block stages a BK-deep slice of A (transposed) and of B in shared memory; each thread keeps
a TM x TN tile of C in registers and updates it with outer products of TM values of A and TN of
B. A thread's rows and columns are adjacent (SPREAD=False) or spaced across the block tile
(SPREAD=True: neighbouring threads read neighbouring shared-memory words, without bank
conflicts). Run it: python examples/sgemm.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda, float32

BM, BN, BK = 64, 64, 8  # the block's tile of C, and the depth of a step along k
TM, TN = 4, 4  # the thread's tile of C
SPREAD = False  # space a thread's rows and columns across the block tile (else adjacent)


@nt.autotune(
    variants=nt.product(
        BM=[64, 128],
        BN=[64, 128],
        BK=[8, 16],
        TM=[4, 8],
        TN=[4, 8],
        SPREAD=[False, True],
        where=lambda BM, BN, TM, TN, **_: 64 <= (BM // TM) * (BN // TN) <= 512,
    ),
    launch=lambda A, B, C, *, BM, BN, TM, TN: (
        (max(1, nt.cdiv(C.shape[1], BN)), max(1, nt.cdiv(C.shape[0], BM))),
        (BM // TM) * (BN // TN),
    ),
)
@cuda.jit
def sgemm(A, B, C):
    """C = A @ B"""
    As = cuda.shared.array((BK, BM), float32)  # As[k, i] = A[first_row + i, k0 + k]
    Bs = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    t, threads = cuda.threadIdx.x, cuda.blockDim.x
    ty, tx = t // (BN // TN), t % (BN // TN)
    first_row, first_col = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    M, K, N = A.shape[0], A.shape[1], B.shape[1]
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = 0
    for k0 in range(0, K, BK):
        for e in range(t, BM * BK, threads):
            i, k = e // BK, e % BK
            inside = first_row + i < M and k0 + k < K
            As[k, i] = A[first_row + i, k0 + k] if inside else float32(0)
        for e in range(t, BK * BN, threads):
            k, j = e // BN, e % BN
            inside = k0 + k < K and first_col + j < N
            Bs[k, j] = B[k0 + k, first_col + j] if inside else float32(0)
        cuda.syncthreads()
        for k in range(BK):
            for i in range(TM):
                a[i] = As[k, ty + i * (BM // TM) if SPREAD else ty * TM + i]
            for j in range(TN):
                b[j] = Bs[k, tx + j * (BN // TN) if SPREAD else tx * TN + j]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()
    for i in range(TM):
        row = first_row + (ty + i * (BM // TM) if SPREAD else ty * TM + i)
        for j in range(TN):
            col = first_col + (tx + j * (BN // TN) if SPREAD else tx * TN + j)
            if row < M and col < N:
                C[row, col] = acc[i, j]


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    m, k, n = (19, 11, 23) if small else (4096, 4096, 4096)
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.random((m, k), dtype=np.float32))
    b = cuda.to_device(rng.random((k, n), dtype=np.float32))
    return sgemm, (a, b, cuda.device_array((m, n), np.float32))


def reference(A, B, C):
    """What sgemm computes, on the host."""
    return A.copy_to_host() @ B.copy_to_host()


def work(A, B, C):
    """Floating-point operations: a multiply and an add per term."""
    return {"flops": 2 * A.shape[0] * A.shape[1] * B.shape[1]}


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
