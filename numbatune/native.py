"""What the launch does in C, through the extension ``numbatune._native`` built with the package:
the driver calls ``cuLaunchKernel``, ``cuEventRecord``, ``cuStreamWaitEvent`` and
``cuEventQuery``, array arguments read through the DLPack C exchange API or their attributes,
the call of a tuned kernel, the packing of its parameters, and the bookkeeping of the order
across streams (:func:`order_type`).

The extension needs a C compiler and ``Python.h`` when numbatune is installed (``setup.py``
stops without them), nothing of CUDA: it loads the driver when imported, and where it cannot,
its ``DRIVER_ERROR`` says why and its driver calls raise, saying so (its array reads still
work). The driver calls release the GIL while the driver runs.

The launch takes ``(function, config, stream, parameters, offsets, context, cooperative)``: the
function, stream and context as integer handles; ``config`` as ``(grid, block)`` or ``(grid,
block, shared_bytes)``, grid and block each an int or a tuple of up to 3 ints; the kernel's
parameters packed in ``parameters`` (bytes) at the offsets listed in ``offsets`` (bytes of
int64), which the C extension hands the driver as one buffer (a cooperative launch, one
pointer per parameter); ``cooperative`` true for a kernel that synchronises its grid
(``cuLaunchCooperativeKernel``). Driver calls return the ``CUresult`` as an int; the launch
returns, launching nothing, :data:`WRONG_CONTEXT` when the calling thread's current context is
not ``context`` (the function's: another device, or a thread that has none yet) and
:data:`EMPTY_LAUNCH` when a grid or block dimension is 0.

Array libraries that publish the DLPack C exchange API (``__dlpack_c_exchange_api__`` on their
array class: torch from 2.10) let C read an array's pointer, shape, strides, dtype and device,
and the library's current stream, in one call for all the arrays of a launch (:func:`dlpack`):
on the H100 machine a 26-argument hit with 18 torch tensors cost about what it costs with numba
arrays this way, against 1.5-1.8 times that through torch's Python API (CHANGELOG.md,
2026-11-24).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from numbatune import _native

Launcher = Callable[[int, tuple, int, bytes, bytes, int, bool], int]

WRONG_CONTEXT = -1
EMPTY_LAUNCH = -2


class Native(NamedTuple):
    """The driver calls: ``launch`` and ``query(event)``, returning the ``CUresult`` as an int,
    and ``record(event, stream)`` and ``wait(stream, event)``, raising numba's
    ``CudaAPIError`` where the driver fails."""

    launch: Launcher
    record: Callable[[int, int], None]
    wait: Callable[[int, int], None]
    query: Callable[[int], int]


class DLPack(NamedTuple):
    """Array reads in C: through the DLPack C exchange API, or by attribute.

    ``api(cls)``: the address of the API of an array class (0 where it has none this extension
    reads). ``describe(api, array)``: ``(device type, device id, ndim, type code, bits,
    lanes)``, or None where the library cannot describe the array. ``reader(source, expected,
    parts, runs, offset=None, key=None)``: the reads of one fast path's arrays of one library:
    ``source`` is the address of its API, or, for arrays read by attribute, ``(names, current
    stream function, dtypes)``: the names of :class:`numbatune.arraykinds.Attributes`, in its
    order, the function that returns the library's current stream object, and the dtype object
    expected of each array (one compared equal is taken too), or, for numba's arrays, ``(name,
    make, tokens)``: the attribute each keeps its memo in (``(token, key part, kernel parameters
    as bytes, allocation)``), the function that makes and keeps one where it is missing, and the
    token each array's memo must carry; one packed :data:`EXPECTED` per array (device type and
    id, ndim, type code, bits, numba's layout letter, structure, whether a read by attribute
    reads the device), per array None or the source of its part of the default key (a
    :class:`numbatune.keys.KeyParts`), and the arrays split in order into runs of consecutive
    kernel parameters (the count of arrays in each); for arrays read through DLPack, ``offset``
    names their method that gives their offset into their allocation, in elements (torch's
    ``storage_offset``), or None; ``key``, where given, lists the default key's elements: an
    array's index (its part), or an index past the arrays' of an item that follows them in the
    tuple read (taken as it is). Its ``read(arrays[, allocations])`` takes a tuple of such
    arrays (and those items) and returns ``(current stream, key, run, run, ..., allocations)``:
    the key (without ``key``, the tuple of the arrays' parts), each run's kernel parameters as
    bytes (8 for each parameter, in the host's order, in the structure asked for), and, where
    ``allocations`` is true, the tuple of where each array's allocation starts (what
    :func:`numbatune.arrays.buffer_of` gives; None where the reader cannot read one: no
    ``offset``, or a read failed), else None; or None where an array is not as expected. A read
    hands out the last read's key parts and bytes again where they are equal.
    """

    api: Callable[[type], int]
    describe: Callable[[int, Any], tuple[int, ...] | None]
    reader: Callable[..., Any]


#: How :class:`DLPack`'s ``reader`` takes what it expects of an array: device type and id, ndim,
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


_NATIVE = Native(_native.launch, _native.record, _native.wait, _native.query)
_DLPACK = DLPack(_native.dlpack_api, _native.describe, _native.Reader)


def native() -> Native:
    """The C extension's driver calls."""
    return _NATIVE


def dlpack() -> DLPack:
    """The C extension's array reads."""
    return _DLPACK


def order_type() -> type:
    """The C extension's stream order (:mod:`numbatune.streams.order`, ``_order.c``)."""
    return _native.Order


def launcher() -> Launcher:
    """The launch of :func:`native`."""
    return _NATIVE.launch
