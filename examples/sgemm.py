"""Float32 matrix product C = A @ B with register tiling, tuned over the block tile (BM x BN,
stepping BK along k), the thread tile (TM x TN) and the registers a thread may use.

Each block stages BK-deep slices of A (transposed) and of B in shared memory; each thread keeps
a TM x TN tile of C in registers and updates it with outer products of TM values of A and TN of
B. While a thread multiplies one slice, its loads of the next are in flight (into registers,
then into the other of two shared-memory buffers: one barrier a step). A thread's rows and
columns lie in groups of four spaced across the block tile (SPREAD=True: a quarter-warp reads
32 different banks, four words a thread at a time; SPREAD=False: adjacent, which the widened
space of bench/search.py also tries). Each row of A's shared tile is padded by PAD=4 words
where that fits, so that the transposed stores of a warp meet 32 banks instead of 4, and the
shared tiles are aligned to ALIGN=16 bytes, so that NVVM reads a thread's four adjacent words
with one instruction (ld.shared.v4.f32) instead of four (numba's simulator takes no
alignment). The k loop is written out when a variant is compiled (nt.static_range): numba
leaves it rolled. A block whose tile lies within C loads each slice that lies within A and B
with no bounds guards (on the H100 the best variant ran 7.7% faster than with a guard on every
load).
Run it: python examples/sgemm.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import itertools

import numpy as np
from numba import config, cuda, float32

BM, BN, BK = 64, 64, 8  # the block's tile of C, and the depth of a step along k
TM, TN = 4, 4  # the thread's tile of C
SPREAD = True  # a thread's rows and columns in groups of four across the tile (else adjacent)
PAD = 4  # words after each row of A's shared tile: 4 spreads its transposed stores over 32 banks
ALIGN = None if config.ENABLE_CUDASIM else 16  # the shared tiles' alignment in bytes: 16 lets
# NVVM read four floats at once (numba's simulator takes no alignment)
SHARED_BYTES = 48 * 1024  # the most shared memory a block can declare statically
THREADS = (BM // TM) * (BN // TN)  # threads per block
LOADS_A, LOADS_B = BM * BK // THREADS, BK * BN // THREADS  # a thread's loads per step


def tiles_fit(bm: int, bn: int, bk: int, pad: int) -> bool:
    """Whether the two buffers of A's shared tile (padded by ``pad`` words a row) and of B's
    fit in the shared memory a block declares."""
    return 2 * bk * (bm + pad + bn) * 4 <= SHARED_BYTES


def variants():
    """The tuning space: block tiles of 64 to 256, steps of 8 or 16 along k, thread tiles of
    16 to 128 values, the spread layout, A's tile padded where that fits and both aligned.
    A 256-thread block of 8 x 8 thread tiles is also tried capped at 128 registers a thread,
    which lets two such blocks share a multiprocessor."""
    for (bm, bn), bk, (tm, tn) in itertools.product(
        [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128)],
        [8, 16],
        [(4, 4), (8, 8), (8, 16), (16, 8)],
    ):
        threads = (bm // tm) * (bn // tn)
        # 64 to 256 threads (512 of 8 x 8 tiles need more registers than a block has), a
        # thread's loads from B in one column
        if not 64 <= threads <= 256 or threads % bn:
            continue
        if (bm * bk) % threads or not tiles_fit(bm, bn, bk, 0):
            continue
        params = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn}
        params |= dict(THREADS=threads, LOADS_A=bm * bk // threads, LOADS_B=bk * bn // threads)
        params |= {"PAD": 4 if tiles_fit(bm, bn, bk, 4) else 0}
        yield nt.Variant(params)
        if threads == 256 and tm * tn == 64:
            yield nt.Variant(params, max_registers=128)


@nt.autotune(
    variants=list(variants()),
    launch=lambda A, B, C, *, BM, BN, THREADS: (
        (max(1, nt.cdiv(C.shape[1], BN)), max(1, nt.cdiv(C.shape[0], BM))),
        THREADS,
    ),
)
@cuda.jit
def sgemm(A, B, C):
    """C = A @ B"""
    # As[_, k, i] = A[first_row + i, k0 + k]
    As = cuda.shared.array((2, BK, BM + PAD), float32, alignment=ALIGN)
    Bs = cuda.shared.array((2, BK, BN), float32, alignment=ALIGN)
    next_a = cuda.local.array(LOADS_A, float32)  # this thread's share of the next slices
    next_b = cuda.local.array(LOADS_B, float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    t = nt.nonnegative(cuda.threadIdx.x)
    ty, tx = t // (BN // TN), t % (BN // TN)
    first_row, first_col = (
        nt.nonnegative(cuda.blockIdx.y) * BM,
        nt.nonnegative(cuda.blockIdx.x) * BN,
    )
    # A thread's loads of a slice all lie in one column (so they share its guard): rows
    # a_i + s * (THREADS // BK) of A's at column a_k, rows b_k + s * (THREADS // BN) of B's at b_j
    a_i, a_k = t // BK, t % BK
    b_k, b_j = t // BN, t % BN
    M, K, N = A.shape[0], A.shape[1], B.shape[1]
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = 0
    inside = first_row + BM <= M and first_col + BN <= N  # the block's tile lies within C
    for k0 in range(0, K + BK, BK):  # load slice k0 while multiplying slice k0 - BK
        k0 = nt.nonnegative(k0)  # (loop counters are signed too)
        now = k0 // BK % 2  # the buffer slice k0 goes to; slice k0 - BK is in the other
        if inside and k0 + BK <= K:  # every load of the slice in bounds: no guards
            for s in range(LOADS_A):
                next_a[s] = A[first_row + a_i + s * (THREADS // BK), k0 + a_k]
            for s in range(LOADS_B):
                next_b[s] = B[k0 + b_k + s * (THREADS // BN), first_col + b_j]
        else:
            for s in range(LOADS_A):
                row = first_row + a_i + s * (THREADS // BK)
                next_a[s] = A[row, k0 + a_k] if row < M and k0 + a_k < K else float32(0)
            for s in range(LOADS_B):
                k = k0 + b_k + s * (THREADS // BN)
                next_b[s] = B[k, first_col + b_j] if k < K and first_col + b_j < N else float32(0)
        if k0 > 0:
            for k in nt.static_range(BK):  # written out: its indices become constants
                for i in range(TM):
                    a[i] = As[
                        1 - now,
                        k,
                        i // 4 * (BM * 4 // TM) + ty * 4 + i % 4 if SPREAD else ty * TM + i,
                    ]
                for j in range(TN):
                    b[j] = Bs[
                        1 - now,
                        k,
                        j // 4 * (BN * 4 // TN) + tx * 4 + j % 4 if SPREAD else tx * TN + j,
                    ]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a[i] * b[j]
        for s in range(LOADS_A):
            As[now, a_k, a_i + s * (THREADS // BK)] = next_a[s]
        for s in range(LOADS_B):
            Bs[now, b_k + s * (THREADS // BN), b_j] = next_b[s]
        cuda.syncthreads()  # the slice is stored, and every thread is done with the other
    for i in range(TM):
        row = first_row + (i // 4 * (BM * 4 // TM) + ty * 4 + i % 4 if SPREAD else ty * TM + i)
        for j in range(TN):
            col = first_col + (j // 4 * (BN * 4 // TN) + tx * 4 + j % 4 if SPREAD else tx * TN + j)
            if row < M and col < N:
                C[row, col] = acc[i, j]


def example(small: bool = False, size: int = 4096):
    """The tuned kernel and arguments to tune it on: ``size`` x ``size`` matrices (small: sizes
    for the simulator)."""
    m, k, n = (64, 20, 64) if small else (size, size, size)  # small: 64 x 64 tiles fit, 128 not
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
