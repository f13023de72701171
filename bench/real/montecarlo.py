"""numba-cuda's Monte Carlo integration example: ``mc_integrator_kernel``, one xoroshiro128+
random state per thread (an array of records), launched with ``forall``.

Source: numba-cuda, https://github.com/NVIDIA/numba-cuda at commit b18b944: the documentation
example numba_cuda/numba/cuda/tests/doc_examples/test_montecarlo.py (the kernel, the
integrand ``func`` and the launch in ``mc_integrate``). Copyright (c) 2012 Anaconda, Inc.,
(c) 2024-2025 NVIDIA CORPORATION; BSD-2-Clause, see bench/real/NOTICES.md. Our port keeps the
kernel, the integrand (a ``numba.jit`` function, as the example writes it) and the launch,
``mc_integrator_kernel.forall(nsamps)(out, rng_states, lower_lim, upper_lim)``.
``mc_integrate`` also makes its arrays and random states, and sums the samples with
``cuda.reduce``, on every call; here they are made once and what is timed is the launch. Each
call draws the next sample from every state.

The inputs: 2**22 samples (and states) of 1 / x over [1, 2].
"""

import numba
import numpy as np
from numba import cuda
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

import numbatune as nt
from bench.real import Inputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "numba-cuda docs, doc_examples/test_montecarlo.py (BSD-2-Clause)"
KIND = "Monte Carlo sampling, RNG states (records), forall launch"
SIZES = {"full": 1 << 22, "smoke": 64}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


@cuda.jit
def mc_integrator_kernel(out, rng_states, lower_lim, upper_lim):
    """
    kernel to draw random samples and evaluate the function to
    be integrated at those sample values
    """
    size = len(out)

    gid = cuda.grid(1)
    if gid < size:
        # draw a sample between 0 and 1 on this thread
        samp = xoroshiro128p_uniform_float32(rng_states, gid)

        # normalize this sample to the limit range
        samp = samp * (upper_lim - lower_lim) + lower_lim

        # evaluate the function to be
        # integrated at the normalized
        # value of the sample
        y = func(samp)
        out[gid] = y


# define a function to integrate
@numba.jit
def func(x):
    return 1.0 / x


TUNED = nt.autotune(
    variants=nt.product(THREADS=[16, 32] if SIMULATOR else [64, 128, 256, 512, 1024]),
    launch=lambda out, rng_states, lower_lim, upper_lim, *, THREADS: (
        nt.cdiv(len(out), THREADS),
        THREADS,
    ),
)(mc_integrator_kernel)


def make_inputs(size, rng):
    """The samples' array and ``size`` random states (seeded from ``rng``), as
    ``mc_integrate`` makes them, for the integral of 1 / x over [1, 2]."""
    out = cuda.to_device(np.zeros(size, dtype="float32"))
    rng_states = create_xoroshiro128p_states(size, seed=int(rng.integers(1 << 62)))
    return Inputs((out, rng_states, 1, 2), {"samples": out, "states": rng_states}, (size,))


def original(inputs, args):
    mc_integrator_kernel.forall(*inputs.launch)(*args)


def outputs(inputs):
    """The samples, and each field of the states (record arrays compare field by field)."""
    states = inputs.outputs["states"].copy_to_host()
    samples = inputs.outputs["samples"].copy_to_host()
    return {"samples": samples, **{field: states[field] for field in states.dtype.names}}


arguments = every_call
