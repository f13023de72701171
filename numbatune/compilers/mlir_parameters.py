"""numba-cuda-mlir's kernel parameters, which numbatune packs itself: in the fast path's plan
(:func:`parameters`) and, for every other launch and trial runs, here (:func:`launch`).

An array is an MLIR memref descriptor (:class:`~numbatune.compilers.base.ArrayStructure`); a
scalar its value in its type's width; a tuple its items in order. numba-cuda-mlir's own launch
refuses numba-cuda's device arrays, torch tensors and numba-cuda's streams; numbatune's takes
them all (both share the device's primary context). The layout is numba-cuda-mlir 0.6's
(``cext/launcher/kernel.cpp``), so the fast path runs only on :data:`SUPPORTED` versions, and
every launch checks it against the sizes the driver reports.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatune import _native, native
from numbatune.arraykinds import kind_of
from numbatune.compilers import numba_parameters
from numbatune.compilers.base import (
    ArrayParameters,
    ArrayStructure,
    Conversion,
    Parameters,
    ScalarParameters,
    TupleParameters,
)
from numbatune.rawstreams import stream_handle

#: numba-cuda-mlir versions whose kernel parameter layout this module was checked against.
SUPPORTED = ("0.6.",)


@dataclass(frozen=True)
class TuplePacking:
    """A tuple argument's parameters: its items', in order."""

    items: tuple[Packing, ...]


#: How one argument is packed (kept with a compiled kernel: no numba-cuda-mlir type in it).
Packing = ScalarParameters | ArrayParameters | TuplePacking


def parameters(argtype: Any, value: Any) -> Parameters | None:
    """How numba-cuda-mlir passes ``value``, typed ``argtype``, as parameters; None where numbatune
    does not pack it (records, complex numbers, Python ints of 64 unsigned bits, others)."""
    from numba_cuda_mlir.numba_cuda import types

    if isinstance(argtype, types.BaseTuple):
        return TupleParameters(tuple(argtype))
    if type(value) is int and value >= 2**63:
        return None  # typed uint64, smaller ints int64: not by class
    found = packing(argtype)
    return None if isinstance(found, TuplePacking) else found


def packing(argtype: Any) -> Packing | None:
    """How numbatune packs an argument of numba-cuda-mlir's type ``argtype`` (None: it does not)."""
    from numba_cuda_mlir.numba_cuda import types

    if isinstance(argtype, types.Array):
        try:
            itemsize = np.dtype(str(argtype.dtype)).itemsize
        except TypeError:  # records, datetimes and the like
            return None
        return ArrayParameters(
            itemsize, argtype.ndim, argtype.layout, argtype.mutable, argtype.aligned,
            ArrayStructure.MEMREF,
        )  # fmt: skip
    if isinstance(argtype, types.BaseTuple):
        items = [packing(item) for item in argtype]
        return None if None in items else TuplePacking(tuple(items))  # type: ignore[arg-type]
    return numba_parameters.scalar_parameters(argtype, types)


def planned_type(declared: Any, actual: Any) -> Any:
    """The type to plan an argument typed ``actual`` with, for a parameter of the compiled
    overload's type ``declared``; None where numbatune does not convert it: numba-cuda's rules
    (:func:`numbatune.compilers.numba_parameters.planned_type`) over numba-cuda-mlir's types."""
    from numba_cuda_mlir.numba_cuda import types

    return numba_parameters.planned_type(declared, actual, types)


def fields(packings: tuple[Packing | None, ...], args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """Each kernel parameter of ``args``, as ``(struct letter, value)``; a TypeError for an
    argument numbatune does not pack (``None`` in ``packings``), or of another rank."""
    found: list[tuple[str, Any]] = []
    for index, (how, value) in enumerate(zip(packings, args, strict=True)):
        if how is None:
            raise TypeError(
                f"argument {index} ({type(value).__name__}): numbatune does not pass arguments "
                "of its type to numba-cuda-mlir kernels (records, complex numbers and other "
                "types beyond arrays, bools, integers, floats and tuples of them)"
            )
        if isinstance(how, TuplePacking):
            found += fields(how.items, tuple(value))
        elif isinstance(how, ArrayParameters):
            found += _array_fields(how, value)
        else:
            found += [(letter, _converted(value, way)) for letter, way in how.fields]
    return found


def _converted(value: Any, way: Conversion) -> Any:
    if way is Conversion.HALF_BITS:
        return int(np.float16(value).view(np.uint16))
    return value


def _array_fields(how: ArrayParameters, array: Any) -> list[tuple[str, Any]]:
    """A memref descriptor of ``array``, read through ``__cuda_array_interface__`` (numba's,
    CuPy's and torch's arrays, and numba-cuda-mlir's own, have one; of an array that offers
    only DLPack, its kind's view has one)."""
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        kind = kind_of(type(array))
        if kind is None:
            raise TypeError(f"a {type(array).__name__} where the kernel takes an array")
        interface = kind.view(array).__cuda_array_interface__
    pointer, shape = interface["data"][0] or 0, tuple(interface["shape"])
    if len(shape) != how.ndim:
        raise TypeError(f"an array of {len(shape)} dimensions for a kernel taking {how.ndim}")
    strides = interface.get("strides")
    if strides is None:  # C-contiguous
        steps = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    else:
        steps = [stride // how.itemsize for stride in strides]
    return [("Q", pointer), ("Q", pointer), ("q", 0)] + [("q", n) for n in (*shape, *steps)]


def pack(found: list[tuple[str, Any]], layout: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """The parameters packed at the driver's offsets, and the offsets (int64 each), as
    :mod:`numbatune.native`'s launch takes them; a RuntimeError where the sizes the driver
    reports are not the fields'."""
    sizes = [struct.calcsize(letter) for letter, _ in found]
    if sizes != [size for _, size in layout]:
        raise RuntimeError(
            f"numba-cuda-mlir's kernel parameter layout is not the one numbatune packs (driver: "
            f"{[size for _, size in layout]}, numbatune: {sizes})"
        )
    fmt, position = "<", 0
    for (letter, _), (offset, size) in zip(found, layout, strict=True):
        fmt += f"{offset - position}x" * (offset > position) + letter
        position = offset + size
    data = struct.pack(fmt, *(value for _, value in found))
    return data, struct.pack(f"<{len(layout)}q", *(offset for offset, _ in layout))


_layouts: dict[int, list[tuple[int, int]]] = {}


def parameter_layout(function: int) -> list[tuple[int, int]]:
    """(offset, size) of each parameter of a loaded ``CUfunction``, as ``cuFuncGetParamInfo``
    reports them, kept per function; numba's ``CudaAPIError`` where it cannot (an older driver)."""
    layout = _layouts.get(function)
    if layout is None:
        from cuda.bindings import driver

        layout, handle = [], driver.CUfunction(function)
        while True:
            error, offset, size = driver.cuFuncGetParamInfo(handle, len(layout))
            if error == driver.CUresult.CUDA_ERROR_INVALID_VALUE:  # past the last parameter
                break
            if error != driver.CUresult.CUDA_SUCCESS:
                from numba.cuda.cudadrv.driver import CudaAPIError

                raise CudaAPIError(
                    int(error), "the driver cannot report a numba-cuda-mlir kernel's parameter "
                    "layout (cuFuncGetParamInfo needs a CUDA 12.4 driver or later)",
                )  # fmt: skip
            layout.append((int(offset), int(size)))
        _layouts[function] = layout
    return layout


def reported_layout(function: int) -> list[tuple[int, int]] | None:
    """:func:`parameter_layout`, or None where the driver cannot report it (the fast path then
    leaves the kernel to the compiler's launch, which says so)."""
    from numba.cuda.cudadrv.driver import CudaAPIError

    try:
        return parameter_layout(function) or None
    except CudaAPIError:
        return None


def launch(
    function: int,
    packings: tuple[Packing | None, ...],
    cooperative: bool,
    args: tuple[Any, ...],
    config: tuple[Any, ...],
    stream: Any,
) -> None:
    """Launch a loaded kernel ``function`` on ``args`` with ``config`` (grid, block[, shared
    bytes]) on ``stream``, its parameters packed here; a TypeError for an argument numbatune
    does not pass, numba's ``CudaAPIError`` where the driver refuses."""
    from numba import cuda

    context = int(cuda.current_context().handle)  # (numba-cuda's: the device's primary one)
    data, offsets = pack(fields(packings, args), parameter_layout(function))
    handle = stream_handle(stream or 0)
    error = _native.launch(function, config, handle, data, offsets, context, cooperative)
    if error and error != native.EMPTY_LAUNCH:
        from numba.cuda.cudadrv.driver import CudaAPIError

        raise CudaAPIError(error, f"launching a numba-cuda-mlir kernel with {config}")
