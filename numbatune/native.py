"""What the launch does in C, through the extension ``numbatune._native`` built with the package:
the driver calls ``cuLaunchKernel``, ``cuEventRecord``, ``cuStreamWaitEvent`` and
``cuEventQuery``, array arguments read through the DLPack C exchange API (torch's, from 2.10)
or their attributes, in one call for all the arrays of a library (``_native.Reader``),
the default key, the call of a tuned kernel, the packing of its parameters, and the bookkeeping
of the order across streams (``_native.Order``, ``_order.c``) and a fast path's launch once its
arrays are read (``_native.Launcher``, ``_launcher.c``); this module holds the constants its
callers share with it (``_native.c`` documents each function).

The extension needs a C compiler and ``Python.h`` when numbatune is installed (``setup.py``
stops without them), nothing of CUDA: it loads the driver when imported, and where it cannot,
its ``DRIVER_ERROR`` says why and its driver calls raise, saying so (its array reads still
work). The driver calls release the GIL while the driver runs.

Driver calls return the ``CUresult`` as an int; the launch (``_native.launch``, whose arguments
``_native.c`` lists) returns, launching nothing, :data:`WRONG_CONTEXT` when the calling thread's
current context is not the function's (another device, or a thread that has none yet) and
:data:`EMPTY_LAUNCH` when a grid or block dimension is 0.
"""

from __future__ import annotations

import struct

from numbatune import _native

WRONG_CONTEXT = -1
EMPTY_LAUNCH = -2

#: How ``_native.Reader`` takes what it expects of an array: device type and id, ndim,
#: type code, bits, layout letter, the structure of its kernel parameters (an index into
#: :data:`STRUCTURES`), and whether a read by attribute reads its device (DLPack reads always
#: do).
EXPECTED = struct.Struct("=iiBBBBB?2x")
#: The structures a read packs an array's kernel parameters in: numba's (meminfo, parent,
#: size, itemsize, data, shape, byte strides) and a memref descriptor's (data, data, offset 0,
#: shape, strides in elements), as :class:`numbatune.compilers.base.ArrayStructure` names them.
STRUCTURES = ("numba", "memref")


def describe(simulator: bool, fast_launch: bool) -> str:
    """What launches tuned kernels in this process, in one line (``numbatune info``).

    Parameters
    ----------
    simulator
        Whether numba runs its CUDA simulator (then the simulator launches every kernel).
    fast_launch
        The ``fast_launch`` setting (off: numba's own launch).

    Returns
    -------
    str
        The simulator, numba's launch or the C launcher, and why (where the C launcher cannot
        load the driver, why not).
    """
    if simulator:
        return "numba's CUDA simulator: no GPU (the C launcher numbatune._native is for GPUs)"
    if not fast_launch:
        return "numba's launch: the fast_launch setting is off"
    if _native.DRIVER_ERROR is not None:
        return (
            f"C launcher (numbatune._native), which cannot load the driver: {_native.DRIVER_ERROR}"
        )
    return "C launcher (numbatune._native)"
