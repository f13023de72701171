"""STUMPY's GPU matrix profile (GPU-STOMP): ``_compute_and_update_PI_kernel``, declared with a
26-argument signature and launched once per row of the distance matrix.

Source: STUMPY, https://github.com/TDAmeritrade/stumpy at commit 423c679 (2025-04-07):
stumpy/gpu_stump.py (the kernel, and its launch in ``_gpu_stump``) and stumpy/core.py (the
device function ``_gpu_searchsorted_right``). Copyright 2019 TD Ameritrade; BSD-3-Clause, see
bench/real/NOTICES.md. Our port keeps the kernel's body, its declared signature and its
launch: ``config.STUMPY_THREADS_PER_BLOCK`` (512) threads and ``ceil(w / 512)`` blocks, a first
launch for row 0 that computes no QT, then one launch per row ``i`` of ``range(1, w)``. The
``config`` constant the kernel reads is a module global here.

The inputs: a self-join (``T_B`` is ``T_A``) of a random walk of 2**17 points, m = 128, k = 1,
prepared as ``gpu_stump`` prepares them (sliding means, standard deviations, dot products).
"""

import math

import numpy as np
from numba import cuda

import numbatune as nt
from bench.real import Inputs, copied_outputs
from numbatune.arrays import SIMULATOR

SOURCE = "STUMPY stumpy/gpu_stump.py (BSD-3-Clause)"
KIND = "matrix profile, declared signature, one small launch per row"
SIZES = {"full": 1 << 17, "smoke": 48}
TOLERANCE = {"rtol": 0.0, "atol": 0.0}

STUMPY_THREADS_PER_BLOCK = 512  # config.STUMPY_THREADS_PER_BLOCK
STUMPY_DENOM_THRESHOLD = 1e-14  # config.STUMPY_DENOM_THRESHOLD
WINDOW = 128  # m


@cuda.jit(device=True)
def _gpu_searchsorted_right(a, v, bfs, nlevel):
    n = a.shape[0]
    idx = 0
    for level in range(nlevel):
        if v < a[bfs[idx]]:
            next_idx = 2 * idx + 1
        else:
            next_idx = 2 * idx + 2

        if level == nlevel - 1 or bfs[next_idx] < 0:
            if v < a[bfs[idx]]:
                idx = max(bfs[idx], 0)
            else:
                idx = min(bfs[idx] + 1, n)
            break
        idx = next_idx

    return idx


@cuda.jit(
    "(i8, f8[:], f8[:], i8,  f8[:], f8[:], f8[:], f8[:], f8[:],"
    "f8[:], f8[:], b1[:], b1[:], i8, b1, i8, f8[:, :], f8[:], "
    "f8[:], i8[:, :], i8[:], i8[:], b1, i8[:], i8, i8)"
)
def _compute_and_update_PI_kernel(
    idx,
    T_A,
    T_B,
    m,
    QT_even,
    QT_odd,
    QT_first,
    μ_Q,
    σ_Q,
    M_T,
    Σ_T,
    Q_subseq_isconstant,
    T_subseq_isconstant,
    w,
    ignore_trivial,
    excl_zone,
    profile,
    profile_L,
    profile_R,
    indices,
    indices_L,
    indices_R,
    compute_QT,
    bfs,
    nlevel,
    k,
):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)

    j = idx
    # The name `i` is reserved to be used as an index for `T_A`

    if j % 2 == 0:
        QT_out = QT_even
        QT_in = QT_odd
    else:
        QT_out = QT_odd
        QT_in = QT_even

    for i in range(start, QT_out.shape[0], stride):
        zone_start = max(0, i - excl_zone)
        zone_stop = min(w, i + excl_zone)

        if compute_QT:
            QT_out[i] = QT_in[i - 1] - T_A[i - 1] * T_B[j - 1] + T_A[i + m - 1] * T_B[j + m - 1]

            QT_out[0] = QT_first[j]
        if math.isinf(μ_Q[i]) or math.isinf(M_T[j]):
            p_norm = np.inf
        elif Q_subseq_isconstant[i] and T_subseq_isconstant[j]:
            p_norm = 0
        elif Q_subseq_isconstant[i] or T_subseq_isconstant[j]:
            p_norm = m
        else:
            denom = (σ_Q[i] * Σ_T[j]) * m
            denom = max(denom, STUMPY_DENOM_THRESHOLD)
            ρ = (QT_out[i] - (μ_Q[i] * M_T[j]) * m) / denom
            ρ = min(ρ, 1.0)
            p_norm = 2 * m * (1.0 - ρ)

        if ignore_trivial:
            if j <= zone_stop and j >= zone_start:
                p_norm = np.inf
            if p_norm < profile_L[i] and j < i:
                profile_L[i] = p_norm
                indices_L[i] = j
            if p_norm < profile_R[i] and j > i:
                profile_R[i] = p_norm
                indices_R[i] = j

        if p_norm < profile[i, -1]:
            idx = _gpu_searchsorted_right(profile[i], p_norm, bfs, nlevel)
            for g in range(k - 1, idx, -1):
                profile[i, g] = profile[i, g - 1]
                indices[i, g] = indices[i, g - 1]

            profile[i, idx] = p_norm
            indices[i, idx] = j


def _launch(idx, T_A, T_B, m, QT_even, *rest, STUMPY_THREADS_PER_BLOCK):
    return nt.cdiv(QT_even.shape[0], STUMPY_THREADS_PER_BLOCK), STUMPY_THREADS_PER_BLOCK


TUNED = nt.autotune(
    variants=nt.product(STUMPY_THREADS_PER_BLOCK=[32, 64] if SIMULATOR else [128, 256, 512, 1024]),
    launch=_launch,
)(_compute_and_update_PI_kernel)


def make_inputs(size, rng):
    """A self-join of a random walk of ``size`` points, prepared as ``gpu_stump`` prepares it."""
    m = WINDOW if size > 4 * WINDOW else 8
    T = np.cumsum(rng.standard_normal(size))
    windows = np.lib.stride_tricks.sliding_window_view(T, m)
    w = windows.shape[0]
    μ, σ = windows.mean(axis=1), windows.std(axis=1)
    isconstant = np.ptp(windows, axis=1) == 0
    QT = windows @ T[:m]  # sliding_dot_product(T_B[0:m], T_A); QT_first is the same here
    k = 1
    nlevel = np.floor(np.log2(k) + 1).astype(np.int64)
    T_A, Q_isconstant = cuda.to_device(T), cuda.to_device(isconstant)
    μ_Q, σ_Q = cuda.to_device(μ), cuda.to_device(σ)
    o = {
        "profile": cuda.to_device(np.full((w, k), np.inf)),
        "profile_L": cuda.to_device(np.full(w, np.inf)),
        "profile_R": cuda.to_device(np.full(w, np.inf)),
        "indices": cuda.to_device(np.full((w, k), -1, np.int64)),
        "indices_L": cuda.to_device(np.full(w, -1, np.int64)),
        "indices_R": cuda.to_device(np.full(w, -1, np.int64)),
        "QT_even": cuda.to_device(QT),
        "QT_odd": cuda.to_device(QT),
    }
    bfs = cuda.to_device(np.zeros(1, np.int64))  # _bfs_indices(1, fill_value=-1)
    args = (1, T_A, T_A, m, o["QT_even"], o["QT_odd"], cuda.to_device(QT), μ_Q, σ_Q, μ_Q, σ_Q)
    args += (Q_isconstant, Q_isconstant, w, True, math.ceil(m / 4), o["profile"])
    args += (o["profile_L"], o["profile_R"], o["indices"], o["indices_L"], o["indices_R"])
    args += (True, bfs, nlevel, k)
    return Inputs(args, o, (math.ceil(w / STUMPY_THREADS_PER_BLOCK), STUMPY_THREADS_PER_BLOCK))


def arguments(inputs, call):
    """Call 0 is ``_gpu_stump``'s first launch (row 0, no QT); call c > 0 its launch for row
    1 + (c - 1) % (w - 1)."""
    args, w = inputs.args, inputs.args[13]
    row = 0 if call == 0 else 1 + (call - 1) % (w - 1)
    return (row, *args[1:22], call > 0, *args[23:])


def original(inputs, args):
    _compute_and_update_PI_kernel[inputs.launch](*args)


outputs = copied_outputs
