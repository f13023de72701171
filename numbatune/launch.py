"""Fast launch: a compiled numba kernel launched with its parameters packed by hand.

numba's own launch types and wraps every argument again on every call, which costs 22-65 us on
an H100. A fast path does that work once per argument signature (the classes of the arguments,
and for arrays their dtype, rank and layout): its code, generated per signature as Triton
generates its launchers, checks that a call has that signature, reads each argument's fields
once, computes the key from them, finds the key's winner in a dictionary, calls the launch
function, packs the parameters with one ``struct.pack`` and calls ``cuLaunchKernel`` (from C, see
:mod:`numbatune.cudalaunch`). Calls of other signatures, and keys not yet tuned, go on to the
tuned kernel's general path.

numba's parameter layout is not public API, so it is checked twice: numba-cuda must be a version
this module was written against (:data:`SUPPORTED_NUMBA_CUDA`), and the layout planned here must
match, parameter for parameter, the sizes the driver reports for the compiled function.
Whatever is not planned here (unknown versions, records, datetimes, arrays of other libraries,
debug or cooperative kernels) is left to numba's launch: :func:`fast_path` returns ``None``.

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
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
from numba import cuda

from numbatune import cudalaunch, streams
from numbatune.arrays import SIMULATOR, library_of, read

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
    """The generated code of one argument signature: reads, guards, key parts and parameters.

    ``steps`` are ("read", statement) and ("check", condition) in order; the checks hold for
    the arguments numba types as this signature (classes, and for arrays dtype, rank and
    layout). ``key_parts`` are the anchored sizes of the top-level arrays, which with the checks
    determine the default key. ``fields`` are (struct format, expression) per kernel parameter.
    """

    def __init__(self) -> None:
        self.steps: list[tuple[str, str]] = []
        self.arrays = 0
        self.key_parts: list[str] = []
        self.fields: list[tuple[str, str]] = []
        self.arrays_read: list[str] = []
        self.constants: dict[str, Any] = {}

    def constant(self, value: Any) -> str:
        """A name under which the generated code sees ``value``."""
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def add(self, argument: str, numba_type: Any, value: Any) -> bool:
        """Plan the parameters of one argument; False when it has no plan."""
        from numba.core import types

        self.steps.append(("check", f"type({argument}) is {self.constant(type(value))}"))
        if isinstance(numba_type, types.Array):
            return self._add_array(argument, numba_type, value)
        if isinstance(numba_type, types.BaseTuple):
            if not isinstance(value, tuple) or len(value) != len(numba_type):
                return False
            self.steps.append(("check", f"len({argument}) == {len(value)}"))
            return all(
                self.add(f"{argument}[{index}]", item_type, item)
                for index, (item_type, item) in enumerate(zip(numba_type, value, strict=True))
            )
        return self._add_scalar(argument, numba_type, value)

    def _add_scalar(self, argument: str, numba_type: Any, value: Any) -> bool:
        from numba.core import types

        if type(value) is int and numba_type != types.int64:
            return False  # numba types ints of 2**63 and over as uint64: not by class
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
        dtype = as_dtype(numba_type.dtype)
        name = f"_{self.arrays}"
        self.arrays += 1
        self.arrays_read.append(argument)
        if library == "numba":
            # numba launches its own arrays with the fields of this cached view of them.
            self.steps += [
                ("read", f"{name} = {argument}._strided_memory_view_shim"),
                ("read", f"{name}s = {name}.shape"),
                ("read", f"{name}l = {name}._layout"),
            ]
            dtype_read = f"{name}.dtype"
            c_contiguous, f_contiguous = f"{name}l.is_contiguous_c", f"{name}l.is_contiguous_f"
            a_layout = f"not {f_contiguous}"
            size, pointer = f"{name}.size", f"({name}.ptr or 0)"
            strides = [f"{name}l.strides_in_bytes[{d}]" for d in range(ndim)]
        else:
            self.steps.append(("read", f"{name}s = {argument}.shape"))
            dtype_read = f"{argument}.dtype"
            size = " * ".join(f"{name}s[{d}]" for d in range(ndim)) or "1"
            if library == "torch":
                pointer = f"{argument}.data_ptr()"
                c_contiguous = f"{argument}.is_contiguous()"
                f_contiguous = f"_layout_of({argument}) == 'F'"
                a_layout = f"_layout_of({argument}) == 'A'"
                # torch counts strides in elements.
                strides = [f"{argument}.stride({d}) * {dtype.itemsize}" for d in range(ndim)]
            else:
                pointer = f"{argument}.data.ptr"
                c_contiguous = f"{argument}._c_contiguous"
                f_contiguous = f"{argument}._f_contiguous"
                a_layout = f"not {f_contiguous}"
                strides = [f"{argument}.strides[{d}]" for d in range(ndim)]
        shape = [f"{name}s[{d}]" for d in range(ndim)]
        if layout == "C":
            # A C-contiguous array exports no strides, and numba computes them from the shape.
            # (For dimensions of size 1 numba's may differ; no element's address depends on
            # them.) numba's own arrays carry theirs.
            if library != "numba":
                strides = [" * ".join([str(dtype.itemsize), *shape[d + 1 :]]) for d in range(ndim)]
            self.steps.append(("check", c_contiguous))
        else:
            layout_check = f_contiguous if layout == "F" else a_layout
            self.steps.append(("check", f"not {c_contiguous} and {layout_check}"))
        expected = self.constant(value.dtype)  # numpy's or torch's dtype object
        self.steps += [
            ("check", f"len({name}s) == {ndim}"),
            ("check", f"({dtype_read} is {expected} or {dtype_read} == {expected})"),
        ]
        if "[" not in argument:  # a top-level array: its anchored sizes are in the default key
            self.key_parts += [f"(1 << ({s} - 1).bit_length() if {s} > 1 else 1)" for s in shape]
        self.fields += [("Q", "0"), ("Q", "0"), ("q", size), ("q", str(dtype.itemsize))]
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
        try:
            return int(protocol()[1])
        except Exception as error:  # e.g. cuda.core's stream, once closed
            raise streams.StreamError(f"stream {stream!r} cannot be used: {error}") from error
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


class FastPath:
    """A tuned kernel's fused call for one argument signature, made by :func:`fast_path`.

    ``call(args, stream)`` checks that the arguments have this signature (classes, and for
    arrays dtype, rank and layout), computes their key, finds the key's winner among those
    :meth:`add` gave it, calls the launch function and launches the winner; arguments of another
    signature and keys it does not know go to the ``otherwise`` it was made with.
    """

    def __init__(
        self,
        call: Callable[[tuple[Any, ...], Any], None],
        key_of: Callable[[tuple[Any, ...]], Hashable | None],
        winners: dict[Hashable, tuple[int, dict[str, Any], Launch]],
        layout: list[tuple[int, int]],
        name: str,
    ) -> None:
        self.call = call
        self._name = name
        self._key_of = key_of
        self._winners = winners
        self._layout = layout

    def add(self, dispatcher: Any, args: tuple[Any, ...], params: dict[str, Any]) -> bool:
        """Launch ``dispatcher``'s overload for ``args`` (compiled already) for calls with the
        key of ``args``, passing ``params`` to the launch function. False when this path cannot
        serve ``args`` (the caller then launches through numba)."""
        key = self._key_of(args)
        kernel, reason = _overload(dispatcher, args)
        if key is None:
            reason = "its checks refuse the arguments it was planned for"
        elif not reason and _parameter_layout(kernel._codelibrary.get_cufunc()) != self._layout:
            reason = "this variant's parameter layout differs from the signature's"
        if reason:
            logger.debug("%s: launched through numba: %s", self._name, reason)
            return False
        function = kernel._codelibrary.get_cufunc()
        self._winners[key] = (
            _function_handle(function),
            params,
            numba_launch(dispatcher, self._name),
        )
        return True

    def clear(self) -> None:
        """Forget every winner (their keys are tuned again)."""
        self._winners.clear()


def fast_path(
    dispatcher: Any,
    args: tuple[Any, ...],
    name: str,
    key: Callable[[tuple[Any, ...]], Hashable] | None,
    config: Callable[..., tuple[Any, ...]],
    otherwise: Callable[[tuple[Any, ...], Any], None],
) -> FastPath | None:
    """A fused call for arguments typed as ``args``, bypassing numba's argument handling.

    ``key`` computes a call's key (None: the default key, then computed inline from the sizes
    the call reads anyway); ``config(*args, **params)`` is the launch function. Returns None,
    logging why at DEBUG, when this module has no plan for the kernel or its arguments; the
    caller then launches through numba. ``dispatcher``'s overload for ``args`` must be compiled.
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
    layout = _parameter_layout(kernel._codelibrary.get_cufunc())
    if layout is None:
        logger.debug("%s: launched through numba: the driver gives no parameter layout", name)
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
    return _generate(plan, layout, key, config, args, name, otherwise)


def _parameter_layout(function: Any) -> list[tuple[int, int]] | None:
    """(offset, size) of each parameter of a compiled function, as the driver reports them."""
    try:
        return [(info.offset, info.size) for info in function.kernel.arguments_info]
    except Exception:  # an old driver or cuda.core: no way to check the layout
        return None


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
        return None, "running under numba's simulator"
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


def _front(plan: _Plan, arity: int, reject: str) -> list[str]:
    """Code that unpacks ``args`` into ``a0, a1, ...`` and runs the plan's reads and checks,
    running ``reject`` for arguments of another signature."""
    lines = [f"    if len(args) != {arity}:", f"        {reject}"]
    if arity:
        lines.append(f"    {''.join(f'a{i}, ' for i in range(arity))}= args")
    checks: list[str] = []
    for kind, code in [*plan.steps, ("read", "")]:
        if kind == "check":
            checks.append(code)
            continue
        if checks:
            lines += [f"    if not ({' and '.join(checks)}):", f"        {reject}"]
            checks = []
        if code:
            lines.append(f"    {code}")
    return lines


def _generate(
    plan: _Plan,
    layout: list[tuple[int, int]],
    key: Callable[[tuple[Any, ...]], Hashable] | None,
    config: Callable[..., tuple[Any, ...]],
    args: tuple[Any, ...],
    name: str,
    otherwise: Callable[[tuple[Any, ...], Any], None],
) -> FastPath:
    from numba.cuda.core import config as numba_config

    sync = bool(numba_config.CUDA_ARRAY_INTERFACE_SYNC)
    stream_lines, libraries = _stream_lines(args, sync)
    fmt, position = "<", 0
    for (offset, size), (letter, _) in zip(layout, plan.fields, strict=True):
        fmt += f"{offset - position}x" * (offset > position) + letter
        position = offset + size
    key_expression = (
        "_key(args)" if key is not None else f"({''.join(f'{p}, ' for p in plan.key_parts)})"
    )
    arguments = "".join(f"a{i}, " for i in range(len(args)))
    values = ", ".join(value for _, value in plan.fields)
    retry = "_launch(function, config, stream, parameters, _offsets)"
    reject = "return _otherwise(args, stream)"
    watched_arrays = "".join(f"{a}, " for a in plan.arrays_read)
    watch = f"_monitor.before(stream, ({watched_arrays}), _name, given)"
    lines = [
        "def key_of(args):",
        *_front(plan, len(args), "return None"),
        f"    return {key_expression}",
        "def call(args, stream):",
        *_front(plan, len(args), reject),
        "    try:",
        f"        found = _winners.get({key_expression})",
        "    except TypeError:  # an unhashable key: the general path says so",
        f"        {reject}",
        "    if found is None:",
        f"        {reject}",
        "    function, params, numba_launch = found",
        f"    config = _config({arguments}**params)",
        "    given = stream",
        *stream_lines,
        "    try:",
        f"        parameters = _pack({values})",
        "    except struct.error:  # a value numba types otherwise, e.g. an int over 2**63",
        "        return numba_launch(args, config, stream)",
        f"    watched = stream != _monitor.stream and {watch}",
        f"    error = {retry}",
        "    if error == _INVALID_CONTEXT:  # the first launch in this thread",
        "        _current_context()",
        f"        error = {retry}",
        "    if error:",
        "        _raise(error, config, stream)",
        "    if watched:",
        "        _monitor.after(watched)",
    ]
    source = "\n".join(lines)

    def raise_launch_error(error: int, config: Any, stream: int) -> None:
        from numba.cuda.cudadrv.driver import CudaAPIError

        streams.check_stream(stream)  # a clearer error when the stream is the cause
        raise CudaAPIError(error, f"{name}: launching with (grid, block[, shared]) {config}")

    winners: dict[Hashable, tuple[int, dict[str, Any], Launch]] = {}
    namespace = {
        "struct": struct,
        **plan.constants,
        "_winners": winners,
        "_key": key,
        "_config": config,
        "_otherwise": otherwise,
        "_layout_of": _layout_of,
        "_stream_handle": stream_handle,
        **{f"_{library}_stream": _stream_getter(library) for library in libraries},
        "_wait": streams.monitor.wait,
        "_half_bits": _half_bits,
        "_pack": struct.Struct(fmt).pack,
        "_offsets": struct.pack(f"<{len(layout)}q", *(offset for offset, _ in layout)),
        "_launch": cudalaunch.launcher(),
        "_INVALID_CONTEXT": _CUDA_ERROR_INVALID_CONTEXT,
        "_current_context": cuda.current_context,
        "_raise": raise_launch_error,
        "_monitor": streams.monitor,
        "_name": name,
    }
    exec(compile(source, f"<numbatune fast path of {name}>", "exec"), namespace)
    call = namespace["call"]
    call.source = source
    return FastPath(call, namespace["key_of"], winners, layout, name)


def _layout_of(array: Any) -> str:
    """numba's layout letter for an array (torch's own test is cheaper for C-contiguous)."""
    return read(array)[2]


# The simulator runs one kernel at a time in a process; launches from several threads take turns.
_simulator_lock = threading.Lock()


def numba_launch(dispatcher: Any, name: str | None = None) -> Launch:
    """A launch through numba's own ``kernel[grid, block, stream, shared](*args)``.

    With a ``name`` the launches are a tuned kernel's and :data:`streams.monitor` sees them (for
    ordering across streams and profiles); without, they are tuning's, on private clones.
    """

    def launch(args: tuple[Any, ...], config: tuple[Any, ...], stream: Any) -> None:
        grid, block = config[0], config[1]
        shared = config[2] if len(config) > 2 else 0
        stream = numba_stream(stream, args)
        configured = dispatcher[grid, block, stream, shared]
        watched = None
        if name is not None:
            handle = raw_stream(stream)
            if handle != streams.monitor.stream:
                arrays = tuple(a for a in args if library_of(type(a)) is not None)
                watched = streams.monitor.before(handle, arrays, name, stream)
        if SIMULATOR:
            with _simulator_lock:
                configured(*args)
        else:
            configured(*args)
        if watched:
            streams.monitor.after(watched)

    return launch


def raw_stream(stream: Any) -> int:
    """The raw handle of what :func:`numba_stream` returns (under the simulator, a number that
    tells its streams apart)."""
    if SIMULATOR:
        return id(stream) if stream else 0
    return stream_handle(stream)


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
