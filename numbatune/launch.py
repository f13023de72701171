"""Fast launch: a compiled numba kernel launched with its parameters packed by hand.

numba's own launch types and wraps every argument again on every call, which costs 22-65 us on
an H100. A fast launch does that work once per argument signature: it knows the compiled
function, the byte layout of its parameters and how to read each argument's fields, so a call is
a few attribute reads, one ``struct.pack`` and one ``cuLaunchKernel`` (from C, see
:mod:`numbatune.cudalaunch`). The reading code is generated per signature, as Triton generates
its launchers.

numba's parameter layout is not public API, so it is checked twice: numba-cuda must be a version
this module was written against (:data:`SUPPORTED_NUMBA_CUDA`), and the layout planned here must
match, parameter for parameter, the sizes the driver reports for the compiled function.
Whatever is not planned here (unknown versions, records, datetimes, arrays of other libraries,
debug or cooperative kernels) is left to numba's launch: :func:`fast_launch` returns ``None``.

Streams. With ``stream=None`` a launch goes to the current stream of the arguments' array
library (torch's or CuPy's, as Triton does for torch), or numba's default stream for numba
arrays. When torch or CuPy arrays are launched on another stream, that stream first waits, on the
device, for their current stream: the ordering the ``__cuda_array_interface__`` asks for, which
numba's own launch gets by synchronising the host.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda

from numbatune import cudalaunch
from numbatune.arrays import SIMULATOR, library_of

logger = logging.getLogger("numbatune")

#: numba-cuda versions whose kernel parameter layout this module was checked against.
SUPPORTED_NUMBA_CUDA = ("0.30.",)

#: ``launch(args, (grid, block[, shared_bytes]), stream)``; ``stream`` None or any stream.
Launch = Callable[[tuple[Any, ...], tuple[Any, ...], Any], None]

_CUDA_ERROR_INVALID_CONTEXT = 201


def supported() -> str | None:
    """Why the fast launch is off in this process, or None when it is available."""
    if SIMULATOR:
        return "running under numba's simulator"
    from numba_cuda import __version__ as version

    if not version.startswith(SUPPORTED_NUMBA_CUDA):
        return f"numba-cuda {version} is not one of {SUPPORTED_NUMBA_CUDA}"
    return None


class _Plan:
    """The generated code of one launch: statements, guards, and (format, value) per parameter."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.guards: list[str] = []
        self.fields: list[tuple[str, str]] = []
        self.classes: dict[str, type] = {}

    def add(self, argument: str, numba_type: Any, value: Any) -> bool:
        """Plan the parameters of one argument; False when it has no plan."""
        from numba.core import types

        if isinstance(numba_type, types.Array):
            return self._add_array(argument, numba_type, value)
        if isinstance(numba_type, types.BaseTuple):
            if not isinstance(value, tuple) or len(value) != len(numba_type):
                return False
            self.guards.append(f"len({argument}) == {len(value)}")
            for index, (item_type, item) in enumerate(zip(numba_type, value, strict=True)):
                item_expression = f"{argument}[{index}]"
                class_name = f"_class{len(self.classes)}"
                self.classes[class_name] = type(item)
                self.guards.append(f"type({item_expression}) is {class_name}")
                if not self.add(item_expression, item_type, item):
                    return False
            return True
        return self._add_scalar(argument, numba_type)

    def _add_scalar(self, argument: str, numba_type: Any) -> bool:
        from numba.core import types

        if numba_type == types.boolean:
            self.fields.append(("?", argument))
        elif isinstance(numba_type, types.Integer):
            letter = {8: "b", 16: "h", 32: "i", 64: "q"}[numba_type.bitwidth]
            self.fields.append((letter if numba_type.signed else letter.upper(), argument))
        elif numba_type == types.float16:
            self.fields.append(("H", f"_half_bits({argument})"))
        elif numba_type in (types.float32, types.float64):
            self.fields.append(("f" if numba_type == types.float32 else "d", argument))
        elif numba_type in (types.complex64, types.complex128):
            letter = "f" if numba_type == types.complex64 else "d"
            self.fields += [(letter, f"{argument}.real"), (letter, f"{argument}.imag")]
        else:
            return False
        return True

    def _add_array(self, argument: str, numba_type: Any, value: Any) -> bool:
        from numba.np.numpy_support import as_dtype

        library = library_of(type(value))
        if library is None or not numba_type.mutable or not numba_type.aligned:
            return False
        ndim, layout = numba_type.ndim, numba_type.layout
        itemsize = as_dtype(numba_type.dtype).itemsize
        name = f"_{len(self.statements)}"
        if library == "numba":
            # numba launches its own arrays with the fields of this cached view of them.
            self.statements.append(f"{name} = {argument}._strided_memory_view_shim")
            size, pointer = f"{name}.size", f"({name}.ptr or 0)"
            shape = [f"{name}.shape[{d}]" for d in range(ndim)]
            strides = [f"{name}._layout.strides_in_bytes[{d}]" for d in range(ndim)]
        else:
            self.statements.append(f"{name} = {argument}.shape")
            shape = [f"{name}[{d}]" for d in range(ndim)]
            size = " * ".join(shape) or "1"
            pointer = f"{argument}.data_ptr()" if library == "torch" else f"{argument}.data.ptr"
            if layout == "C":
                # A C-contiguous array exports no strides, and numba computes them from the
                # shape. (For dimensions of size 1 numba's may differ; no element's address
                # depends on them.)
                strides = [" * ".join([str(itemsize), *shape[d + 1 :]]) for d in range(ndim)]
            elif library == "torch":  # torch counts strides in elements
                self.statements.append(f"{name}s = {argument}.stride()")
                strides = [f"{name}s[{d}] * {itemsize}" for d in range(ndim)]
            else:
                strides = [f"{argument}.strides[{d}]" for d in range(ndim)]
        self.fields += [("Q", "0"), ("Q", "0"), ("q", size), ("q", str(itemsize))]
        self.fields += [("Q", pointer)] + [("q", s) for s in shape] + [("q", s) for s in strides]
        return True


def _half_bits(value: Any) -> int:
    return int(np.float16(value).view(np.uint16))


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of a numba, torch or CuPy stream, a ``__cuda_stream__`` object or an
    integer handle (0 is the legacy default stream)."""
    if isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch, CuPy, numba
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(getattr(handle, "value", handle) or 0)
    raise TypeError(
        f"stream must be a numba, torch or CuPy stream or an integer CUstream handle, "
        f"got {stream!r}"
    )


def _stream_getter(library: str) -> Callable[..., Any]:
    """torch's or CuPy's function for its current stream."""
    if library == "torch":
        import torch

        return torch._C._cuda_getCurrentRawStream  # of a device index, as Triton reads it
    import cupy

    return cupy.cuda.get_current_stream


def current_stream(library: str, array: Any) -> int:
    """The stream the array library queues work on now, for one of its arrays (0 for numba)."""
    if library == "torch":
        return _stream_getter("torch")(array.get_device())
    if library == "cupy":
        return _stream_getter("cupy")().ptr
    return 0


class _Waiter:
    """Makes a stream wait, on the device, for the work queued so far on another."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._driver = driver
        flags = driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self._event = _checked(driver.cuEventCreate(flags))[0]
        self._lock = threading.Lock()

    def __call__(self, waiting: int, producer: int) -> None:
        with self._lock:
            _checked(self._driver.cuEventRecord(self._event, producer))
            _checked(self._driver.cuStreamWaitEvent(waiting, self._event, 0))


def _checked(result: tuple[Any, ...]) -> tuple[Any, ...]:
    if result[0]:
        from numba.cuda.cudadrv.driver import CudaAPIError

        raise CudaAPIError(int(result[0]), f"CUDA driver call failed: {result[0]!r}")
    return result[1:]


def fast_launch(
    dispatcher: Any, args: tuple[Any, ...], name: str, otherwise: Launch
) -> Launch | None:
    """A launch of ``dispatcher``'s overload for ``args`` that bypasses numba's argument handling.

    The launch serves arguments of the same classes as ``args`` and hands any others to
    ``otherwise``. Returns None, logging why at DEBUG, when this module has no plan for the
    kernel or its arguments; the caller then launches through numba. The overload for ``args``
    must be compiled already.
    """
    kernel, reason = _overload(dispatcher, args)
    reason = supported() or reason
    if reason:
        logger.debug("%s: launched through numba: %s", name, reason)
        return None
    plan = _Plan()
    for index, (numba_type, value) in enumerate(zip(kernel.argument_types, args, strict=True)):
        if not plan.add(f"a{index}", numba_type, value):
            logger.debug("%s: launched through numba: no plan for %s", name, numba_type)
            return None
    function = kernel._codelibrary.get_cufunc()
    try:
        layout = [(info.offset, info.size) for info in function.kernel.arguments_info]
    except Exception as error:  # an old driver or cuda.core: no way to check the layout
        logger.debug("%s: launched through numba: %s", name, error)
        return None
    planned = [struct.calcsize(letter) for letter, _ in plan.fields]
    if [size for _, size in layout] != planned:
        logger.warning(
            "%s: numba's kernel parameter layout is not the expected one (sizes %s, planned %s);"
            " launching through numba",
            name,
            [size for _, size in layout],
            planned,
        )
        return None
    return _generate(plan, layout, _function_handle(function), dispatcher, args, name, otherwise)


def _function_handle(function: Any) -> int:
    """The ``CUfunction`` of numba's compiled function in the current context.

    numba loads kernels as ``CUkernel``s; launching the context's ``CUfunction`` instead
    spares the driver a lookup on every launch (0.3-0.5 us on the H100 machine).
    """
    from cuda.bindings import driver

    handle = int(function.handle)
    error, resolved = driver.cuKernelGetFunction(driver.CUkernel(handle))
    return int(resolved) if not error else handle


def _overload(dispatcher: Any, args: tuple[Any, ...]) -> tuple[Any, str | None]:
    """The compiled overload for ``args``, and why it cannot be launched fast (or None)."""
    if SIMULATOR:
        return None, None
    signature = tuple(dispatcher.typeof_pyval(a) for a in args)
    kernel = dispatcher.overloads.get(signature)
    if kernel is None:
        return None, f"no compiled overload for {signature}"
    if kernel.debug or kernel.cooperative or kernel.extensions:
        return None, "debug, cooperative or extended kernel"
    if getattr(kernel, "launch_config_sensitive", False):
        return None, "the kernel depends on its launch configuration"
    return kernel, None


def _stream_lines(args: tuple[Any, ...], sync: bool) -> tuple[list[str], list[str]]:
    """Code that turns ``stream`` into a raw handle, ordered after torch's and CuPy's streams
    (the same reads as :func:`current_stream`), and the libraries whose streams it reads."""
    handle = "stream if type(stream) is int else _stream_handle(stream)"
    producers: dict[str, str] = {}
    for index, value in enumerate(args):
        library = library_of(type(value))
        if library in ("torch", "cupy"):
            current = f"_torch_stream(a{index}.get_device())"
            producers.setdefault(library, current if library == "torch" else "_cupy_stream().ptr")
    if not producers:
        return [f"    stream = 0 if stream is None else {handle}"], []
    lines = []
    for number, producer in enumerate(producers.values()):
        lines.append(f"    producer = {producer}")
        if number == 0:
            lines.append(f"    stream = producer if stream is None else {handle}")
        if sync:
            lines += ["    if stream != producer:", "        _wait(stream, producer)"]
    return lines, list(producers)


def _generate(
    plan: _Plan,
    layout: list[tuple[int, int]],
    function: int,
    dispatcher: Any,
    args: tuple[Any, ...],
    name: str,
    otherwise: Launch,
) -> Launch:
    from numba.cuda.core import config

    sync = bool(config.CUDA_ARRAY_INTERFACE_SYNC)
    stream_lines, libraries = _stream_lines(args, sync)
    fmt, position = "<", 0
    for (offset, size), (letter, _) in zip(layout, plan.fields, strict=True):
        fmt += f"{offset - position}x" * (offset > position) + letter
        position = offset + size
    classes = {f"_c{index}": type(value) for index, value in enumerate(args)}
    guard = " or ".join(f"type(a{index}) is not _c{index}" for index in range(len(args)))
    values = "".join(f", {value}" for _, value in plan.fields)
    retry = "_launch(_function, config, stream, parameters, _offsets)"
    lines = ["def launch(args, config, stream):"]
    lines.append(f"    {''.join(f'a{i}, ' for i in range(len(args)))}= args")
    if args:
        lines += [f"    if {guard}:", "        return _otherwise(args, config, stream)"]
    lines += stream_lines
    if plan.guards:
        lines += [f"    if not ({' and '.join(plan.guards)}):"]
        lines += ["        return _numba_launch(args, config, stream)"]
    lines += [f"    {statement}" for statement in plan.statements]
    lines += [
        "    try:",
        f"        parameters = _pack({values[2:]})",
        "    except struct.error:  # a value numba types otherwise, e.g. an int over 2**63",
        "        return _numba_launch(args, config, stream)",
        f"    error = {retry}",
        "    if error == _INVALID_CONTEXT:  # the first launch in this thread",
        "        _current_context()",
        f"        error = {retry}",
        "    if error:",
        "        _raise(error, config)",
    ]
    source = "\n".join(lines)

    def raise_launch_error(error: int, config: Any) -> None:
        from numba.cuda.cudadrv.driver import CudaAPIError

        raise CudaAPIError(error, f"{name}: launching with (grid, block[, shared]) {config}")

    namespace = {
        "struct": struct,
        **classes,
        **plan.classes,
        "_otherwise": otherwise,
        "_stream_handle": stream_handle,
        **{f"_{library}_stream": _stream_getter(library) for library in libraries},
        "_wait": _Waiter() if sync and libraries else None,
        "_numba_launch": numba_launch(dispatcher),
        "_half_bits": _half_bits,
        "_pack": struct.Struct(fmt).pack,
        "_offsets": struct.pack(f"<{len(layout)}q", *(offset for offset, _ in layout)),
        "_launch": cudalaunch.launcher(),
        "_function": function,
        "_INVALID_CONTEXT": _CUDA_ERROR_INVALID_CONTEXT,
        "_current_context": cuda.current_context,
        "_raise": raise_launch_error,
    }
    exec(compile(source, f"<numbatune launch of {name}>", "exec"), namespace)
    launch = namespace["launch"]
    launch.source = source
    return launch


# The simulator runs one kernel at a time in a process; launches from several threads take turns.
_simulator_lock = threading.Lock()


def numba_launch(dispatcher: Any) -> Launch:
    """A launch through numba's own ``kernel[grid, block, stream, shared](*args)``."""

    def launch(args: tuple[Any, ...], config: tuple[Any, ...], stream: Any) -> None:
        grid, block = config[0], config[1]
        shared = config[2] if len(config) > 2 else 0
        configured = dispatcher[grid, block, numba_stream(stream, args), shared]
        if SIMULATOR:
            with _simulator_lock:
                configured(*args)
        else:
            configured(*args)

    return launch


def numba_stream(stream: Any, args: tuple[Any, ...] = ()) -> Any:
    """What numba's launch takes for ``stream`` (see the module for what None means)."""
    if stream is None:
        for value in args:
            library = library_of(type(value))
            if library in ("torch", "cupy"):
                stream = current_stream(library, value)
                break
        else:
            return 0
    if SIMULATOR or isinstance(stream, cuda.cudadrv.driver.Stream):
        return stream
    handle = stream_handle(stream)
    return 0 if handle == 0 else cuda.external_stream(handle)
