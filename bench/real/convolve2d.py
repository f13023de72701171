"""cuSignal's 2-D convolution (``convolve2d``, an image filter): ``_numba_convolve_2d``,
compiled for a declared signature with fastmath, one thread per output pixel.

Source: cuSignal, https://github.com/rapidsai/cusignal at commit 2992a0f (2020-05-08, the
last version with Numba kernels): python/cusignal/convolution/_convolution_cuda.py (the kernel,
``_numba_convolve_2d_signature`` and the launch in ``_convolve2d_gpu``) and
python/cusignal/utils/compile_kernels.py (``cuda.jit(sig, fastmath=True)``). Copyright (c)
2019-2020, NVIDIA CORPORATION; Apache License 2.0, see bench/real/NOTICES.md. Changes:
``cp.int32`` (CuPy's name for NumPy's int32) is written ``np.int32``; the input is padded with
NumPy instead of CuPy; the launch uses the default stream (cuSignal passes its CuPy stream, by
default the null stream). The launch is cuSignal's: blocks of 16 x 16 threads.

The inputs: ``convolve2d(image, kernel, mode="same", boundary="fill")`` of an 8192 x 8192
float32 image with a 5 x 5 kernel (odd and square: ``pick`` 1), random values.
"""

import numpy as np
from numba import cuda, float32, int64, void

import numbatune as nt
from bench.real import Inputs, copied_outputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "cuSignal python/cusignal/convolution/_convolution_cuda.py (Apache-2.0)"
KIND = "2-D image filter, declared signature, fastmath, 2-D blocks"
SIZES = {"full": 8192, "smoke": 12}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
FILTER = 5  # the kernel's width and height


def _iDivUp(a, b):
    return (a + b - 1) // b


def _numba_convolve_2d(inp, inpW, inpH, kernel, S0, S1, out, outW, outH, pick):
    y, x = cuda.grid(2)

    if pick != 3:  # non-square
        i = np.int32(x + S0)
    else:
        i = np.int32(x + S1)
    j = np.int32(y + S0)

    oPixelPos = (x, y)
    if (x < outH) and (y < outW):
        temp: out.dtype = 0

        if pick == 1:  # odd
            for k in range(np.int32(-S0), np.int32(S0 + 1)):
                for l in range(np.int32(-S0), np.int32(S0 + 1)):
                    iPixelPos = (np.int32(i + k), np.int32(j + l))
                    coefPos = (np.int32(-k + S0), np.int32(-l + S0))
                    temp += inp[iPixelPos] * kernel[coefPos]

        elif pick == 2:  # even
            for k in range(np.int32(-S0), np.int32(S0)):
                for l in range(np.int32(-S0), np.int32(S0)):
                    iPixelPos = (np.int32(i + k), np.int32(j + l))
                    coefPos = (
                        np.int32(np.int32(-k + S0) - 1),
                        np.int32(np.int32(-l + S0) - 1),
                    )
                    temp += inp[iPixelPos] * kernel[coefPos]

        else:  # non-squares
            for k in range(np.int32(S0)):
                for l in range(np.int32(S1)):
                    iPixelPos = (
                        np.int32(np.int32(i + k) - S1),
                        np.int32(np.int32(j + l) - S0),
                    )
                    coefPos = (
                        np.int32(np.int32(-k + S0) - 1),
                        np.int32(np.int32(-l + S1) - 1),
                    )
                    temp += inp[iPixelPos] * kernel[coefPos]

        out[oPixelPos] = temp


def _numba_convolve_2d_signature(ty):
    return void(
        ty[:, :],  # inp
        int64,  # inpW
        int64,  # inpH
        ty[:, :],  # kernel
        int64,  # S0
        int64,  # S1 - only used by non-squares
        ty[:, :],  # out
        int64,  # outW
        int64,  # outH
        int64,  # pick
    )


KERNEL = cuda.jit(_numba_convolve_2d_signature(float32), fastmath=True)(_numba_convolve_2d)


def _launch(inp, inpW, inpH, kernel, S0, S1, out, outW, outH, pick, *, BX, BY):
    return (_iDivUp(out.shape[1], BX), _iDivUp(out.shape[0], BY)), (BX, BY)


TUNED = nt.autotune(
    variants=nt.product(
        BX=[8, 16] if SIMULATOR else [16, 32, 64, 128],
        BY=[2, 4] if SIMULATOR else [1, 2, 4, 8, 16],
        where=lambda BX, BY: SIMULATOR or 64 <= BX * BY <= 1024,
    ),
    launch=_launch,
)(KERNEL)


def make_inputs(size, rng):
    """A ``size`` x ``size`` image and a 5 x 5 kernel, as ``_convolve2d_gpu`` hands them over
    for mode "same" and boundary "fill" (fill value 0)."""
    S = np.zeros(2, dtype=int)
    pick = 1  # a square kernel of odd width
    S[0] = (FILTER - 1) // 2
    P = S[0]
    image = rng.standard_normal((size, size), dtype=np.float32)
    inp = np.pad(image, ((P, P), (P, P)), "constant", constant_values=0)
    out = cuda.to_device(np.zeros((size, size), np.float32))
    d_kernel = cuda.to_device(rng.standard_normal((FILTER, FILTER), dtype=np.float32))
    paddedW, paddedH = inp.shape[1], inp.shape[0]
    outW, outH = out.shape[1], out.shape[0]
    args = (cuda.to_device(inp), paddedW, paddedH, d_kernel, S[0], S[1], out, outW, outH, pick)
    threadsperblock = (16, 16)
    blockspergrid = (
        _iDivUp(out.shape[1], threadsperblock[0]),
        _iDivUp(out.shape[0], threadsperblock[1]),
    )
    return Inputs(args, {"out": out}, (blockspergrid, threadsperblock))


def original(inputs, args):
    KERNEL[inputs.launch](*args)


arguments, outputs = every_call, copied_outputs
