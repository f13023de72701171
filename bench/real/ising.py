"""NVIDIA's 2-D Ising model, Metropolis Monte Carlo on a checkerboard: ``update_lattice``,
one launch per colour (black, then white), each reading the other colour's spins.

Source: NVIDIA ising-gpu, https://github.com/NVIDIA/ising-gpu at commit a4ceb8e:
basic_python/ising_basic.py (the single-GPU kernel ``update_lattice`` and its launch in
``update``). Copyright (c) 2019, NVIDIA CORPORATION; MIT licence, see bench/real/NOTICES.md.
Our port keeps the kernel's body and its launch: 128 threads per block, one thread per site
of a colour. ``inv_temp``, which the project computes from its command line (alpha 0.1 by
default), is a module global as there. The project fills ``randvals`` with cuRAND before each
launch; here they are drawn once (what is timed is the kernel's launch).

The inputs: a 16384 x 16384 lattice (two 16384 x 8192 int8 halves) at 0.1 times the
critical temperature, random spins and random values.
"""

import math

import numpy as np
from numba import cuda

import numbatune as nt
from bench.real import Inputs, copied_outputs
from numbatune.arrays import SIMULATOR

SOURCE = "NVIDIA ising-gpu basic_python/ising_basic.py (MIT)"
KIND = "checkerboard Monte Carlo step, two launches per sweep"
SIZES = {"full": 16384, "smoke": 8}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}

TCRIT = 2.26918531421  # critical temperature
ALPHA = 0.1  # the project's default coefficient of the critical temperature
inv_temp = (1.0) / (ALPHA * TCRIT)


@cuda.jit
def update_lattice(lattice, op_lattice, randvals, is_black):
    n, m = lattice.shape
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    i = tid // m
    j = tid % m

    if i >= n or j >= m:
        return

    # Set stencil indices with periodicity
    ipp = (i + 1) if (i + 1) < n else 0
    jpp = (j + 1) if (j + 1) < m else 0
    inn = (i - 1) if (i - 1) >= 0 else (n - 1)
    jnn = (j - 1) if (j - 1) >= 0 else (m - 1)

    # Select off-column index based on color and row index parity
    if is_black:
        joff = jpp if (i % 2) else jnn
    else:
        joff = jnn if (i % 2) else jpp

    # Compute sum of nearest neighbor spins
    nn_sum = op_lattice[inn, j] + op_lattice[i, j] + op_lattice[ipp, j] + op_lattice[i, joff]

    # Determine whether to flip spin
    lij = lattice[i, j]
    acceptance_ratio = math.exp(-2.0 * inv_temp * nn_sum * lij)
    if randvals[i, j] < acceptance_ratio:
        lattice[i, j] = -lij


TUNED = nt.autotune(
    variants=nt.product(THREADS=[32, 64] if SIMULATOR else [64, 128, 256, 512, 1024]),
    launch=lambda lattice, op_lattice, randvals, is_black, *, THREADS: (
        nt.cdiv(lattice.size, THREADS),
        THREADS,
    ),
)(update_lattice)


def make_inputs(size, rng):
    """A ``size`` x ``size`` lattice of random spins, as its two colours, and random values."""
    half = (size, size // 2)
    lattice_b = cuda.to_device(np.where(rng.random(half) > 0.5, 1, -1).astype(np.int8))
    lattice_w = cuda.to_device(np.where(rng.random(half) > 0.5, 1, -1).astype(np.int8))
    randvals = cuda.to_device(rng.random(half, dtype=np.float32))
    threads = 128
    blocks = (size // 2 * size + threads - 1) // threads
    outputs = {"black": lattice_b, "white": lattice_w}
    return Inputs((lattice_w, lattice_b, randvals, False), outputs, (blocks, threads))


def arguments(inputs, call):
    """Even calls update the black sites (reading the white ones), odd calls the white ones."""
    lattice_w, lattice_b, randvals, _ = inputs.args
    if call % 2 == 0:
        return lattice_b, lattice_w, randvals, True
    return inputs.args


def original(inputs, args):
    update_lattice[inputs.launch](*args)


outputs = copied_outputs
