"""numba-cuda-mlir as a :class:`~numbatune.compilers.base.KernelCompiler`: the kernels of
``from numba_cuda_mlir import cuda``'s ``cuda.jit``, tuned as numba-cuda's are. Its internals
are read in ``mlir_kernels``, ``mlir_build`` and ``mlir_parameters`` (every launch of its
kernels is numbatune's, through the driver). It has no simulator: its kernels need a GPU, and
under numba's simulator a call says so.
"""

from __future__ import annotations

import types
from typing import Any

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import mlir_build, mlir_kernels, mlir_parameters
from numbatune.compilers.base import KernelCompiler, LaunchTarget, Unwrapped
from numbatune.compilers.mlir_kernels import CompiledKernel

#: Why numba-cuda-mlir's kernels do not run in this process, where numba runs its simulator.
NO_SIMULATOR = (
    "numba-cuda-mlir has no simulator: its kernels run on a GPU only (numba's simulator is on here)"
)


class NumbaCudaMlir(KernelCompiler):
    """numba-cuda-mlir's ``cuda.jit`` kernels."""

    name = mlir_kernels.NAME
    builds = mlir_build
    payload_version = mlir_kernels.PAYLOAD_VERSION

    #: Whether a kernel is numba-cuda-mlir's ``cuda.jit`` dispatcher.
    claims = staticmethod(mlir_kernels.is_dispatcher)

    def unwrap(self, kernel: Any) -> Unwrapped:
        """The Python function, the options that differ from a plain ``cuda.jit``'s, and the
        declared signatures (a signature or annotations) of a kernel or device function."""
        # A kernel declared with argument types (a signature or annotations) was compiled for
        # them at decoration and takes no other; a lazy one has none.
        signatures = () if kernel._can_compile else tuple(kernel.overloads)
        device = bool(kernel.targetoptions.get("device"))
        return Unwrapped(kernel.py_func, mlir_kernels.options_of(kernel), signatures, device)

    def specialise(
        self, function: types.FunctionType, original: types.FunctionType, options: dict[str, Any]
    ) -> Any:
        """A new ``numba_cuda_mlir.cuda.jit`` dispatcher of ``function``."""
        from numba_cuda_mlir import cuda

        return cuda.jit(**options)(function)

    def own_helper(self, device_function: Any) -> Any:
        """numba-cuda-mlir's version of numbatune's helpers (:mod:`numbatune.intrinsics`, whose
        own are numba-cuda's device functions); any other device function, itself."""
        from numbatune import intrinsics

        if device_function is intrinsics.nonnegative:
            from numbatune.compilers import mlir_intrinsics

            return mlir_intrinsics.nonnegative
        return device_function

    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """numba-cuda-mlir's types of ``args``, arrays of every kind typed by numbatune (a host
        array's is a device array's: :func:`numbatune.compilers.mlir_kernels.argument_type`),
        with or without a kernel."""
        return tuple(mlir_kernels.argument_type(a) for a in args)

    #: The dispatcher's overload for the argument types, or None.
    compiled = staticmethod(mlir_kernels.compiled)

    def add(self, kernel: Any, argtypes: tuple[Any, ...], compiled: Any, declared: int) -> None:
        """Compile for ``argtypes``, or add the overload a worker built or the store held."""
        if compiled is None:
            kernel.compile(argtypes)
        else:
            kernel.overloads[argtypes] = compiled

    def _overload_for(self, kernel: Any, args: tuple[Any, ...]) -> CompiledKernel | str:
        """The overload of the arguments' own types or, for a kernel declared with signatures,
        the one numba-cuda-mlir converts them to; or why there is none to launch."""
        if SIMULATOR:
            return NO_SIMULATOR
        argtypes = self.argument_types(kernel, args)
        found = mlir_kernels.compiled(kernel, argtypes)
        if found is None and not kernel._can_compile:
            best, _ = kernel._resolve_overload(argtypes)
            found = mlir_kernels.compiled(kernel, best[0]) if len(best) == 1 else None
        if found is None:
            return f"no compiled overload for {argtypes}"
        if kernel._requires_launch_config:
            return "the kernel's code depends on its launch configuration"
        return found

    def launch_target(self, kernel: Any, args: tuple[Any, ...]) -> LaunchTarget | str:
        """The overload :meth:`launch` takes, with its parameters and their layout as the
        driver reports it (None where it cannot: the fast path then leaves the kernel to
        :meth:`launch`, which says so); or why not (a version of unknown layout)."""
        if not SIMULATOR and not self.version.startswith(mlir_parameters.SUPPORTED):
            return f"{self.identity()} is not one of {mlir_parameters.SUPPORTED}"
        compiled = self._overload_for(kernel, args)
        if isinstance(compiled, str):
            return compiled
        function = compiled.function()
        layout = mlir_parameters.reported_layout(function)
        actual, declared = self.argument_types(kernel, args), compiled.argtypes
        planned = map(mlir_parameters.planned_type, declared, actual)
        argtypes = tuple(zip(actual, declared, planned, strict=True))
        return LaunchTarget(argtypes, layout, function, compiled.cooperative,
                            mlir_parameters.parameters)  # fmt: skip

    def launch(
        self, kernel: Any, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any
    ) -> None:
        """numbatune's launch, its parameters packed in Python (numba-cuda-mlir's own takes
        neither numba-cuda's arrays and streams nor torch tensors); a RuntimeError under
        numba's simulator, or where no overload takes ``args``."""
        compiled = self._overload_for(kernel, args)
        if compiled is NO_SIMULATOR:
            raise RuntimeError(NO_SIMULATOR)
        if isinstance(compiled, str):
            raise RuntimeError(f"a numba-cuda-mlir kernel cannot be launched here: {compiled}")
        compiled.launch(args, config, stream)

    #: The kernel's cubin, name, argument types and packing, compressed, and loaded again.
    serialise = staticmethod(CompiledKernel.dumps)
    load = staticmethod(mlir_kernels.loads)

    def trial_payload(self, kernel: Any, argtypes: tuple[Any, ...]) -> bytes:
        """The overload serialised (a RuntimeError under numba's simulator)."""
        if SIMULATOR:
            raise RuntimeError(NO_SIMULATOR)
        return mlir_kernels.compiled(kernel, argtypes).dumps()

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
