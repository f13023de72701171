"""Array arguments as numbatune sees them: recognising, describing and cloning them.

An array argument is anything numba can launch a kernel on without copying it to the device:
numba device arrays and every object with ``__cuda_array_interface__`` (CuPy arrays, torch
tensors). Host (NumPy) arrays are refused, because numba would copy them to the device and back
on every launch, the benchmarking launches included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numba import cuda

SIMULATOR: bool = bool(cuda.config.ENABLE_CUDASIM)

if SIMULATOR:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as _NumbaDeviceArray
else:
    from numba.cuda.cudadrv import driver as _driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray as _NumbaDeviceArray

# Allocations are aligned to this many bytes; clones keep an argument's offset modulo it, so
# that a benchmarked kernel sees the same alignment as the caller's.
_ALIGNMENT = 256


class ArrayInfo(NamedTuple):
    """What the default key and error messages need of an array argument."""

    shape: tuple[int, ...]
    dtype: str
    layout: str  # "C", "F" or "A", as numba types the argument


def is_array(value: Any) -> bool:
    """True for a device array numba can launch on (numba, CuPy, torch and other CAI objects)."""
    return isinstance(value, _NumbaDeviceArray) or hasattr(type(value), "__cuda_array_interface__")


def layout_of(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> str:
    """numba's layout letter for an array of this shape and byte strides."""
    if strides is None:
        return "C"
    dims = list(zip(shape, strides, strict=True))

    def dense(order: list[tuple[int, int]]) -> bool:
        expected = itemsize
        for size, stride in order:
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    if dense(dims[::-1]):
        return "C"
    return "F" if dense(dims) else "A"


def _info_of_numba_array(array: Any) -> ArrayInfo:
    layout = "C" if array.is_c_contiguous() else "F" if array.is_f_contiguous() else "A"
    return ArrayInfo(tuple(array.shape), array.dtype.name, layout)


def _info_of_interface(array: Any) -> ArrayInfo:
    interface = array.__cuda_array_interface__
    dtype = np.dtype(interface["typestr"])
    shape = tuple(interface["shape"])
    return ArrayInfo(shape, dtype.name, layout_of(shape, interface.get("strides"), dtype.itemsize))


def _info_of_torch_tensor(tensor: Any) -> ArrayInfo:
    shape = tuple(tensor.shape)
    dtype = str(tensor.dtype)[len("torch.") :]  # torch.float32 -> float32, as NumPy names it
    if tensor.is_contiguous():
        return ArrayInfo(shape, dtype, "C")
    itemsize = tensor.element_size()
    strides = tuple(stride * itemsize for stride in tensor.stride())
    return ArrayInfo(shape, dtype, layout_of(shape, strides, itemsize))


def _info_of_cupy_array(array: Any) -> ArrayInfo:
    flags = array.flags
    layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
    return ArrayInfo(array.shape, array.dtype.name, layout)


def _info_reader(kind: type) -> Callable[[Any], ArrayInfo]:
    """The cheapest reader for arrays of this type: building ``__cuda_array_interface__``
    on every call costs tens of microseconds for torch tensors and CuPy arrays."""
    if issubclass(kind, _NumbaDeviceArray):
        return _info_of_numba_array
    root = kind.__module__.partition(".")[0]
    if root == "torch" and kind.__name__ == "Tensor":
        return _info_of_torch_tensor
    if root == "cupy" and kind.__name__ == "ndarray":
        return _info_of_cupy_array
    return _info_of_interface


_info_readers: dict[type, Callable[[Any], ArrayInfo]] = {}


def info(array: Any) -> ArrayInfo:
    """Shape, dtype name and layout of a device array, read the cheapest way its type allows."""
    kind = type(array)
    reader = _info_readers.get(kind)
    if reader is None:
        reader = _info_readers[kind] = _info_reader(kind)
    return reader(array)


def clone(array: Any, stream: Any = 0) -> Any:
    """A numba device array with the same shape, dtype, strides, alignment and contents.

    The clone is typed by numba exactly like ``array``, so a kernel compiled for one runs on the
    other, and it shares no memory with ``array``. The copy is queued on ``stream``.
    """
    if SIMULATOR:
        host = array.copy_to_host() if isinstance(array, _NumbaDeviceArray) else np.asarray(array)
        return cuda.to_device(np.array(host, order="K", copy=True))
    view = array if isinstance(array, _NumbaDeviceArray) else cuda.as_cuda_array(array)
    itemsize = view.dtype.itemsize
    low = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s > 0)
    span = 0 if view.size == 0 else high - low + itemsize
    source = view.device_ctypes_pointer.value or 0
    offset = (source + low) % _ALIGNMENT
    buffer = cuda.device_array(span + offset, dtype=np.uint8, stream=stream)
    if span:
        destination = buffer.device_ctypes_pointer.value + offset
        _driver.driver.cuMemcpyDtoDAsync(
            destination, source + low, span, _driver._stream_handle(stream)
        )
    return _NumbaDeviceArray(
        view.shape,
        view.strides,
        view.dtype,
        stream=stream,
        gpu_data=buffer.gpu_data.view(offset - low) if span else buffer.gpu_data,
    )
