"""numba-cuda-mlir as a :class:`~numbatune.compilers.base.KernelCompiler`: the kernels of
``from numba_cuda_mlir import cuda``'s ``cuda.jit``, tuned as numba-cuda's are.

numba-cuda-mlir's internals are read in the modules this class uses:
:mod:`~numbatune.compilers.mlir_kernels` (dispatchers and their options, argument types, the
compiled kernels numbatune keeps), :mod:`~numbatune.compilers.mlir_build` (the build in compile
workers) and :mod:`~numbatune.compilers.mlir_parameters` (its kernel parameters, which numbatune
packs itself: every launch of its kernels is numbatune's, through the driver).

What it cannot do: numba-cuda-mlir has no simulator, so its kernels need a GPU to run; under
numba's simulator they are tuned by nobody and a call says so.
"""

from __future__ import annotations

import types
from typing import Any

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import mlir_build, mlir_kernels, mlir_parameters
from numbatune.compilers.base import (
    Built,
    KernelCompiler,
    LinkFailed,
    Parameters,
    Unwrapped,
)
from numbatune.compilers.mlir_kernels import CompiledKernel

#: Why numba-cuda-mlir's kernels do not run in this process, where numba runs its simulator.
NO_SIMULATOR = (
    "numba-cuda-mlir has no simulator: its kernels run on a GPU only (numba's simulator is on here)"
)


class NumbaCudaMlir(KernelCompiler):
    """numba-cuda-mlir's ``cuda.jit`` kernels."""

    name = mlir_kernels.NAME

    @property
    def version(self) -> str:
        """numba-cuda-mlir's version."""
        return mlir_kernels.version()

    def environment(self) -> list[str]:
        """numba-cuda-mlir, the CUDA toolkit and cuda-bindings it compiles with, and on a GPU
        the driver (:func:`numbatune.compilers.mlir_build.environment`)."""
        return mlir_build.environment()

    def claims(self, kernel: Any) -> bool:
        """numba-cuda-mlir's ``cuda.jit`` dispatchers."""
        return mlir_kernels.is_dispatcher(kernel)

    def unwrap(self, kernel: Any, name: str) -> Unwrapped:
        """The Python function, the options that differ from a plain ``cuda.jit``'s, and the
        declared signatures (a signature or annotations) of a kernel."""
        if kernel.targetoptions.get("device"):
            raise TypeError(
                f"autotune({name}): {name} is a device function (cuda.jit(device=True)); "
                "autotune kernels, which are launched from the host"
            )
        signatures = mlir_kernels.declared_signatures(kernel)
        return Unwrapped(kernel.py_func, mlir_kernels.options_of(kernel), signatures)

    def specialise(
        self, function: types.FunctionType, original: types.FunctionType, options: dict[str, Any]
    ) -> Any:
        """A new ``numba_cuda_mlir.cuda.jit`` dispatcher of ``function``."""
        return mlir_kernels.jit(function, options)

    def device_options(self, device_function: Any) -> dict[str, Any]:
        """The options a ``cuda.jit(device=True)`` function was made with."""
        return mlir_kernels.options_of(device_function)

    def own_helper(self, device_function: Any) -> Any:
        """numba-cuda-mlir's version of numbatune's helpers (:mod:`numbatune.intrinsics`, whose
        own are numba-cuda's device functions); any other device function, itself."""
        from numbatune import intrinsics

        if device_function is intrinsics.nonnegative:
            from numbatune.compilers import mlir_intrinsics

            return mlir_intrinsics.nonnegative
        return device_function

    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """numba-cuda-mlir's types of ``args``, arrays of every kind typed by numbatune
        (:func:`numbatune.compilers.mlir_kernels.argument_type`)."""
        return tuple(mlir_kernels.argument_type(a) for a in args)

    def example_types(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """numba-cuda-mlir's types of ``args``, as for a call (a host array's is a device
        array's)."""
        return self.argument_types(None, args)

    def compiled(self, kernel: Any, argtypes: tuple[Any, ...]) -> CompiledKernel | None:
        """The dispatcher's overload for ``argtypes``, or None."""
        return mlir_kernels.compiled(kernel, argtypes)

    def add(self, kernel: Any, argtypes: tuple[Any, ...], compiled: Any, declared: int) -> None:
        """Compile for ``argtypes``, or add the overload a worker built or the store held."""
        if compiled is None:
            kernel.compile(argtypes)
        else:
            kernel.overloads[argtypes] = compiled

    def overload_for(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, str | None]:
        """The overload of the arguments' own types or, for a kernel declared with signatures,
        the one numba-cuda-mlir converts them to."""
        if SIMULATOR:
            return None, NO_SIMULATOR
        argtypes = self.argument_types(kernel, args)
        found = self.compiled(kernel, argtypes)
        if found is None and not kernel._can_compile:
            best, _ = kernel._resolve_overload(argtypes)
            found = self.compiled(kernel, best[0]) if len(best) == 1 else None
        if found is None:
            return None, f"no compiled overload for {argtypes}"
        if kernel._requires_launch_config:
            return None, "the kernel's code depends on its launch configuration"
        return found, None

    def serialise(self, compiled: CompiledKernel) -> bytes:
        """The kernel's cubin, name, argument types and packing, compressed."""
        return compiled.dumps()

    def load(self, payload: bytes, cc: tuple[int, int]) -> CompiledKernel:
        """The kernel :meth:`serialise` made (:func:`numbatune.compilers.mlir_kernels.loads`)."""
        return mlir_kernels.loads(payload, cc)

    def function_of(self, compiled: CompiledKernel) -> int:
        """The kernel's ``CUfunction`` in the current context."""
        return compiled.function()

    def launch(
        self, kernel: Any, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any
    ) -> None:
        """numbatune's launch, its parameters packed in Python
        (:meth:`~numbatune.compilers.mlir_kernels.CompiledKernel.launch`): numba-cuda-mlir's own
        launch takes neither numba-cuda's arrays and streams nor torch tensors.

        Raises
        ------
        RuntimeError
            Under numba's simulator, or no overload takes ``args``.
        """
        if SIMULATOR:
            raise RuntimeError(NO_SIMULATOR)
        compiled, reason = self.overload_for(kernel, args)
        if compiled is None:
            raise RuntimeError(f"a numba-cuda-mlir kernel cannot be launched here: {reason}")
        compiled.launch(args, config, stream)

    # -- compile workers ------------------------------------------------------------------

    @property
    def payload_version(self) -> int:
        """The format of :meth:`~numbatune.compilers.mlir_kernels.CompiledKernel.dumps`."""
        return mlir_kernels.PAYLOAD_VERSION

    def toolchain(self) -> tuple[str, ...]:
        """numba-cuda-mlir and the CUDA toolkit (:func:`numbatune.compilers.mlir_build.
        toolchain`)."""
        return mlir_build.toolchain()

    def pickle_function(self, function: types.FunctionType) -> bytes:
        """numba-cuda-mlir's cloudpickle of ``function``, its device functions as their
        Python functions and options."""
        return mlir_build.dumps_function(function)

    def unpickle_function(self, pickled: bytes) -> types.FunctionType:
        """The function, its device functions made once per process."""
        return mlir_build.loads_function(pickled)

    def warm_worker(self) -> None:
        """Import numba-cuda-mlir's compiler (:func:`numbatune.compilers.mlir_build.warm`)."""
        mlir_build.warm()

    def build(
        self,
        function: types.FunctionType,
        options: dict[str, Any],
        argtypes: tuple[Any, ...],
        cc: tuple[int, int],
        max_registers: tuple[int | None, ...] = (None,),
    ) -> list[Built | LinkFailed]:
        """numba-cuda-mlir's compile for ``cc`` without a driver, once per register cap
        (:func:`numbatune.compilers.mlir_build.build`)."""
        return mlir_build.build(function, options, argtypes, cc, max_registers)

    def bind(self, compiled: CompiledKernel) -> None:
        """Its module loaded into the current context."""
        compiled.function()

    # -- trial runs -----------------------------------------------------------------------

    def trial_payload(self, kernel: Any, argtypes: tuple[Any, ...]) -> bytes:
        """The overload serialised.

        Raises
        ------
        RuntimeError
            Under numba's simulator.
        """
        if SIMULATOR:
            raise RuntimeError(NO_SIMULATOR)
        return self.serialise(self.compiled(kernel, argtypes))

    def run_trial(
        self,
        payload: bytes,
        args: tuple[Any, ...],
        config: tuple[Any, ...],
        cc: tuple[int, int] | None,
    ) -> None:
        """The kernel loaded through the driver and launched on the default stream (the
        worker needs no numba-cuda-mlir)."""
        if cc is None:
            raise RuntimeError(NO_SIMULATOR)
        mlir_kernels.loads(payload, cc).launch(args, config, 0)

    # -- the fast path --------------------------------------------------------------------

    def fast_launch_unsupported(self) -> str | None:
        """The simulator, or a numba-cuda-mlir version whose parameter layout is not known."""
        if SIMULATOR:
            return NO_SIMULATOR
        if not self.version.startswith(mlir_parameters.SUPPORTED):
            return f"{self.identity()} is not one of {mlir_parameters.SUPPORTED}"
        return None

    def declared_types(self, compiled: CompiledKernel) -> tuple[Any, ...]:
        """The argument types the kernel was compiled for."""
        return compiled.argtypes

    def cooperative(self, compiled: CompiledKernel) -> bool:
        """Whether it synchronises its grid."""
        return compiled.cooperative

    def planned_type(self, declared: Any, actual: Any) -> Any:
        """(:func:`numbatune.compilers.mlir_parameters.planned_type`)."""
        return mlir_parameters.planned_type(declared, actual)

    def parameters(self, argtype: Any, value: Any) -> Parameters | None:
        """Memref descriptors for arrays, scalars in their width
        (:func:`numbatune.compilers.mlir_parameters.parameters`)."""
        return mlir_parameters.parameters(argtype, value)

    def parameter_layout(self, function: int) -> list[tuple[int, int]] | None:
        """The driver's ``cuFuncGetParamInfo`` for each parameter; None where it cannot
        report them (the fast path then leaves the kernel to :meth:`launch`, which says so)."""
        from numba.cuda.cudadrv.driver import CudaAPIError

        try:
            return mlir_parameters.parameter_layout(function) or None
        except CudaAPIError:
            return None

    def function_handle(self, function: int) -> int:
        """The ``CUfunction`` itself (:meth:`function_of` gives it)."""
        return function
