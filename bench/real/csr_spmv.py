"""PELS' sparse matrix-vector product in CSR format: ``cu_csr_spmv``, one thread per row,
launched with ``forall`` (numba picks the block size with the occupancy calculator).

Source: PELS (Performance Engineering for Linear Solvers), https://github.com/jthies/PELS at
commit 328a664: kernels_gpu.py (the kernel and its launch in ``csr_spmv``). Copyright (c)
2024, Jonas Thies; BSD-3-Clause, see bench/real/NOTICES.md. Our port keeps the kernel's body
and its launch, ``cu_csr_spmv.forall(nrows)(valA, rptrA, colA, x, y)``; PELS's wrapper then
synchronises the device, which is not part of the launch and is left out (the benchmark
synchronises once per batch of calls).

The inputs: the 7-point Laplacian of a 160 x 160 x 160 grid (4.1 million rows, 28.5 million
nonzeros, float64 values and int32 indices as SciPy stores them), a random vector.
"""

import functools

import numpy as np
from numba import cuda

import numbatune as nt
from bench.real import Inputs, copied_outputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "PELS kernels_gpu.py (BSD-3-Clause)"
KIND = "sparse CSR matrix-vector product, forall launch"
SIZES = {"full": 160, "smoke": 3}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


@cuda.jit
def cu_csr_spmv(valA, rptrA, colA, x, y):
    tx = cuda.threadIdx.x
    bx = cuda.blockIdx.x
    bdx = cuda.blockDim.x
    i = bx * bdx + tx
    if i < x.size:
        y[i] = 0.0
        for j in range(rptrA[i], rptrA[i + 1]):
            y[i] += valA[j] * x[colA[j]]


TUNED = nt.autotune(
    variants=nt.product(THREADS=[32, 64] if SIMULATOR else [64, 128, 256, 512, 1024]),
    launch=lambda valA, rptrA, colA, x, y, *, THREADS: (nt.cdiv(x.size, THREADS), THREADS),
)(cu_csr_spmv)


@functools.cache
def laplacian_3d(n):
    """The 7-point Laplacian of an n x n x n grid in CSR form: data, indptr, indices (made once
    per n: both sides of the benchmark get a copy)."""
    coordinates = np.indices((n, n, n)).reshape(3, -1)
    index = np.arange(n**3)
    strides = (n * n, n, 1)
    columns, values = [], []
    # Each row's columns in increasing order: -z, -y, -x, the site, +x, +y, +z.
    for axis, step in [(0, -1), (1, -1), (2, -1), (None, 0), (2, 1), (1, 1), (0, 1)]:
        if axis is None:
            columns.append(index)
            values.append(np.full(index.size, 6.0))
            continue
        moved = coordinates[axis] + step
        inside = (moved >= 0) & (moved < n)
        columns.append(np.where(inside, index + step * strides[axis], -1))
        values.append(np.full(index.size, -1.0))
    columns, values = np.stack(columns, axis=1), np.stack(values, axis=1)
    keep = columns >= 0
    indptr = np.concatenate(([0], np.cumsum(keep.sum(axis=1)))).astype(np.int32)
    return values[keep], indptr, columns[keep].astype(np.int32)


def make_inputs(size, rng):
    """The Laplacian of a ``size``**3 grid, a random vector and the result vector."""
    data, indptr, indices = laplacian_3d(size)
    nrows = indptr.size - 1
    x = cuda.to_device(rng.standard_normal(nrows))
    y = cuda.to_device(np.zeros(nrows))
    args = (cuda.to_device(data), cuda.to_device(indptr), cuda.to_device(indices), x, y)
    return Inputs(args, {"y": y}, (nrows,))


def original(inputs, args):
    cu_csr_spmv.forall(*inputs.launch)(*args)


arguments, outputs = every_call, copied_outputs
