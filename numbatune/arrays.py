"""Array arguments as numbatune sees them: recognising, describing and cloning them.

An array argument is anything numba can launch a kernel on without copying it to the device:
numba device arrays and every object with ``__cuda_array_interface__`` (CuPy arrays, torch
tensors): the kinds :mod:`numbatune.arraykinds` knows, which says how each is read. Host (NumPy)
arrays are refused, because numba would copy them to the device and back on every launch, the
benchmarking launches included. A call's arguments are read once (:class:`Arguments`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

from numbatune.arraykinds import (
    SIMULATOR,
    ArrayKind,
    NumbaDeviceArray,
    Read,
    kind_of,
)
from numbatune.rawstreams import stream_handle

if not SIMULATOR:
    from numba.cuda.cudadrv import driver as _driver

# Allocations are aligned to this many bytes; clones keep an argument's offset modulo it, so
# that a benchmarked kernel sees the same alignment as the caller's.
_ALIGNMENT = 256


def is_array(value: Any) -> bool:
    """True for a device array numba can launch on (numba, CuPy, torch and other CAI objects)."""
    return kind_of(type(value)) is not None


def read(value: Any) -> Read | None:
    """``(shape, dtype name, layout)`` of a device array, or None for anything else, as its
    kind reads it (building ``__cuda_array_interface__`` costs tens of microseconds for torch
    tensors and CuPy arrays)."""
    kind = kind_of(type(value))
    return None if kind is None else kind.read(value)


def nbytes(array: Any) -> int:
    """Bytes of the elements of a device array (its size times its item size)."""
    kind = _kind(array)
    return math.prod(kind.read(array)[0]) * kind.itemsize(array)


def buffer_of(array: Any) -> Hashable:
    """The allocation an array's data lies in: views of one allocation share it."""
    return _kind(array).buffer(array)


def _kind(array: Any) -> ArrayKind:
    kind = kind_of(type(array))
    if kind is None:
        raise TypeError(f"not a device array: {array!r}")
    return kind


@dataclass(frozen=True)
class ArrayView:
    """An array argument as read once: its kind and what its reader gives."""

    kind: ArrayKind
    shape: tuple[int, ...]
    dtype: str
    layout: str

    @property
    def record(self) -> bool:
        """Whether its elements may be records (a NumPy void dtype)."""
        return self.dtype.startswith("void")


@dataclass(frozen=True)
class Arguments:
    """A call's arguments, each array among them read once (:meth:`read`)."""

    values: tuple[Any, ...]
    #: Each argument's view; None for what is not an array.
    views: tuple[ArrayView | None, ...]

    @classmethod
    def read(cls, values: tuple[Any, ...]) -> Arguments:
        """The call's arguments ``values``, with each one's kind and fields read."""
        views = []
        for value in values:
            kind = kind_of(type(value))
            views.append(None if kind is None else ArrayView(kind, *kind.read(value)))
        return cls(values, tuple(views))

    @property
    def arrays(self) -> tuple[Any, ...]:
        """The arrays among the arguments."""
        return tuple(v for v, view in zip(self.values, self.views, strict=True) if view)

    def clone(self, stream: Any = 0) -> tuple[Any, ...]:
        """The arguments, each as :func:`clone_value` makes it."""
        return tuple(clone_value(v, stream) for v in self.values)


def with_arrays_as(value: Any, entry: Callable[[Any], Any], named: bool = True) -> Any:
    """``value`` with each array in it (``value`` itself, or the arrays of tuples at any depth)
    replaced by what ``entry`` makes of it. A named tuple stays one of its class (numba reads
    its fields by name), unless not ``named``: then a plain tuple (for a worker that may not
    import the user's class, and launches by the kernel's types)."""
    if isinstance(value, tuple):
        items = [with_arrays_as(item, entry, named) for item in value]
        return type(value)(*items) if named and hasattr(value, "_fields") else tuple(items)
    return entry(value) if is_array(value) else value


def arrays_in(value: Any) -> list[Any]:
    """The arrays in ``value`` (itself, or in tuples at any depth), in order."""
    if isinstance(value, tuple):
        return [array for item in value for array in arrays_in(item)]
    return [value] if is_array(value) else []


def clone_value(value: Any, stream: Any = 0) -> Any:
    """``value`` with every array in it replaced by a :func:`clone` of it
    (:func:`with_arrays_as`)."""
    return with_arrays_as(value, lambda array: clone(array, stream))


def restorer(
    clones: tuple[Any, ...], originals: tuple[Any, ...], stream: Any = 0
) -> Callable[[], None]:
    """A function that queues, on ``stream``, copies of ``originals`` (made by
    :func:`clone_value`, or None for arguments to leave) over the arrays of ``clones``."""
    pairs = [pair for c, o in zip(clones, originals, strict=True) for pair in _array_pairs(c, o)]
    if SIMULATOR:

        def restore() -> None:
            for clone_, original in pairs:
                clone_._ary[...] = original._ary

        return restore
    copies = []
    for clone_, original in pairs:
        low, span = _extent(clone_)
        if span:
            copies.append((clone_.device_ctypes_pointer.value + low,
                           original.device_ctypes_pointer.value + low, span))  # fmt: skip
    copy, handle = _driver.driver.cuMemcpyDtoDAsync, stream_handle(stream)

    def restore() -> None:
        # ``pairs`` stays referenced here: the arrays must outlive the copies of their memory.
        for destination, source, span in copies if pairs else ():
            copy(destination, source, span, handle)

    return restore


def _array_pairs(clone_: Any, original: Any) -> list[tuple[Any, Any]]:
    """The (clone, original) pairs of arrays in ``original`` (an array, a tuple of values, a
    value that holds none, or None) and in ``clone_``, which has its shape."""
    if isinstance(original, tuple):
        return [p for c, o in zip(clone_, original, strict=True) for p in _array_pairs(c, o)]
    return [(clone_, original)] if is_array(original) else []


def _extent(view: Any) -> tuple[int, int]:
    """The offset of a view's lowest byte from its data pointer (<= 0) and its span in bytes."""
    itemsize = view.dtype.itemsize
    low = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s > 0)
    return low, 0 if view.size == 0 else high - low + itemsize


def clone_arguments(args: tuple[Any, ...], stream: Any = 0) -> tuple[Any, ...]:
    """The arguments with every array replaced by a :func:`clone` of it."""
    return Arguments.read(args).clone(stream)


def device_view(array: Any) -> Any:
    """A numba device array over ``array``'s memory (``array`` itself when it is one)."""
    return _kind(array).view(array)


def clone(array: Any, stream: Any = 0) -> Any:
    """A numba device array with the same shape, dtype, strides, alignment and contents, typed
    by numba as ``array`` is and sharing no memory with it; the copy is queued on ``stream``.
    (Under the simulator, where no kernel is compiled for a layout, a contiguous copy.)"""
    if SIMULATOR:
        host = device_view(array).copy_to_host()
        return cuda.to_device(np.array(host, order="K", copy=True))
    view = device_view(array)
    low, span = _extent(view)
    source = view.device_ctypes_pointer.value or 0
    offset = (source + low) % _ALIGNMENT
    buffer = cuda.device_array(span + offset, dtype=np.uint8, stream=stream)
    if span:
        destination = buffer.device_ctypes_pointer.value + offset
        _driver.driver.cuMemcpyDtoDAsync(destination, source + low, span, stream_handle(stream))
    return NumbaDeviceArray(
        view.shape,
        view.strides,
        view.dtype,
        stream=stream,
        gpu_data=buffer.gpu_data.view(offset - low) if span else buffer.gpu_data,
    )


def strides(array: Any) -> tuple[int, ...]:
    """A device array's strides in bytes."""
    return tuple(int(s) for s in device_view(array).strides)


def laid_out(host: np.ndarray, strides: tuple[int, ...]) -> Any:
    """A numba device array holding ``host``'s values with the given byte strides (multiples
    of the item size): a contiguous array, a strided view, a reversed one (negative strides)
    or a broadcast one (zero strides: the elements that share memory hold one of the values)."""
    itemsize = host.dtype.itemsize
    if strides == tuple(np.ascontiguousarray(host).strides):
        return cuda.to_device(np.ascontiguousarray(host))
    if strides == tuple(np.asfortranarray(host).strides):
        return cuda.to_device(np.asfortranarray(host))
    spans = [max(n - 1, 0) * s for n, s in zip(host.shape, strides, strict=True)]
    first = -sum(span for span in spans if span < 0)  # bytes from the lowest to element 0
    flat = np.zeros(1 + sum(abs(span) for span in spans) // itemsize, host.dtype)
    view = np.lib.stride_tricks.as_strided(flat[first // itemsize :], host.shape, strides)
    view[...] = host
    if SIMULATOR:
        return NumbaDeviceArray(view)
    base = cuda.to_device(flat).gpu_data
    data = base.view(first) if first else base
    return NumbaDeviceArray(host.shape, strides, host.dtype, gpu_data=data)
