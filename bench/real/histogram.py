"""numba-examples' GPU histogram: ``histogram``, a grid-stride loop of global atomic adds, with
the bin computed by a ``numba.jit`` function that CUDA compiles as a device function.

Source: numba-examples, https://github.com/numba/numba-examples at commit 74346b6:
examples/density_estimation/histogram/gpu.py (``compute_bin``, ``histogram`` and the launch in
``numba_gpu_histogram``). Copyright (c) 2017, Numba; BSD-2-Clause, see bench/real/NOTICES.md.
Our port keeps the kernel, its device function and its launch, ``histogram[64, 64](a_gpu,
a_min, a_max, histogram_out)``: 64 blocks of 64 threads, whatever the size. The minimum and
maximum, which the project finds with a second kernel and copies to the host, are computed on
the host once.

The inputs: 2**27 normally distributed float32 values (512 MiB), 100 bins.
"""

import numba
import numpy as np
from numba import cuda

import numbatune as nt
from bench.real import Inputs, copied_outputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "numba-examples examples/density_estimation/histogram/gpu.py (BSD-2-Clause)"
KIND = "histogram, global atomics, grid-stride loop, numba.jit device function"
SIZES = {"full": 1 << 27, "smoke": 200}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
BINS = 100


@numba.jit(nopython=True)
def compute_bin(x, n, xmin, xmax):
    # special case to mirror NumPy behavior for last bin
    if x == xmax:
        return n - 1  # a_max always in last bin

    # SPEEDTIP: Remove the float64 casts if you don't need to exactly reproduce NumPy
    bin = np.int32(n * (np.float64(x) - np.float64(xmin)) / (np.float64(xmax) - np.float64(xmin)))

    if bin < 0 or bin >= n:
        return None
    else:
        return bin


@cuda.jit
def histogram(x, xmin, xmax, histogram_out):
    nbins = histogram_out.shape[0]
    bin_width = (xmax - xmin) / nbins  # noqa: F841 (as the project writes it)

    start = cuda.grid(1)
    stride = cuda.gridsize(1)

    for i in range(start, x.shape[0], stride):
        # note that calling a numba.jit function from CUDA automatically
        # compiles an equivalent CUDA device function!
        bin_number = compute_bin(x[i], nbins, xmin, xmax)

        if bin_number >= 0 and bin_number < histogram_out.shape[0]:
            cuda.atomic.add(histogram_out, bin_number, 1)


TUNED = nt.autotune(
    variants=nt.product(
        BLOCKS=[2, 4] if SIMULATOR else [64, 264, 1056, 4224],
        THREADS=[16, 32] if SIMULATOR else [64, 128, 256, 512, 1024],
    ),
    # A grid-stride loop: any grid counts every value.
    launch=lambda x, xmin, xmax, histogram_out, *, BLOCKS, THREADS: (BLOCKS, THREADS),
)(histogram)


def make_inputs(size, rng):
    """``size`` normal values, their minimum and maximum (NumPy scalars, as the project's
    copy to the host gives them) and zeroed bins."""
    a = rng.standard_normal(size, dtype=np.float32)
    histogram_out = cuda.to_device(np.zeros(shape=(BINS,), dtype=np.int32))
    args = (cuda.to_device(a), a.min(), a.max(), histogram_out)
    return Inputs(args, {"counts": histogram_out}, (64, 64))


def original(inputs, args):
    histogram[inputs.launch](*args)


arguments, outputs = every_call, copied_outputs
