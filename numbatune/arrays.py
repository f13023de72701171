"""Array arguments as numbatune sees them: recognising, describing and cloning them.

An array argument is anything numba can launch a kernel on without copying it to the device:
numba device arrays and every object with ``__cuda_array_interface__`` (CuPy arrays, torch
tensors). Host (NumPy) arrays are refused, because numba would copy them to the device and back
on every launch, the benchmarking launches included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
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
    return read(value) is not None


def info(array: Any) -> ArrayInfo:
    """Shape, dtype name and layout of a device array, read the cheapest way its type allows."""
    found = read(array)
    if found is None:
        raise TypeError(f"not a device array: {array!r}")
    return ArrayInfo(*found)


def read(value: Any) -> tuple[tuple[int, ...], str, str] | None:
    """``(shape, dtype name, layout)`` of a device array, or None for anything else.

    This runs on every call of a tuned kernel, so each class gets its own reader, found with
    one dictionary lookup: building ``__cuda_array_interface__`` costs tens of microseconds
    for torch tensors and CuPy arrays.
    """
    return (_readers.get(type(value)) or reader_of(type(value)))(value)


def nbytes(array: Any) -> int:
    """Bytes of the elements of a device array (its size times its item size)."""
    shape = read(array)[0]
    if library_of(type(array)) == "torch":
        itemsize = array.element_size()
    elif hasattr(array, "dtype") and isinstance(array.dtype, np.dtype):
        itemsize = array.dtype.itemsize
    else:
        itemsize = np.dtype(array.__cuda_array_interface__["typestr"]).itemsize
    return math.prod(shape) * itemsize


def library_of(kind: type) -> str | None:
    """``"numba"``, ``"torch"`` or ``"cupy"`` for those libraries' array classes, else None."""
    if issubclass(kind, _NumbaDeviceArray):
        return "numba"
    root = kind.__module__.partition(".")[0]
    if (root, kind.__name__) in (("torch", "Tensor"), ("cupy", "ndarray")):
        return root
    return None


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


_dtype_names: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """NumPy's name for a NumPy or torch dtype (``torch.float32`` -> ``float32``), cached."""
    name = _dtype_names.get(dtype)
    if name is None:
        text = dtype.name if isinstance(dtype, np.dtype) else str(dtype).removeprefix("torch.")
        name = _dtype_names[dtype] = text
    return name


def _read_numba_array(array: Any) -> tuple[tuple[int, ...], str, str]:
    dtype = array.dtype
    layout = "C" if array.is_c_contiguous() else "F" if array.is_f_contiguous() else "A"
    return array.shape, _dtype_names.get(dtype) or dtype_name(dtype), layout


def _read_torch_tensor(tensor: Any) -> tuple[tuple[int, ...], str, str]:
    dtype = tensor.dtype
    name = _dtype_names.get(dtype) or dtype_name(dtype)
    if tensor.is_contiguous():
        return tensor.shape, name, "C"  # torch.Size is a tuple
    itemsize = tensor.element_size()
    strides = tuple(stride * itemsize for stride in tensor.stride())
    return tensor.shape, name, layout_of(tensor.shape, strides, itemsize)


def _read_cupy_array(array: Any) -> tuple[tuple[int, ...], str, str]:
    dtype = array.dtype
    name = _dtype_names.get(dtype) or dtype_name(dtype)
    if array._c_contiguous:
        return array.shape, name, "C"
    return array.shape, name, "F" if array._f_contiguous else "A"


def _read_interface(array: Any) -> tuple[tuple[int, ...], str, str]:
    interface = array.__cuda_array_interface__
    dtype = np.dtype(interface["typestr"])
    shape = tuple(interface["shape"])
    return shape, dtype.name, layout_of(shape, interface.get("strides"), dtype.itemsize)


def _not_an_array(value: Any) -> None:
    return None


Reader = Callable[[Any], tuple[tuple[int, ...], str, str] | None]

_LIBRARY_READERS: dict[str, Reader] = {
    "numba": _read_numba_array,
    "torch": _read_torch_tensor,
    "cupy": _read_cupy_array,
}


def reader_of(kind: type) -> Reader:
    """The function :func:`read` uses for values of class ``kind``."""
    reader = _readers.get(kind)
    if reader is None:
        library = library_of(kind)
        if library is not None:
            reader = _LIBRARY_READERS[library]
        elif hasattr(kind, "__cuda_array_interface__"):
            reader = _read_interface
        else:
            reader = _not_an_array
        _readers[kind] = reader
    return reader


_readers: dict[type, Reader] = {}  # each class's reader, filled by reader_of


def restorer(
    clones: tuple[Any, ...], originals: tuple[Any, ...], stream: Any = 0
) -> Callable[[], None]:
    """A function that queues, on ``stream``, copies of ``originals`` (clones made by
    :func:`clone_arguments`, or None for arguments to leave) over ``clones``."""
    pairs = [(c, o) for c, o in zip(clones, originals, strict=True) if o is not None]
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
    copy, handle = _driver.driver.cuMemcpyDtoDAsync, _driver._stream_handle(stream)

    def restore() -> None:
        # ``pairs`` stays referenced here: the arrays must outlive the copies of their memory.
        for destination, source, span in copies if pairs else ():
            copy(destination, source, span, handle)

    return restore


def _extent(view: Any) -> tuple[int, int]:
    """The offset of a view's lowest byte from its data pointer (<= 0) and its span in bytes."""
    itemsize = view.dtype.itemsize
    low = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(view.shape, view.strides, strict=True) if s > 0)
    return low, 0 if view.size == 0 else high - low + itemsize


def clone_arguments(args: tuple[Any, ...], stream: Any = 0) -> tuple[Any, ...]:
    """The arguments with every array replaced by a :func:`clone` of it."""
    return tuple(clone(a, stream) if is_array(a) else a for a in args)


def device_view(array: Any) -> Any:
    """A numba device array over ``array``'s memory (``array`` itself when it is one)."""
    return array if isinstance(array, _NumbaDeviceArray) else cuda.as_cuda_array(array)


def clone(array: Any, stream: Any = 0) -> Any:
    """A numba device array with the same shape, dtype, strides, alignment and contents.

    The clone is typed by numba exactly like ``array``, so a kernel compiled for one runs on the
    other, and it shares no memory with ``array``. The copy is queued on ``stream``.
    """
    if SIMULATOR:
        host = array.copy_to_host() if isinstance(array, _NumbaDeviceArray) else np.asarray(array)
        return cuda.to_device(np.array(host, order="K", copy=True))
    view = device_view(array)
    low, span = _extent(view)
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
        return _NumbaDeviceArray(view)
    base = cuda.to_device(flat).gpu_data
    data = base.view(first) if first else base
    return _NumbaDeviceArray(host.shape, strides, host.dtype, gpu_data=data)


def buffer_of(array: Any) -> Hashable:
    """The allocation an array's data lies in: views of one allocation share it."""
    library = library_of(type(array))
    if library == "torch":
        return array.data_ptr() - array.storage_offset() * array.element_size()
    if library == "cupy":
        return array.data.mem.ptr
    if library == "numba" and not SIMULATOR:
        owner = array.gpu_data.owner
        base = getattr(owner, "device_pointer_value", None)
        if base is not None:
            return base
        if library_of(type(owner)) is not None:
            return buffer_of(owner)
        return array.device_ctypes_pointer.value
    if library == "numba":  # the simulator's: a NumPy array, maybe a view
        data = array._ary
        while data.base is not None:
            data = data.base
        return id(data)
    return array.__cuda_array_interface__["data"][0]
