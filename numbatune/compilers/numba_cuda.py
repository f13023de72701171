"""numba-cuda as a :class:`~numbatune.compilers.base.KernelCompiler`.

Every numba-cuda internal numbatune reads is read behind this class, in the modules it uses:
:mod:`~numbatune.compilers.numba_kernels` (dispatchers, their simulator copies, code libraries,
serialised kernels), :mod:`~numbatune.compilers.numba_build` (the build in compile workers, with
:mod:`~numbatune.compilers.numba_liveness`) and :mod:`~numbatune.compilers.numba_parameters`
(numba's kernel parameter layout, for the fast path).
"""

from __future__ import annotations

import threading
import types
from typing import Any

import numba
from numba import cuda

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import numba_build, numba_kernels, numba_parameters
from numbatune.compilers.base import (
    Built,
    KernelCompiler,
    LinkFailed,
    Parameters,
    Unwrapped,
)

# The simulator runs one kernel at a time in a process, and numba's simulated kernel keeps
# its grid on itself: launches from several threads configure and run it in turns.
_simulator_lock = threading.Lock()


class NumbaCuda(KernelCompiler):
    """numba-cuda's ``numba.cuda.jit``: its kernels, and plain Python functions."""

    name = numba_kernels.NAME

    @property
    def version(self) -> str:
        """numba-cuda's version."""
        return numba_kernels.version()

    def environment(self) -> list[str]:
        """numba, numba-cuda, cuda-bindings, numba's code-generation settings, NVVM and the
        driver (:func:`numbatune.compilers.numba_kernels.environment`)."""
        return numba_kernels.environment()

    def claims(self, kernel: Any) -> bool:
        """Plain Python functions and ``numba.cuda.jit`` dispatchers."""
        return isinstance(kernel, types.FunctionType | numba_kernels.dispatcher_class())

    def unwrap(self, kernel: Any, name: str) -> Unwrapped:
        """The Python function, jit options and explicit signatures (argument types) behind a
        ``cuda.jit`` kernel, or a plain function (no options, no signatures)."""
        if isinstance(kernel, types.FunctionType):
            return Unwrapped(kernel, {}, ())
        function = kernel.py_func
        if SIMULATOR:
            options = {"fastmath": kernel._fastmath, "debug": kernel._debug}
            is_device = kernel._device  # the simulator keeps these private
            signatures: tuple = ()  # and ignores signatures
        else:
            options = dict(kernel.targetoptions)
            is_device = options.pop("device", False)
            # numba compiles explicit signatures at decoration and then allows no other
            # compile; overloads compiled lazily (by earlier calls) are not signatures.
            signatures = () if kernel._can_compile else tuple(kernel.overloads)
        if is_device:
            raise TypeError(
                f"autotune({name}): {name} is a device function (cuda.jit(device=True)); "
                "autotune kernels, which are launched from the host"
            )
        jit_options = {k: v for k, v in options.items() if not numba_kernels.is_default(k, v)}
        return Unwrapped(function, jit_options, signatures)

    def specialise(
        self, function: types.FunctionType, original: types.FunctionType, options: dict[str, Any]
    ) -> Any:
        """A new ``numba.cuda.jit`` dispatcher of ``function``
        (:func:`numbatune.compilers.numba_kernels.jit`)."""
        return numba_kernels.jit(function, original, options)

    def device_options(self, device_function: Any) -> dict[str, Any]:
        """The options a ``cuda.jit(device=True)`` function was made with."""
        return numba_kernels.device_options(device_function)

    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """numba's types of ``args``."""
        return tuple(kernel.typeof_pyval(a) for a in args)

    def example_types(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """numba's types of ``args`` (``numba.typeof``: a host array's is a device array's)."""
        return tuple(numba.typeof(value) for value in args)

    def compiled(self, kernel: Any, argtypes: tuple[Any, ...]) -> Any:
        """The dispatcher's overload for ``argtypes``, or None."""
        return kernel.overloads.get(argtypes)

    def add(self, kernel: Any, argtypes: tuple[Any, ...], compiled: Any, declared: int) -> None:
        """Compile, or add an overload; a dispatcher of declared signatures then compiles no
        other, as numba's ``cuda.jit(signatures)`` (arguments that match none raise numba's
        ``No matching definition``), and with one it is specialised as numba makes it: only
        then, for numba's compile of a specialised dispatcher returns the kernel it holds."""
        if compiled is None:
            kernel.disable_compile(False)
            kernel.compile(argtypes)
        else:
            kernel.add_overload(compiled, argtypes)
        if declared:
            kernel.disable_compile()
        if declared == 1:
            kernel._specialized = True

    def overload_for(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, str | None]:
        """The overload of the arguments' own types, or, for a kernel declared with
        signatures, the declared overload numba converts them to (arrays of layout ``A`` take
        any layout, Python ints, floats and bools become the declared scalar types)."""
        if SIMULATOR:
            return None, "running under numba's simulator"
        signature = self.argument_types(kernel, args)
        compiled = kernel.overloads.get(signature) or numba_kernels.declared_overload(
            kernel, signature
        )
        if compiled is None:
            return None, f"no compiled overload for {signature}"
        if compiled.debug or compiled.extensions:
            return None, "a debug kernel, or one with extensions"
        if getattr(compiled, "launch_config_sensitive", False):
            return None, "the kernel depends on its launch configuration"
        return compiled, None

    def serialise(self, compiled: Any) -> bytes:
        """The overload serialised (:func:`numbatune.compilers.numba_kernels.dumps_kernel`)."""
        return numba_kernels.dumps_kernel(compiled)

    def load(self, payload: bytes, cc: tuple[int, int]) -> Any:
        """The overload serialised (:func:`numbatune.compilers.numba_kernels.load`)."""
        return numba_kernels.load(payload, cc)

    def function_of(self, compiled: Any) -> Any:
        """The code library's ``CUfunction`` wrapper in the current context."""
        return numba_kernels.code_library(compiled).get_cufunc()

    def launch(
        self, kernel: Any, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any
    ) -> None:
        """numba's ``kernel[grid, block, stream, shared](*args)``."""
        grid, block = config[0], config[1]
        shared = config[2] if len(config) > 2 else 0
        if SIMULATOR:
            with _simulator_lock:
                kernel[grid, block, stream, shared](*args)
        else:
            kernel[grid, block, stream, shared](*args)

    # -- compile workers ------------------------------------------------------------------

    @property
    def payload_version(self) -> int:
        """The format of :func:`numbatune.compilers.numba_kernels.dumps_kernel`."""
        return numba_kernels.PAYLOAD_VERSION

    def toolchain(self) -> tuple[str, ...]:
        """numba-cuda, NVVM and nvJitLink (:func:`numbatune.compilers.numba_build.toolchain`)."""
        return numba_build.toolchain()

    def pickle_function(self, function: types.FunctionType) -> bytes:
        """numba's cloudpickle of ``function``, its device functions as their Python functions
        and options (:func:`numbatune.compilers.numba_build.dumps_function`)."""
        return numba_build.dumps_function(function)

    def unpickle_function(self, pickled: bytes) -> types.FunctionType:
        """The function, its device functions made once per process."""
        return numba_build.loads_function(pickled)

    def warm_worker(self) -> None:
        """Type and lower a small kernel (:func:`numbatune.compilers.numba_build.warm`)."""
        numba_build.warm()

    def build(
        self,
        function: types.FunctionType,
        options: dict[str, Any],
        argtypes: tuple[Any, ...],
        cc: tuple[int, int],
        max_registers: tuple[int | None, ...] = (None,),
    ) -> list[Built | LinkFailed]:
        """numba's compile for ``cc`` without a driver, to PTX (or LTO-IR) once, linked to a
        cubin per cap by nvJitLink (:func:`numbatune.compilers.numba_build.build`)."""
        return numba_build.build(function, options, argtypes, cc, max_registers)

    def bind(self, compiled: Any) -> None:
        """numba's ``_Kernel.bind``: its module loaded into the current context."""
        compiled.bind()

    # -- trial runs -----------------------------------------------------------------------

    def trial_payload(self, kernel: Any, argtypes: tuple[Any, ...]) -> bytes:
        """The overload serialised; under the simulator, the dispatcher's function pickled."""
        if SIMULATOR:
            return self.pickle_function(kernel.py_func)
        return self.serialise(self.compiled(kernel, argtypes))

    def run_trial(
        self,
        payload: bytes,
        args: tuple[Any, ...],
        config: tuple[Any, ...],
        cc: tuple[int, int] | None,
    ) -> None:
        """The kernel loaded (under the simulator: jitted from its function) and launched on
        numba's default stream."""
        grid, block, *shared = config
        shared_bytes = shared[0] if shared else 0
        if SIMULATOR or cc is None:
            cuda.jit(self.unpickle_function(payload))[grid, block, 0, shared_bytes](*args)
            return
        from numba.cuda.cudadrv.driver import _to_core_stream

        kernel = numba_kernels.load(payload, cc)
        stream = _to_core_stream(0)  # the default stream, as numba's launch hands it on: a
        # cuda.core stream (a record passed by value is copied on it)
        kernel.launch(args, _dims(grid), _dims(block), stream, shared_bytes)

    # -- the fast path --------------------------------------------------------------------

    def fast_launch_unsupported(self) -> str | None:
        """The simulator, or a numba-cuda version whose parameter layout is not known
        (:func:`numbatune.compilers.numba_parameters.unsupported`)."""
        return numba_parameters.unsupported()

    def declared_types(self, compiled: Any) -> tuple[Any, ...]:
        """numba's ``_Kernel.argument_types``."""
        return tuple(compiled.argument_types)

    def cooperative(self, compiled: Any) -> bool:
        """numba's ``_Kernel.cooperative`` (it calls ``grid.sync()``)."""
        return bool(compiled.cooperative)

    def planned_type(self, declared: Any, actual: Any) -> Any:
        """numba's conversion (:func:`numbatune.compilers.numba_parameters.planned_type`)."""
        return numba_parameters.planned_type(declared, actual)

    def parameters(self, argtype: Any, value: Any) -> Parameters | None:
        """numba's parameters (:func:`numbatune.compilers.numba_parameters.parameters`)."""
        return numba_parameters.parameters(argtype, value)

    def parameter_layout(self, function: Any) -> list[tuple[int, int]] | None:
        """The sizes cuda.core reports
        (:func:`numbatune.compilers.numba_parameters.parameter_layout`)."""
        return numba_parameters.parameter_layout(function)

    def function_handle(self, function: Any) -> int:
        """The context's ``CUfunction`` of numba's ``CUkernel``
        (:func:`numbatune.compilers.numba_parameters.function_handle`)."""
        return numba_parameters.function_handle(function)


def _dims(value: Any) -> tuple[int, int, int]:
    """A grid or block size as numba's kernel launch takes it: three ints."""
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    return tuple(int(v) for v in (*values, 1, 1)[:3])  # type: ignore[return-value]
