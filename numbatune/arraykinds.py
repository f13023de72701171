"""The kinds of device array numbatune takes, one entry each: the one place that knows them.

An entry (:class:`ArrayKind`) says how to read an array of its kind (shape, dtype, layout), its
element size, the allocation it lies in, the GPU it is on, why a call refuses one (a torch
tensor in host memory), its library's current stream, how to see it as a numba device array,
and how the generated fast path reads its fields. :func:`kind_of` finds a class's kind with one
dictionary lookup. Adding an array library is adding one entry to :data:`KINDS` (or, from
outside, :func:`register`).
"""

from __future__ import annotations

import enum
import functools
import importlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import astuple, dataclass, replace
from typing import Any

import numpy as np
from numba import cuda

SIMULATOR: bool = bool(cuda.config.ENABLE_CUDASIM)

if SIMULATOR:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as NumbaDeviceArray

    _NUMBA_ARRAYS: tuple[type, ...] = (NumbaDeviceArray,)
else:
    from numba.cuda.cudadrv.devicearray import DeviceNDArray as NumbaDeviceArray
    from numba.cuda.cudadrv.devicearray import ManagedNDArray, MappedNDArray

    #: numba's arrays: in device memory, and in mapped and managed memory (NumPy arrays too).
    _NUMBA_ARRAYS = (NumbaDeviceArray, MappedNDArray, ManagedNDArray)

#: ``(shape, dtype name, layout letter)`` of an array.
Read = tuple[tuple[int, ...], str, str]


class FastRead(enum.Enum):
    """How the generated fast path reads an array kind's fields."""

    #: Once per array object, kept on it (numba-cuda's and numba-cuda-mlir's device arrays,
    #: whose fields do not change).
    MEMO = "memo"
    #: In C: through the library's DLPack C exchange API where it has one, else by the
    #: attributes the kind names (:attr:`ArrayKind.attributes`).
    FIELDS = "fields"
    #: Not at all: launches on such arrays go through numba's launch.
    NONE = "none"


@dataclass(frozen=True)
class CurrentStream:
    """How an array library gives the stream it queues work on now, for one of its arrays."""

    #: The library's function (imported on first use).
    getter: Callable[[], Callable[..., Any]]
    #: The read: ``read(function, array)``.
    read: Callable[[Callable[..., Any], Any], int]

    def of(self, array: Any) -> int:
        """The library's current stream for ``array``."""
        return self.read(self.getter(), array)


@dataclass(frozen=True)
class Attributes:
    """The attributes an array library exposes an array's fields by, which the C extension
    reads (one call for all the arrays of a launch, with no interpreter frame in between):
    ``shape`` and ``strides`` (in bytes) are tuples or lists of ints, ``c_contiguous`` is
    numba's layout test."""

    shape: str
    strides: str
    c_contiguous: str
    dtype: str
    #: The object whose attributes are the data pointer and the device index.
    memory: str
    pointer: str
    device: str
    #: The handle, of the object the library's :class:`CurrentStream` function returns.
    stream_handle: str
    #: The count of dimensions and of elements, which arrays of at most one dimension are read
    #: by (an int costs less to make than a sequence).
    rank: str
    size: str
    #: Of the memory object: the object whose ``pointer`` is the start of the array's allocation
    #: (:attr:`ArrayKind.buffer`).
    allocation: str

    def names(self) -> tuple[str, ...]:
        """The names, in the order the C extension takes them (the fields')."""
        return astuple(self)


def _interface_view(array: Any) -> Any:
    """A numba device array over the memory of an array with ``__cuda_array_interface__``
    (under the simulator, over its host copy)."""
    if SIMULATOR:
        return NumbaDeviceArray(np.asarray(array))
    return cuda.as_cuda_array(array)


@dataclass(frozen=True, eq=False)
class ArrayKind:
    """One kind of device array (compared by identity: each entry is its own kind)."""

    #: A Python identifier: names in messages and in the generated code.
    name: str
    #: Whether values of a class are arrays of this kind.
    claims: Callable[[type], bool]
    read: Callable[[Any], Read]
    itemsize: Callable[[Any], int]
    #: The allocation an array's data lies in: views of one allocation share it.
    buffer: Callable[[Any], Hashable]
    #: The index of the GPU whose memory holds the array; None where any can read it or the
    #: library does not say.
    device: Callable[[Any], int | None]
    #: Why a call refuses the array (``"a torch tensor on cpu"``), or None.
    refusal: Callable[[Any], str | None] = lambda array: None
    #: A numba device array over the array's memory (what clones and trial runs copy).
    view: Callable[[Any], Any] = _interface_view
    #: The library's current stream, where it has one: launches on its arrays with
    #: ``stream=None`` go there, and on another stream wait for it.
    stream: CurrentStream | None = None
    fast: FastRead = FastRead.NONE
    #: For :attr:`FastRead.FIELDS`: whether the fast path checks the array's device even in a
    #: process that sees one GPU (torch's tensors may be in host memory).
    checks_device: bool = False
    #: For :attr:`FastRead.FIELDS`, a library with a :attr:`stream` and no DLPack C exchange
    #: API: the attributes the C extension reads its arrays' fields by, or None (then its
    #: arrays are launched through numba's launch).
    attributes: Attributes | None = None
    #: For a library with the DLPack C exchange API: the name of its arrays' method that gives
    #: their offset into their allocation, in elements, with which the C extension finds
    #: where the allocation starts (:attr:`buffer`); None: found in Python.
    offset_method: str | None = None


_dtype_names: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """NumPy's name for a NumPy or torch dtype (``torch.float32`` -> ``float32``), cached; a
    record dtype's with its fields (``void64[('x', '<f4'), ('y', '<f4')]``: NumPy names every
    record of 8 bytes ``void64``)."""
    name = _dtype_names.get(dtype)
    if name is None:
        if isinstance(dtype, np.dtype):
            text = dtype.name if dtype.fields is None else f"{dtype.name}{dtype.descr}"
        else:
            text = str(dtype).removeprefix("torch.")
        name = _dtype_names[dtype] = text
    return name


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


# -- numba's device arrays ------------------------------------------------------------------


def _read_numba_array(array: Any) -> Read:
    dtype = array.dtype
    if isinstance(array, np.ndarray):  # (numba's mapped and managed arrays: NumPy's flags)
        flags = array.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
    else:
        layout = "C" if array.is_c_contiguous() else "F" if array.is_f_contiguous() else "A"
    return array.shape, _dtype_names.get(dtype) or dtype_name(dtype), layout


def _numba_buffer(array: Any) -> Hashable:
    if SIMULATOR:  # a NumPy array, maybe a view
        data = array._ary
        while data.base is not None:
            data = data.base
        return id(data)
    return _allocation(array)


def _allocation(array: Any) -> Hashable:
    """The allocation a numba-cuda or numba-cuda-mlir device array's data lies in: the device
    pointer of the memory that owns it (another library's array, for a view of one)."""
    owner = array.gpu_data.owner
    base = getattr(owner, "device_pointer_value", None)
    if base is not None:
        return base
    owner_kind = kind_of(type(owner))
    if owner_kind is not None:
        return owner_kind.buffer(owner)
    return array.device_ctypes_pointer.value


def _numba_device(array: Any) -> int | None:
    if SIMULATOR or isinstance(array, np.ndarray):  # (numba's mapped and managed arrays)
        return None
    return int(array.gpu_data.context.device.id)


NUMBA = ArrayKind(
    name="numba",
    claims=lambda cls: issubclass(cls, _NUMBA_ARRAYS),
    read=_read_numba_array,
    itemsize=lambda array: array.dtype.itemsize,
    buffer=_numba_buffer,
    device=_numba_device,
    view=lambda array: array,
    fast=FastRead.MEMO,
)


# -- numba-cuda-mlir's device arrays --------------------------------------------------------

#: The module and name of numba-cuda-mlir's device array class, matched without importing it.
#: The class is a copy of numba-cuda's, with the same fields, so its arrays are read as
#: numba-cuda's are; the fast path keeps what it reads on each array, as for numba-cuda's.
_MLIR_DEVICE_ARRAY = ("numba_cuda_mlir.numba_cuda.cudadrv.devicearray", "DeviceNDArray")

NUMBA_CUDA_MLIR = replace(
    NUMBA,
    name="numba_cuda_mlir",
    claims=lambda cls: (cls.__module__, cls.__name__) == _MLIR_DEVICE_ARRAY,
    buffer=_allocation,
    view=_interface_view,
)


# -- torch tensors --------------------------------------------------------------------------


def _read_torch_tensor(tensor: Any) -> Read:
    dtype = tensor.dtype
    name = _dtype_names.get(dtype) or dtype_name(dtype)
    if tensor.is_contiguous():
        return tensor.shape, name, "C"  # torch.Size is a tuple
    itemsize = tensor.element_size()
    strides = tuple(stride * itemsize for stride in tensor.stride())
    return tensor.shape, name, layout_of(tensor.shape, strides, itemsize)


def _library_function(module: str, path: str) -> Callable[[], Callable[..., Any]]:
    """A getter of the function at ``path`` in ``module``, imported on first use (the library
    need not be installed until one of its arrays is met)."""

    @functools.cache
    def getter() -> Callable[..., Any]:
        found: Any = importlib.import_module(module)
        for name in path.split("."):
            found = getattr(found, name)
        return found

    return getter


TORCH = ArrayKind(
    name="torch",
    claims=lambda cls: (cls.__module__.partition(".")[0], cls.__name__) == ("torch", "Tensor"),
    read=_read_torch_tensor,
    itemsize=lambda tensor: tensor.element_size(),
    buffer=lambda tensor: tensor.data_ptr() - tensor.storage_offset() * tensor.element_size(),
    device=lambda tensor: tensor.get_device() if tensor.is_cuda else None,
    refusal=lambda tensor: None if tensor.is_cuda else f"a torch tensor on {tensor.device}",
    stream=CurrentStream(  # of a device index, as Triton reads it
        _library_function("torch", "_C._cuda_getCurrentRawStream"),
        lambda get, a: get(a.get_device()),
    ),
    fast=FastRead.FIELDS,
    checks_device=True,  # (a tensor in host memory, or on another device, is refused)
    offset_method="storage_offset",
)


# -- CuPy arrays ----------------------------------------------------------------------------


def _read_cupy_array(array: Any) -> Read:
    dtype = array.dtype
    name = _dtype_names.get(dtype) or dtype_name(dtype)
    if array._c_contiguous:
        return array.shape, name, "C"
    return array.shape, name, "F" if array._f_contiguous else "A"


CUPY = ArrayKind(
    name="cupy",
    claims=lambda cls: (cls.__module__.partition(".")[0], cls.__name__) == ("cupy", "ndarray"),
    read=_read_cupy_array,
    itemsize=lambda array: array.dtype.itemsize,
    buffer=lambda array: array.data.mem.ptr,
    device=lambda array: int(array.data.device_id),
    stream=CurrentStream(
        _library_function("cupy", "cuda.get_current_stream"),
        lambda get, a: get().ptr,
    ),
    fast=FastRead.FIELDS,
    # CuPy's extents and strides as lists (``_shape``, ``_strides``: its ndarray's own
    # vectors, which ``shape`` and ``strides`` copy into tuples; ``a.shape = ...`` sets them).
    attributes=Attributes(
        shape="_shape",
        strides="_strides",
        c_contiguous="_c_contiguous",
        dtype="dtype",
        memory="data",
        pointer="ptr",
        device="device_id",
        stream_handle="ptr",
        rank="ndim",
        size="size",
        allocation="mem",
    ),
)


# -- any other object with __cuda_array_interface__ -----------------------------------------


def _read_described(interface: Mapping[str, Any]) -> Read:
    """What a ``__cuda_array_interface__`` describes."""
    dtype = np.dtype(interface["typestr"])
    shape = tuple(interface["shape"])
    return shape, dtype.name, layout_of(shape, interface.get("strides"), dtype.itemsize)


CUDA_ARRAY_INTERFACE = ArrayKind(
    name="cuda_array_interface",
    claims=lambda cls: hasattr(cls, "__cuda_array_interface__"),
    read=lambda array: _read_described(array.__cuda_array_interface__),
    itemsize=lambda array: np.dtype(array.__cuda_array_interface__["typestr"]).itemsize,
    buffer=lambda array: array.__cuda_array_interface__["data"][0],
    device=lambda array: None,  # (the interface does not say)
)


# -- any other object that offers DLPack (and not __cuda_array_interface__) -----------------

#: DLPack's device type of CUDA device memory.
DLPACK_CUDA = 2
#: DLPack's device types of memory a kernel reads: CUDA device memory and managed memory.
_DLPACK_KERNEL_MEMORY = (DLPACK_CUDA, 13)


def _dlpack_interface(array: Any) -> dict[str, Any]:
    """A ``__cuda_array_interface__`` of an array that offers DLPack, from cuda.core's view of
    it (taken with no stream to wait on: only its description is read)."""
    from cuda.core.utils import StridedMemoryView

    view = StridedMemoryView.from_dlpack(array, stream_ptr=-1)
    itemsize = view.dtype.itemsize
    strides = None if view.strides is None else tuple(s * itemsize for s in view.strides)
    return {"shape": tuple(view.shape), "strides": strides, "typestr": view.dtype.str,
            "data": (view.ptr, False), "version": 3}  # fmt: skip


def _dlpack_refusal(array: Any) -> str | None:
    device_type, _ = array.__dlpack_device__()
    if device_type in _DLPACK_KERNEL_MEMORY:
        return None
    return f"a DLPack array of device type {device_type}"


def _dlpack_view(array: Any) -> Any:
    """A numba device array over a DLPack array's memory (under the simulator, whose device
    memory is host memory, NumPy's view of it)."""
    if SIMULATOR:
        return NumbaDeviceArray(np.from_dlpack(array))
    return cuda.from_cuda_array_interface(_dlpack_interface(array), owner=array)


DLPACK = ArrayKind(
    name="dlpack",
    claims=lambda cls: (
        not issubclass(cls, np.ndarray)  # (host arrays are refused)
        and hasattr(cls, "__dlpack__")
        and hasattr(cls, "__dlpack_device__")
    ),
    read=lambda array: _read_described(_dlpack_interface(array)),
    itemsize=lambda array: np.dtype(_dlpack_interface(array)["typestr"]).itemsize,
    buffer=lambda array: _dlpack_interface(array)["data"][0],
    device=lambda array: array.__dlpack_device__()[1],
    refusal=_dlpack_refusal,
    view=_dlpack_view,
)

#: The kinds, in the order they are asked whether they claim a class: the first that does.
KINDS: list[ArrayKind] = [NUMBA, NUMBA_CUDA_MLIR, TORCH, CUPY, CUDA_ARRAY_INTERFACE, DLPACK]

#: Each class met so far, and its kind (None: not an array).
_kinds: dict[type, ArrayKind | None] = {}


def kind_of(cls: type) -> ArrayKind | None:
    """The kind of the arrays of class ``cls``: the first of :data:`KINDS` that claims it, found
    once per class; None for a class of no kind (not an array)."""
    try:
        return _kinds[cls]
    except KeyError:
        found = _kinds[cls] = next((kind for kind in KINDS if kind.claims(cls)), None)
        return found


def register(kind: ArrayKind) -> None:
    """Add an array kind, asked after the kinds known so far and before the generic
    ``__cuda_array_interface__`` and DLPack ones, which stay last.

    Parameters
    ----------
    kind
        The new kind; its ``name`` must be an identifier no other kind has.

    Raises
    ------
    ValueError
        The name is not an identifier, or another kind has it.
    """
    if not kind.name.isidentifier() or any(k.name == kind.name for k in KINDS):
        raise ValueError(f"an array kind needs a new identifier as its name, got {kind.name!r}")
    KINDS.insert(KINDS.index(CUDA_ARRAY_INTERFACE), kind)
    _kinds.clear()
