"""numba-benchmark's N-body step (adapted there from GPU Gems 3, chapter 31): ``calculate_forces``,
declared with a signature, each block loading tiles of ``tile_size`` bodies into shared memory.

Source: numba-benchmark, https://github.com/numba/numba-benchmark at its latest commit
(2021-08-24): benchmarks/bench_cuda.py (``body_body_interaction``, ``tile_calculation``,
``calculate_forces`` and the launch in ``NBodyCUDARunner``). Copyright (c) 2014, Continuum
Analytics, Inc.; BSD-2-Clause, see bench/real/NOTICES.md. Our port keeps the kernel, its device
functions, its signature (numba-benchmark writes the old ``argtypes=`` form of the same
``void(float32[:, :], float32[:], float32[:, :])``) and its launch: ``tile_size`` (128) threads
per block, ``ceil(n / 128)`` blocks. The project launches on a stream of its own; here both
sides use the default stream. The kernel has no bounds checks: ``tile_size`` must divide the
number of bodies, which every tuned value does here.

The inputs: 65536 bodies in the plane, uniform in [-1, 1]^2, weights uniform in [1, 2].
"""

import math

import numpy as np
from numba import cuda, float32

import numbatune as nt
from bench.real import Inputs, copied_outputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "numba-benchmark benchmarks/bench_cuda.py (BSD-2-Clause)"
KIND = "n-body forces, declared signature, shared-memory tiles"
SIZES = {"full": 1 << 16, "smoke": 128}  # a multiple of tile_size (128)
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}

eps_2 = np.float32(1e-6)
zero = np.float32(0.0)
one = np.float32(1.0)


@cuda.jit(device=True, inline=True)
def body_body_interaction(xi, yi, xj, yj, wj, axi, ayi):
    """
    Compute the influence of body j on the acceleration of body i.
    """
    rx = xj - xi
    ry = yj - yi
    sqr_dist = rx * rx + ry * ry + eps_2
    sixth_dist = sqr_dist * sqr_dist * sqr_dist
    inv_dist_cube = one / math.sqrt(sixth_dist)
    s = wj * inv_dist_cube
    axi += rx * s
    ayi += ry * s
    return axi, ayi


@cuda.jit(device=True, inline=True)
def tile_calculation(xi, yi, axi, ayi, positions, weights):
    """
    Compute the contribution of this block's tile to the acceleration
    of body i.
    """
    for j in range(cuda.blockDim.x):
        xj = positions[j, 0]
        yj = positions[j, 1]
        wj = weights[j]
        axi, ayi = body_body_interaction(xi, yi, xj, yj, wj, axi, ayi)
    return axi, ayi


tile_size = 128


@cuda.jit("void(float32[:, :], float32[:], float32[:, :])")
def calculate_forces(positions, weights, accelerations):
    """
    Calculate accelerations produced on all bodies by mutual gravitational
    forces.
    """
    sh_positions = cuda.shared.array((tile_size, 2), float32)
    sh_weights = cuda.shared.array(tile_size, float32)
    i = cuda.grid(1)
    axi = 0.0
    ayi = 0.0
    xi = positions[i, 0]
    yi = positions[i, 1]
    for j in range(0, len(weights), tile_size):
        index = (j // tile_size) * cuda.blockDim.x + cuda.threadIdx.x
        sh_index = cuda.threadIdx.x
        sh_positions[sh_index, 0] = positions[index, 0]
        sh_positions[sh_index, 1] = positions[index, 1]
        sh_weights[sh_index] = weights[index]
        cuda.syncthreads()
        axi, ayi = tile_calculation(xi, yi, axi, ayi, sh_positions, sh_weights)
        cuda.syncthreads()
    accelerations[i, 0] = axi
    accelerations[i, 1] = ayi


TUNED = nt.autotune(
    # tile_size is the block's size too (the kernel loads one body per thread).
    variants=nt.product(tile_size=[64, 128] if SIMULATOR else [32, 64, 128, 256, 512, 1024]),
    launch=lambda positions, weights, accelerations, *, tile_size: (
        math.ceil(len(weights) / tile_size),
        tile_size,
    ),
)(calculate_forces)


def make_inputs(size, rng):
    """``size`` bodies, as numba-benchmark's ``make_nbody_samples`` draws them."""
    positions = rng.uniform(-1.0, 1.0, (size, 2)).astype(np.float32)
    weights = rng.uniform(1.0, 2.0, size).astype(np.float32)
    accelerations = cuda.to_device(np.zeros_like(positions))
    args = (cuda.to_device(positions), cuda.to_device(weights), accelerations)
    blockdim = tile_size
    griddim = math.ceil(size / blockdim)
    return Inputs(args, {"accelerations": accelerations}, (griddim, blockdim))


def original(inputs, args):
    calculate_forces[inputs.launch](*args)


arguments, outputs = every_call, copied_outputs
