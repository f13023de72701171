"""numba-cuda-mlir's kernels: its ``cuda.jit`` dispatchers and their options, the types of a
call's arguments, and the compiled kernels numbatune keeps, serialised and loaded through the
driver.

numbatune types array arguments itself: numba-cuda-mlir types numba-cuda's device arrays as
numba-cuda's types (which it cannot compile for) and refuses torch tensors. numba-cuda-mlir is
imported only where its kernels are met (3 to 7 seconds).
"""

from __future__ import annotations

import functools
import importlib.util
import pickle
import sys
import threading
from typing import Any

import numpy as np

from numbatune.arraykinds import kind_of
from numbatune.compilers import mlir_parameters, payloads
from numbatune.compilers.mlir_parameters import Packing

#: The compiler's name, in identities and messages.
NAME = "numba-cuda-mlir"

#: The format of serialised kernels (:meth:`CompiledKernel.dumps`); part of the kernel store's keys.
PAYLOAD_VERSION = 1

#: Options numba-cuda-mlir derives from others as it decorates or compiles, or that numbatune
#: decides: not a kernel's own (``chip``, ``cc``: numbatune compiles for the device a call runs on).
_NOT_OWN = frozenset({"device", "_lto_explicit", "chip", "cc", "_compile_output", "abi_info"})


def installed() -> bool:
    """Whether numba-cuda-mlir can be imported (without importing it)."""
    return importlib.util.find_spec("numba_cuda_mlir") is not None


def is_dispatcher(value: Any) -> bool:
    """Whether ``value`` is a numba-cuda-mlir ``cuda.jit`` dispatcher (a kernel or a device
    function); False, without importing it, where numba-cuda-mlir is not imported."""
    module = sys.modules.get("numba_cuda_mlir.descriptor")
    return module is not None and isinstance(value, module.MLIRDispatcher)


@functools.cache
def _default_options() -> dict[str, Any]:
    """The options of a kernel decorated with a plain ``cuda.jit``."""
    from numba_cuda_mlir import cuda

    def nothing() -> None:
        pass

    return dict(cuda.jit(nothing).targetoptions)


def options_of(dispatcher: Any) -> dict[str, Any]:
    """``dispatcher``'s options: those that differ from a plain ``cuda.jit``'s, less those derived
    from others (``opt_level`` from ``opt``, ``fastmath`` from ``fast_math``) and those numbatune
    decides (:data:`_NOT_OWN`), so that passing them to ``cuda.jit`` again makes the same kernel."""
    defaults = _default_options()
    options = {
        name: value
        for name, value in dispatcher.targetoptions.items()
        if name in defaults and name not in _NOT_OWN and not _same(value, defaults[name])
    }
    if options.get("opt", True) is None:  # opt_level was given
        del options["opt"]
    elif "opt" in options:
        options.pop("opt_level", None)
    if options.get("fast_math") is not None:
        options.pop("fastmath", None)
    return options


def _same(value: Any, default: Any) -> bool:
    try:
        return value is default or (type(value) is type(default) and bool(value == default))
    except Exception:  # a comparison that does not give one bool
        return False


def argument_type(value: Any) -> Any:
    """numba-cuda-mlir's type of a kernel argument: a device array of any kind numbatune
    knows typed from its dtype, rank and layout; tuples item by item; the rest as
    numba-cuda-mlir types it (a TypeError where it cannot)."""
    from numba_cuda_mlir.numba_cuda import types as mlir_types

    kind = kind_of(type(value))
    if kind is not None:
        shape, dtype, layout = kind.read(value)
        return mlir_types.Array(_element_type(dtype), len(shape), layout)
    if isinstance(value, tuple) and any(kind_of(type(item)) for item in value):
        return mlir_types.BaseTuple.from_types([argument_type(item) for item in value])
    from numba_cuda_mlir.numba_cuda.typing.typeof import Purpose, typeof

    found = typeof(value, Purpose.argument)
    if found is None:
        raise TypeError(f"numba-cuda-mlir cannot type the argument {value!r}")
    return found


@functools.cache
def _element_type(dtype: str) -> Any:
    from numba_cuda_mlir.numba_cuda.np.numpy_support import from_dtype

    try:
        return from_dtype(np.dtype(dtype))
    except Exception as error:  # numpy's TypeError, numba's NumbaNotImplementedError
        raise TypeError(f"numba-cuda-mlir has no type for arrays of {dtype}") from error


#: What a serialised kernel holds but its argument types, as :class:`CompiledKernel`'s
#: arguments and attributes.
_STATES = ("cubin", "name", "cc", "packing", "cooperative")


class CompiledKernel:
    """A numba-cuda-mlir kernel as numbatune keeps it (its function loaded once a context); it also
    serves numba-cuda-mlir's own launch, from a dispatcher's overloads (:attr:`metadata`)."""

    def __init__(
        self,
        cubin: bytes,
        name: str,
        cc: tuple[int, int],
        packing: tuple[Packing, ...],
        cooperative: bool,
        argtypes: tuple[Any, ...] | bytes,
    ) -> None:
        self.cubin, self.name, self.cc = cubin, name, cc
        self.packing, self.cooperative = packing, cooperative
        self._argtypes = argtypes  # (pickled where loaded: unpickled when first asked)
        self._functions: dict[int, tuple[int, Any]] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, result: Any) -> CompiledKernel:
        """The kernel of a numba-cuda-mlir compile result (``dispatcher.compile``)."""
        metadata, argtypes = result.metadata, tuple(result.signature.args)
        cc = tuple(metadata["gpu_target"]["linker_cc"][:2])
        packing = tuple(mlir_parameters.packing(argtype) for argtype in argtypes)
        cooperative = bool(metadata.get("use_cooperative"))
        return cls(metadata["cubin"], metadata["func_name"], cc, packing, cooperative, argtypes)  # type: ignore[arg-type]

    @property
    def argtypes(self) -> tuple[Any, ...]:
        """numba-cuda-mlir's types of the arguments it was compiled for."""
        if isinstance(self._argtypes, bytes):
            self._argtypes = pickle.loads(self._argtypes)
        return self._argtypes

    @property
    def metadata(self) -> dict[str, Any]:
        """What numba-cuda-mlir's launch reads: the cubin, function name and cooperative flag."""
        return {"cubin": self.cubin, "func_name": self.name, "use_cooperative": self.cooperative}

    def function(self) -> int:
        """Its ``CUfunction`` in the current context, its module loaded there on first use; a
        RuntimeError where the driver cannot (no current context, a cubin for another device)."""
        from cuda.bindings import driver

        error, context = driver.cuCtxGetCurrent()
        loaded = self._functions.get(int(context))
        if loaded is None:
            with self._lock:
                loaded = self._functions.get(int(context))
                if loaded is None:
                    error, module = driver.cuModuleLoadData(self.cubin)
                    _check(error, f"loading {self.name} (built for sm_{self.cc[0]}{self.cc[1]})")
                    error, function = driver.cuModuleGetFunction(module, self.name.encode())
                    _check(error, f"finding {self.name} in its module")
                    loaded = self._functions[int(context)] = (int(function), module)
        return loaded[0]

    def bind(self) -> None:
        """Load its module into the current context now (:meth:`function`)."""
        self.function()

    def launch(self, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any) -> None:
        """Launch it on ``args`` with ``config`` (grid, block[, shared bytes]) on ``stream`` (a
        numba stream, a raw handle, or 0), its parameters packed by numbatune
        (:func:`numbatune.compilers.mlir_parameters.launch`), in numba-cuda's context."""
        from numba import cuda

        cuda.current_context()  # (made current on this thread, for the module's load)
        mlir_parameters.launch(self.function(), self.packing, self.cooperative, args, config,
                               stream)  # fmt: skip

    def dumps(self) -> bytes:
        """The kernel serialised, compressed (:func:`loads` reads it)."""
        argtypes = self._argtypes
        states = {name: getattr(self, name) for name in _STATES}
        states["argtypes"] = argtypes if isinstance(argtypes, bytes) else pickle.dumps(argtypes)
        return payloads.pack(PAYLOAD_VERSION, states)


def loads(payload: bytes, cc: tuple[int, int]) -> CompiledKernel:
    """The kernel :meth:`CompiledKernel.dumps` serialised (its argument types unpickled only
    when asked for); a ValueError where ``payload`` is not one, or not built for ``cc``."""
    states = payloads.unpack(payload, PAYLOAD_VERSION, NAME)
    if tuple(states.get("cc", ())) != tuple(cc):
        raise ValueError(f"it holds no cubin for sm_{cc[0]}{cc[1]}")
    try:
        return CompiledKernel(*(states[name] for name in (*_STATES, "argtypes")))
    except KeyError as error:
        raise ValueError(f"not a compiled kernel (no {error})") from None


def compiled(dispatcher: Any, argtypes: tuple[Any, ...]) -> CompiledKernel | None:
    """The dispatcher's overload for ``argtypes`` as a :class:`CompiledKernel` (kept in its
    place: numba-cuda-mlir's launch reads it too), or None."""
    found = dispatcher.overloads.get(argtypes)
    if found is None or isinstance(found, CompiledKernel):
        return found
    kernel = dispatcher.overloads[argtypes] = CompiledKernel.of(found)
    return kernel


def _check(error: Any, doing: str) -> None:
    if int(error):
        raise RuntimeError(f"numba-cuda-mlir kernel: {doing} failed: {error!r}")
