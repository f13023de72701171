"""numba-cuda as a :class:`~numbatune.compilers.base.KernelCompiler`: every numba-cuda internal
numbatune reads is read behind this class, in the modules it uses (``numba_kernels``,
``numba_build`` with ``numba_liveness``, and ``numba_parameters``).
"""

from __future__ import annotations

import contextlib
import threading
import types
from typing import Any

import numba
from numba import cuda

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import numba_build, numba_kernels, numba_parameters
from numbatune.compilers.base import KernelCompiler, LaunchTarget, Unwrapped

# The simulator runs one kernel at a time in a process, and numba's simulated kernel keeps
# its grid on itself: launches from several threads configure and run it in turns.
_simulator_lock = threading.Lock()


class NumbaCuda(KernelCompiler):
    """numba-cuda's ``numba.cuda.jit``: its kernels, and plain Python functions."""

    name = numba_kernels.NAME
    builds = numba_build
    payload_version = numba_kernels.PAYLOAD_VERSION

    def claims(self, kernel: Any) -> bool:
        """Plain Python functions and ``numba.cuda.jit`` dispatchers."""
        return isinstance(kernel, types.FunctionType | numba_kernels.dispatcher_class())

    def unwrap(self, kernel: Any) -> Unwrapped:
        """What is behind a ``cuda.jit`` kernel or device function, or a plain function (no
        options, no signatures)."""
        if isinstance(kernel, types.FunctionType):
            return Unwrapped(kernel, {}, ())
        options = numba_kernels.device_options(kernel)
        jit_options = {k: v for k, v in options.items() if not numba_kernels.is_default(k, v)}
        if SIMULATOR:  # which keeps its options private and ignores signatures
            return Unwrapped(kernel.py_func, jit_options, (), bool(kernel._device))
        # numba compiles explicit signatures at decoration and then allows no other compile;
        # overloads compiled lazily (by earlier calls) are not signatures.
        signatures = () if kernel._can_compile else tuple(kernel.overloads)
        device = kernel.targetoptions.get("device", False)
        return Unwrapped(kernel.py_func, jit_options, signatures, bool(device))

    #: A new ``numba.cuda.jit`` dispatcher of a variant's function.
    specialise = staticmethod(numba_kernels.jit)

    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """numba's types of ``args``; without a kernel, ``numba.typeof``'s (a host array's is
        a device array's)."""
        if kernel is None:
            return tuple(numba.typeof(value) for value in args)
        return tuple(kernel.typeof_pyval(a) for a in args)

    def compiled(self, kernel: Any, argtypes: tuple[Any, ...]) -> Any:
        """The dispatcher's overload for ``argtypes`` (numba's ``_Kernel``), or None."""
        return kernel.overloads.get(argtypes)

    def add(self, kernel: Any, argtypes: tuple[Any, ...], compiled: Any, declared: int) -> None:
        """Compile, or add an overload; a dispatcher of declared signatures then compiles no other,
        as numba's ``cuda.jit(signatures)``, and with one it is specialised as numba makes it (only
        then: numba's compile of a specialised dispatcher returns the kernel it holds)."""
        if compiled is None:
            kernel.disable_compile(False)
            kernel.compile(argtypes)
        else:
            kernel.add_overload(compiled, argtypes)
        if declared:
            kernel.disable_compile()
        if declared == 1:
            kernel._specialized = True

    def launch_target(self, kernel: Any, args: tuple[Any, ...]) -> LaunchTarget | str:
        """The overload of the arguments' own types or, for a kernel of declared signatures, the one
        numba converts them to, with numba's parameters and the context's ``CUfunction``."""
        unsupported = numba_parameters.unsupported()
        if unsupported is not None:
            return unsupported
        actual = self.argument_types(kernel, args)
        compiled = kernel.overloads.get(actual) or numba_kernels.declared_overload(kernel, actual)
        if compiled is None:
            return f"no compiled overload for {actual}"
        if compiled.debug or compiled.extensions:
            return "a debug kernel, or one with extensions"
        if getattr(compiled, "launch_config_sensitive", False):
            return "the kernel depends on its launch configuration"
        declared = tuple(compiled.argument_types)
        planned = map(numba_parameters.planned_type, declared, actual)
        function = numba_kernels.code_library(compiled).get_cufunc()
        return LaunchTarget(
            tuple(zip(actual, declared, planned, strict=True)),
            numba_parameters.parameter_layout(function),
            numba_parameters.function_handle(function),
            bool(compiled.cooperative),
            numba_parameters.parameters,
        )

    def launch(
        self, kernel: Any, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any
    ) -> None:
        """numba's ``kernel[grid, block, stream, shared](*args)``."""
        grid, block = config[0], config[1]
        shared = config[2] if len(config) > 2 else 0
        with _simulator_lock if SIMULATOR else contextlib.nullcontext():
            kernel[grid, block, stream, shared](*args)

    #: The overload serialised, and loaded again.
    serialise = staticmethod(numba_kernels.dumps_kernel)
    load = staticmethod(numba_kernels.load)

    def trial_payload(self, kernel: Any, argtypes: tuple[Any, ...]) -> bytes:
        """The overload serialised; under the simulator, the dispatcher's function pickled."""
        if SIMULATOR:
            return numba_build.dumps_function(kernel.py_func)
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
            cuda.jit(numba_build.loads_function(payload))[grid, block, 0, shared_bytes](*args)
            return
        from numba.cuda.cudadrv.driver import _to_core_stream

        kernel = numba_kernels.load(payload, cc)
        stream = _to_core_stream(0)  # the default stream, as numba's launch hands it on: a
        # cuda.core stream (a record passed by value is copied on it)
        kernel.launch(args, _dims(grid), _dims(block), stream, shared_bytes)


def _dims(value: Any) -> tuple[int, int, int]:
    """A grid or block size as numba's kernel launch takes it: three ints."""
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    return tuple(int(v) for v in (*values, 1, 1)[:3])  # type: ignore[return-value]
