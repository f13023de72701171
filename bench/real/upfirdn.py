"""cuSignal's 1-D polyphase FIR filter (upsample, filter, downsample: the core of
``resample_poly``): ``_numba_upfirdn_1d``, compiled for a declared signature with fastmath.

Source: cuSignal, https://github.com/rapidsai/cusignal at commit 2992a0f (2020-05-08, the
last version with Numba kernels): python/cusignal/filtering/_upfirdn_cuda.py (the kernel,
``_numba_upfirdn_1d_signature``, ``_pad_h``, ``_output_len`` and the launch in
``_UpFIRDn.apply_filter``) and python/cusignal/utils/compile_kernels.py (``cuda.jit(sig,
fastmath=True)``). Copyright (c) 2019-2020, NVIDIA CORPORATION; Apache License 2.0, see
bench/real/NOTICES.md. Changes: ``cp.int32`` (CuPy's name for NumPy's int32) is written
``np.int32``; the filter is prepared with NumPy instead of CuPy; the launch uses the default
stream (cuSignal passes its CuPy stream, by default the null stream). The launch is
cuSignal's: 20 blocks per multiprocessor of 512 threads, a grid-stride loop.

The inputs: ``resample_poly(x, up=3, down=2)`` of 2**26 float32 samples with a 61-tap filter
(random taps, padded as ``resample_poly`` pads them).
"""

import functools

import numpy as np
from numba import cuda, float32, int64, void

import numbatune as nt
from bench.real import Inputs, copied_outputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "cuSignal python/cusignal/filtering/_upfirdn_cuda.py (Apache-2.0)"
KIND = "1-D polyphase FIR filter, declared signature, fastmath, grid-stride loop"
SIZES = {"full": 1 << 26, "smoke": 40}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
UP, DOWN = 3, 2


def _pad_h(h, up):
    """Store coefficients in a transposed, flipped arrangement."""
    h_padlen = len(h) + (-len(h) % up)
    h_full = np.zeros(h_padlen, h.dtype)
    h_full[: len(h)] = h
    h_full = h_full.reshape(-1, up).T[:, ::-1].ravel()
    return h_full


def _output_len(len_h, in_len, up, down):
    in_len_copy = in_len + (len_h + (-len_h % up)) // up - 1
    nt = in_len_copy * up
    need = nt // down
    if nt % down > 0:
        need += 1
    return need


# Custom Numba kernel implementing upsample, filter, downsample operation
# Matthew Nicely - mnicely@nvidia.com
def _numba_upfirdn_1d(x, h_trans_flip, up, down, axis, x_shape_a, h_per_phase, padded_len, out):
    X = cuda.grid(1)
    strideX = cuda.gridsize(1)

    for i in range(X, np.int32(out.shape[0]), strideX):
        x_idx = np.int32(np.int32(np.int32(i * down) // up) % padded_len)
        h_idx = np.int32(np.int32(np.int32(i * down) % up) * h_per_phase)

        x_conv_idx = np.int32(np.int32(x_idx - h_per_phase) + 1)
        if x_conv_idx < 0:
            h_idx -= x_conv_idx
            x_conv_idx = 0

        temp: out.dtype = 0

        # If axis = 0, we need to know each column in x.
        for x_c in range(np.int32(x_conv_idx), np.int32(x_idx + 1)):
            if x_c < x_shape_a and x_c >= 0:
                temp += x[x_c] * h_trans_flip[h_idx]
            h_idx += 1

        out[i] = temp


def _numba_upfirdn_1d_signature(ty):
    return void(
        ty[:],  # x
        ty[:],  # h_trans_flip
        int64,  # up
        int64,  # down
        int64,  # axis
        int64,  # x_shape_a
        int64,  # h_per_phase
        int64,  # padded_len
        ty[:],  # out
    )


KERNEL = cuda.jit(_numba_upfirdn_1d_signature(float32), fastmath=True)(_numba_upfirdn_1d)


def _launch(*args, THREADS, ITEMS):
    """A grid-stride loop computes every output with any grid: ITEMS outputs per thread."""
    out = args[-1]
    return nt.cdiv(out.shape[0], THREADS * ITEMS), THREADS


TUNED = nt.autotune(
    variants=nt.product(
        THREADS=[32, 64] if SIMULATOR else [128, 256, 512, 1024],
        ITEMS=[1, 4] if SIMULATOR else [1, 4, 16, 64],
    ),
    launch=_launch,
)(KERNEL)


@functools.cache
def _multiprocessors():
    """The device's multiprocessors (the simulator has no such attribute: 1)."""
    return getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)


def make_inputs(size, rng):
    """``size`` samples and a 61-tap filter, as ``resample_poly(x, 3, 2)`` hands them over."""
    half_len = 10 * max(UP, DOWN)
    h = UP * rng.standard_normal(2 * half_len + 1).astype(np.float32)
    h = np.concatenate((np.zeros(DOWN - half_len % DOWN, np.float32), h))
    h_trans_flip = _pad_h(h, UP)
    output_len = _output_len(len(h_trans_flip), size, UP, DOWN)
    h_per_phase = len(h_trans_flip) // UP
    padded_len = size + h_per_phase - 1
    x = cuda.to_device(rng.standard_normal(size, dtype=np.float32))
    out = cuda.to_device(np.zeros(output_len, np.float32))
    args = (x, cuda.to_device(h_trans_flip), UP, DOWN, 0, size, h_per_phase, padded_len, out)
    numSM = _multiprocessors()
    return Inputs(args, {"out": out}, (numSM * 20, 512))


def original(inputs, args):
    KERNEL[inputs.launch](*args)


arguments, outputs = every_call, copied_outputs
