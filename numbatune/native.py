"""What the launch does in C, through a small extension compiled on first use: the driver calls
``cuLaunchKernel``, ``cuEventRecord``, ``cuStreamWaitEvent`` and ``cuEventQuery``, array
arguments read through the DLPack C exchange API, and the bookkeeping of the order across
streams (:func:`order_type`).

cuda-bindings' ``cuLaunchKernel`` costs about 5 us per call on the H100 machine, half of it in
converting arguments; the C extension in ``_native.c`` makes the same call for about half
of that. Like Triton's launchers it is compiled on the machine that runs it, with the C compiler
Python was built with (``cc`` otherwise), and kept in the user's cache directory. Where it cannot
be built (no compiler, no ``Python.h``) or the driver cannot be loaded, the driver calls go
through cuda-bindings, with the same signature and results, and :data:`BUILD_ERROR` says why.

The launch takes ``(function, config, stream, parameters, offsets, context, cooperative)``: the
function, stream and context as integer handles; ``config`` as ``(grid, block)`` or ``(grid,
block, shared_bytes)``, grid and block each an int or a tuple of up to 3 ints; the kernel's
parameters packed in ``parameters`` (bytes) at the offsets listed in ``offsets`` (bytes of
int64); ``cooperative`` true for a kernel that synchronises its grid
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
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

logger = logging.getLogger("numbatune")

_SOURCES = (Path(__file__).with_name("_native.c"), Path(__file__).with_name("_order.c"))

Launcher = Callable[[int, tuple, int, bytes, bytes, int, bool], int]

WRONG_CONTEXT = -1
EMPTY_LAUNCH = -2

#: Why the driver calls do not go through the C extension (None once they do).
BUILD_ERROR: str | None = None


def _build_directory() -> Path:
    from numbatune.config import settings

    base = settings.cache_dir or Path(tempfile.gettempdir()) / f"numbatune-{os.getuid()}"
    return base / "native"


def _compiled_module() -> Path:
    """The built extension for this source and this Python, built now if missing."""
    source = b"".join(path.read_bytes() for path in _SOURCES)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    tag = hashlib.sha256(source + sys.version.encode()).hexdigest()[:16]
    target = _build_directory() / f"_numbatune_launch-{tag}{suffix}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc") or ["cc"]
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    command = [
        *compiler,
        "-O2",
        "-shared",
        "-fPIC",
        f"-I{sysconfig.get_paths()['include']}",
        *map(str, _SOURCES),
        "-o",
        str(partial),
        "-ldl",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"{shlex.join(command)} failed: {result.stderr.strip()[-2000:]}")
    os.replace(partial, target)  # atomic: concurrent builders each leave a whole file
    return target


def _load_extension() -> Any:
    path = _compiled_module()
    loader = importlib.machinery.ExtensionFileLoader("_numbatune_launch", str(path))
    spec = importlib.util.spec_from_file_location("_numbatune_launch", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


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
    """Array reads through the DLPack C exchange API.

    ``api(cls)``: the address of the API of an array class (0 where it has none this extension
    reads). ``describe(api, array)``: ``(device type, device id, ndim, type code, bits, lanes)``,
    or None where the library cannot describe the array. ``read(api, arrays, expected)``: for a
    tuple of arrays of that class and one packed :data:`EXPECTED` per array (device type and
    id, ndim, type code, bits, numba's layout letter), ``(current stream, shape, fields, shape,
    fields, ...)`` with numba's kernel parameters of each array in ``fields`` (bytes, 8 for each
    parameter, in the host's order), or None where an array is not as expected.
    """

    api: Callable[[type], int]
    describe: Callable[[int, Any], tuple[int, ...] | None]
    read: Callable[[int, tuple[Any, ...], bytes], tuple[Any, ...] | None]


#: How :class:`DLPack`'s ``read`` takes what it expects of an array.
EXPECTED = struct.Struct("=iiBBBB")

_extension: Any = None  # the loaded extension, or why it could not be built or loaded
_native: Native | None = None


def _extension_or_error() -> Any:
    global _extension
    if _extension is None:
        try:
            _extension = _load_extension()
        except (OSError, ImportError) as error:
            _extension = str(error)
    return _extension


def native() -> Native:
    """The C extension's driver calls, built and loaded once per process; cuda-bindings' where
    they cannot be (:data:`BUILD_ERROR` says why)."""
    global _native, BUILD_ERROR
    if _native is None:
        module = _extension_or_error()
        reason = module if isinstance(module, str) else module.DRIVER_ERROR
        if reason is None:
            _native = Native(module.launch, module.record, module.wait, module.query)
            BUILD_ERROR = None
        else:
            BUILD_ERROR = reason
            logger.info("driver calls through cuda-bindings (the C extension: %s)", reason)
            _native = Native(
                _launch_with_bindings, _record_with_bindings, _wait_with_bindings,
                _query_with_bindings,
            )  # fmt: skip
    return _native


def dlpack() -> DLPack | None:
    """The C extension's DLPack reads, or None where it cannot be built."""
    module = _extension_or_error()
    if isinstance(module, str):
        return None
    return DLPack(module.dlpack_api, module.describe, module.read)


def order_type() -> type | None:
    """The C extension's stream order, which does what
    :class:`numbatune.streams.order.StreamOrder` does (``_order.c``), or None where it cannot
    be built."""
    module = _extension_or_error()
    return None if isinstance(module, str) else module.Order


def launcher() -> Launcher:
    """The launch of :func:`native`."""
    return native().launch
