"""What the launch does in C, through the extension ``numbatune._native`` built with the package:
the driver calls ``cuLaunchKernel``, ``cuEventRecord``, ``cuStreamWaitEvent`` and
``cuEventQuery``, array arguments read through the DLPack C exchange API, and the bookkeeping of
the order across streams (:func:`order_type`).

cuda-bindings' ``cuLaunchKernel`` costs about 5 us per call on the H100 machine, half of it in
converting arguments; the C extension in ``_native.c`` makes the same call for about half
of that. It is an optional extension (``setup.py``): it needs a C compiler and ``Python.h`` when
numbatune is installed, nothing of CUDA (it loads the driver when imported). Where it was not
built, or cannot load the driver, the driver calls go through cuda-bindings, with the same
signature and results, and :func:`route` says why (``numbatune info`` shows it).

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

import ctypes
import enum
import importlib
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

logger = logging.getLogger("numbatune")

Launcher = Callable[[int, tuple, int, bytes, bytes, int, bool], int]

WRONG_CONTEXT = -1
EMPTY_LAUNCH = -2

#: Why the C extension is absent where it was not built with the package.
NOT_BUILT = (
    "the C extension numbatune._native was not built when numbatune was installed (no C "
    "compiler or Python.h there); reinstall numbatune where one is"
)


@dataclass(frozen=True)
class Unavailable:
    """Why the C extension cannot be imported."""

    reason: str


def _import_extension() -> ModuleType | Unavailable:
    try:
        return importlib.import_module("numbatune._native")
    except ModuleNotFoundError:
        return Unavailable(NOT_BUILT)
    except ImportError as error:  # built, but for another Python or system
        return Unavailable(f"the C extension numbatune._native cannot be loaded: {error}")


def _launch_with_bindings(
    function: int,
    config: tuple,
    stream: int,
    parameters: bytes,
    offsets: bytes,
    context: int,
    cooperative: bool,
) -> int:
    from cuda.bindings import driver

    error, current = driver.cuCtxGetCurrent()
    if error or int(current) != context:
        return WRONG_CONTEXT
    grid, block, *shared = config
    base = ctypes.cast(ctypes.c_char_p(parameters), ctypes.c_void_p).value or 0
    count = len(offsets) // 8
    pointers = (ctypes.c_void_p * max(count, 1))(
        *(base + offset for offset in struct.unpack(f"<{count}q", offsets))
    )
    gx, gy, gz = _dim3(grid)
    bx, by, bz = _dim3(block)
    if 0 in (gx, gy, gz, bx, by, bz):
        return EMPTY_LAUNCH
    shared_bytes = shared[0] if shared else 0
    if cooperative:
        (error,) = driver.cuLaunchCooperativeKernel(
            driver.CUfunction(function), gx, gy, gz, bx, by, bz, shared_bytes, stream,
            ctypes.addressof(pointers),
        )  # fmt: skip
    else:
        (error,) = driver.cuLaunchKernel(
            driver.CUfunction(function), gx, gy, gz, bx, by, bz, shared_bytes, stream,
            ctypes.addressof(pointers), 0,
        )  # fmt: skip
    return int(error)


def _dim3(value: object) -> tuple[int, int, int]:
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not 1 <= len(values) <= 3:
        raise ValueError("grid and block take 1 to 3 dimensions")
    return tuple(int(v) for v in (*values, 1, 1)[:3])


def _record_with_bindings(event: int, stream: int) -> None:
    from cuda.bindings import driver

    _raise_for(
        driver.cuEventRecord(driver.CUevent(event), driver.CUstream(stream))[0], "cuEventRecord"
    )


def _wait_with_bindings(stream: int, event: int) -> None:
    from cuda.bindings import driver

    _raise_for(
        driver.cuStreamWaitEvent(driver.CUstream(stream), driver.CUevent(event), 0)[0],
        "cuStreamWaitEvent",
    )


def _raise_for(error: Any, call: str) -> None:
    """numba's CudaAPIError for a failed driver call, as the C extension raises it."""
    if int(error):
        from numba.cuda.cudadrv.driver import CudaAPIError

        raise CudaAPIError(int(error), f"{call} failed")


def _query_with_bindings(event: int) -> int:
    from cuda.bindings import driver

    return int(driver.cuEventQuery(driver.CUevent(event))[0])


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
    reads). ``describe(api, array)``: ``(device type, device id, ndim, type code, bits, lanes)``,
    or None where the library cannot describe the array. ``reader(source, expected, parts,
    runs, offset=None)``: the reads of one fast path's arrays of one library: ``source`` is the
    address of its API, or, for arrays read by attribute, ``(names, current stream function,
    dtypes)``: the names of :class:`numbatune.arraykinds.Attributes`, in its order, the
    function that returns the library's current stream object, and the dtype object expected
    of each array (one compared equal is taken too), or, for numba's arrays, ``(name, make,
    tokens)``: the attribute each keeps its memo in (``(token, key part, kernel parameters as
    bytes, allocation)``), the function that makes and keeps one where it is missing, and the
    token each array's memo must carry; one packed :data:`EXPECTED` per array
    (device type and id, ndim, type code, bits, numba's layout letter, structure, whether a
    read by attribute reads the device), per array None or the source of its part of the
    default key (a :class:`numbatune.keys.KeyParts`' ``parts`` and ``make``), and the arrays
    split in order into runs of consecutive kernel parameters (the count of arrays in each);
    for arrays read through DLPack, ``offset`` names their method that gives their offset into their
    allocation, in elements (torch's ``storage_offset``), or None. Its ``read(arrays[,
    allocations])`` takes a tuple of such arrays and returns ``(current stream, key, run, run,
    ..., allocations)``: the tuple of the key parts, each run's kernel parameters as bytes (8
    for each parameter, in the host's order, in the structure asked for), and, where
    ``allocations`` is true, the tuple of where each array's allocation starts (what
    :func:`numbatune.arrays.buffer_of` gives; None where the reader cannot read one: no
    ``offset``, or a read failed), else None; or None where an array is not as expected. A read
    hands out the last read's key parts, key and bytes again where they are equal.
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

_extension: ModuleType | Unavailable | None = None  # None until first imported
_native: Native | None = None


def _extension_or_why() -> ModuleType | Unavailable:
    global _extension
    if _extension is None:
        _extension = _import_extension()
    return _extension


class Through(enum.Enum):
    """What makes a launch's driver calls."""

    C_EXTENSION = "C launcher (numbatune._native)"
    CUDA_BINDINGS = "cuda-bindings launch"


@dataclass(frozen=True)
class Route:
    """What makes a launch's driver calls, and why."""

    through: Through
    why: str

    def __str__(self) -> str:
        return f"{self.through.value}: {self.why}"


def route() -> Route:
    """What makes the driver calls of :func:`native` in this process, and why.

    Returns
    -------
    Route
        The C extension where it was built and loads the driver, else cuda-bindings, with the
        reason: not built, not loadable, or no driver.
    """
    module = _extension_or_why()
    if isinstance(module, Unavailable):
        return Route(Through.CUDA_BINDINGS, module.reason)
    if module.DRIVER_ERROR is not None:
        return Route(Through.CUDA_BINDINGS, f"numbatune._native: {module.DRIVER_ERROR}")
    return Route(Through.C_EXTENSION, "built with numbatune")


def describe(simulator: bool, fast_launch: bool) -> str:
    """What launches tuned kernels in this process, and why, in one line (``numbatune info``).

    Parameters
    ----------
    simulator
        Whether numba runs its CUDA simulator (then the simulator launches every kernel).
    fast_launch
        The ``fast_launch`` setting (off: numba's own launch).

    Returns
    -------
    str
        The simulator, numba's launch, the C launcher or the cuda-bindings launch, and why.
    """
    if simulator:
        built = not isinstance(_extension_or_why(), Unavailable)
        return "numba's CUDA simulator: no GPU" + (
            " (the C launcher numbatune._native is built, for GPUs)" if built else f"; {NOT_BUILT}"
        )
    if not fast_launch:
        return "numba's launch: the fast_launch setting is off"
    return str(route())


def native() -> Native:
    """The C extension's driver calls, loaded once per process; cuda-bindings' where they
    cannot be (:func:`route` says why)."""
    global _native
    if _native is None:
        chosen = route()
        if chosen.through is Through.C_EXTENSION:
            module = _extension_or_why()
            _native = Native(module.launch, module.record, module.wait, module.query)
        else:
            logger.warning("numbatune: %s", chosen)
            _native = Native(
                _launch_with_bindings, _record_with_bindings, _wait_with_bindings,
                _query_with_bindings,
            )  # fmt: skip
    return _native


def dlpack() -> DLPack | None:
    """The C extension's DLPack reads, or None where it was not built."""
    module = _extension_or_why()
    if isinstance(module, Unavailable):
        return None
    return DLPack(module.dlpack_api, module.describe, module.Reader)


def _built(name: str) -> Any:
    """The C extension's ``name``, or None where it was not built."""
    module = _extension_or_why()
    return None if isinstance(module, Unavailable) else getattr(module, name)


def same_classes() -> Callable[[tuple[Any, ...], tuple[type, ...]], bool] | None:
    """The C extension's ``same_classes(args, classes)``: whether the tuple ``args`` holds as
    many values as ``classes`` holds classes, each of exactly its class (one call for what
    would be a test per argument in Python); None where it was not built."""
    return _built("same_classes")


def order_type() -> type | None:
    """The C extension's stream order (:mod:`numbatune.streams.order`, ``_order.c``), or None
    where it was not built."""
    return _built("Order")


def lock_type() -> type | None:
    """The C extension's lock, which behaves as :class:`threading.Lock` and which its stream
    order's ``quick_use`` takes without calling Python methods, or None where it was not
    built."""
    return _built("Lock")


def packer(pack: Callable[..., bytes]) -> Callable[..., bytes]:
    """``pack``, a ``struct`` format's, as the fast paths call it: through the C extension's
    ``Packer`` where it was built, which gives the last call's bytes again where each value is
    the same object as in that call (a hit's values mostly are: the C reads' bytes, which are
    the last read's where equal, and scalars such as constants); ``pack`` itself elsewhere."""
    made = _built("Packer")
    return pack if made is None else made(pack)


def called_type() -> type | None:
    """The C extension's base of a tuned kernel, whose call ``kernel(*args, stream=None)``
    calls ``kernel._binder.entry(args, stream)`` with no Python frame between
    (:class:`numbatune.binder.Called`), or None where it was not built."""
    return _built("Called")


def launcher() -> Launcher:
    """The launch of :func:`native`."""
    return native().launch
