"""numba-cuda's reduction kernel, the one behind the documented ``@cuda.reduce``:
``gpu_reduce_block_strided``, made by ``_gpu_reduce_factory`` for a binary function, each block
of 128 threads (4 warps) summing a block-strided share of the array into one partial.

Source: numba-cuda, https://github.com/NVIDIA/numba-cuda at commit b18b944:
numba_cuda/numba/cuda/kernels/reduction.py (the factory, its device functions and the launch
in ``Reduce.__call__``). Copyright (c) 2012 Anaconda, Inc., (c) 2024-2025 NVIDIA CORPORATION;
BSD-2-Clause, see bench/real/NOTICES.md. Our port keeps the factory, the kernel's body and the
launch of its first (and, for an array of a multiple of 128 elements, main) kernel:
``kernel[min(size // 128, 64), 128](arr[:size_full], partials[:full_blockct], init, True)``.
``Reduce.__call__`` also allocates ``partials``, slices the arrays and finishes the partials
with a second launch on every call; here the slices are made once and passed to both sides,
and what is timed is that first launch. The grid's cap of 64 blocks (``_WARPSIZE * 2``) is the
tuned value: the kernel's block-strided loop sums the whole array with any grid.

The inputs: the sum (``lambda a, b: a + b``) of 2**27 random float64 values (1 GiB).
"""

import numpy as np
from numba import cuda, float64

import numbatune as nt
from bench.real import Inputs, every_call
from numbatune.arrays import SIMULATOR

SOURCE = "numba-cuda numba/cuda/kernels/reduction.py, cuda.reduce (BSD-2-Clause)"
KIND = "block-strided reduction to per-block partials, warp steps in shared memory"
SIZES = {"full": 1 << 27, "smoke": 512}
TOLERANCE = {"rtol": 1e-9, "atol": 0.0}
SIMULATOR_CANNOT = "numba's simulator has no cuda.syncwarp"

_WARPSIZE = 32
_NUMWARPS = 4
MAX_BLOCKS = [4, 8] if SIMULATOR else [64, 132, 264, 528, 1056, 2112, 4224, 8448]


def _gpu_reduce_factory(fn, nbtype):
    reduce_op = cuda.jit(device=True)(fn)
    inner_sm_size = _WARPSIZE + 1  # plus one to avoid SM collision
    max_blocksize = _NUMWARPS * _WARPSIZE

    @cuda.jit(device=True)
    def inner_warp_reduction(sm_partials, init):
        """
        Compute reduction within a single warp
        """
        tid = cuda.threadIdx.x
        warpid = tid // _WARPSIZE
        laneid = tid % _WARPSIZE

        sm_this = sm_partials[warpid, :]
        sm_this[laneid] = init
        cuda.syncwarp()

        width = _WARPSIZE // 2
        while width:
            if laneid < width:
                old = sm_this[laneid]
                sm_this[laneid] = reduce_op(old, sm_this[laneid + width])
            cuda.syncwarp()
            width //= 2

    @cuda.jit(device=True)
    def device_reduce_full_block(arr, partials, sm_partials):
        tid = cuda.threadIdx.x
        blkid = cuda.blockIdx.x
        blksz = cuda.blockDim.x
        gridsz = cuda.gridDim.x

        # block strided loop to compute the reduction
        start = tid + blksz * blkid
        stop = arr.size
        step = blksz * gridsz

        # load first value
        tmp = arr[start]
        # loop over all values in block-stride
        for i in range(start + step, stop, step):
            tmp = reduce_op(tmp, arr[i])

        cuda.syncthreads()
        # inner-warp reduction
        inner_warp_reduction(sm_partials, tmp)

        cuda.syncthreads()
        # at this point, only the first slot for each warp in tsm_partials
        # is valid.

        # finish up block reduction
        # warning: this is assuming 4 warps.
        # assert numwarps == 4
        if tid < 2:
            sm_partials[tid, 0] = reduce_op(sm_partials[tid, 0], sm_partials[tid + 2, 0])
            cuda.syncwarp()
        if tid == 0:
            partials[blkid] = reduce_op(sm_partials[0, 0], sm_partials[1, 0])

    @cuda.jit(device=True)
    def device_reduce_partial_block(arr, partials, sm_partials):
        tid = cuda.threadIdx.x
        blkid = cuda.blockIdx.x
        blksz = cuda.blockDim.x
        warpid = tid // _WARPSIZE
        laneid = tid % _WARPSIZE

        size = arr.size
        # load first value
        tid = cuda.threadIdx.x
        value = arr[tid]
        sm_partials[warpid, laneid] = value

        cuda.syncthreads()

        if (warpid + 1) * _WARPSIZE < size:
            # fully populated warps
            inner_warp_reduction(sm_partials, value)
        else:
            # partially populated warps
            # NOTE: this uses a very inefficient sequential algorithm
            if laneid == 0:
                sm_this = sm_partials[warpid, :]
                base = warpid * _WARPSIZE
                for i in range(1, size - base):
                    sm_this[0] = reduce_op(sm_this[0], sm_this[i])

        cuda.syncthreads()
        # finish up
        if tid == 0:
            num_active_warps = (blksz + _WARPSIZE - 1) // _WARPSIZE

            result = sm_partials[0, 0]
            for i in range(1, num_active_warps):
                result = reduce_op(result, sm_partials[i, 0])

            partials[blkid] = result

    def gpu_reduce_block_strided(arr, partials, init, use_init):
        tid = cuda.threadIdx.x

        sm_partials = cuda.shared.array((_NUMWARPS, inner_sm_size), dtype=nbtype)
        if cuda.blockDim.x == max_blocksize:
            device_reduce_full_block(arr, partials, sm_partials)
        else:
            device_reduce_partial_block(arr, partials, sm_partials)
        # deal with the initializer
        if use_init and tid == 0 and cuda.blockIdx.x == 0:
            partials[0] = reduce_op(partials[0], init)

    return cuda.jit(gpu_reduce_block_strided)


def sum_reduce(a, b):
    return a + b


KERNEL = _gpu_reduce_factory(sum_reduce, float64)


def _launch(arr, partials, init, use_init, *, MAX_BLOCKS):
    blocksize = _NUMWARPS * _WARPSIZE
    return min(arr.size // blocksize, MAX_BLOCKS), blocksize


TUNED = nt.autotune(variants=nt.product(MAX_BLOCKS=MAX_BLOCKS), launch=_launch)(KERNEL)


def make_inputs(size, rng):
    """``size`` values (a multiple of 128), and room for the partials of the largest grid."""
    arr = cuda.to_device(rng.random(size))
    init = arr.dtype.type(0)
    blocksize = _NUMWARPS * _WARPSIZE
    size_full = (arr.size // blocksize) * blocksize
    full_blockct = min(size_full // blocksize, _WARPSIZE * 2)
    partials = cuda.to_device(np.zeros(max(MAX_BLOCKS), arr.dtype))
    # The same slices on both sides: the tuned kernel's partials hold up to max(MAX_BLOCKS).
    args = (arr[:size_full], partials, init, True)
    return Inputs(args, {"partials": partials}, (full_blockct, blocksize))


def original(inputs, args):
    KERNEL[inputs.launch](*args)


def outputs(inputs):
    """The sum of the partials (the grids differ: the partials do too, their sum does not)."""
    return {"sum": np.array([inputs.outputs["partials"].copy_to_host().sum()])}


arguments = every_call
