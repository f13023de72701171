"""Building a numba-cuda-mlir kernel in a compile worker, which sees no GPU.

numba-cuda-mlir asks the driver for the compute capability before it compiles, even for a
target it is given, and keeps the answer in ``numba_cuda_mlir.tools._cached_cc``: :func:`build`
sets it to the target's, and the whole compile then runs without a driver (checked with
numba-cuda-mlir 0.6.0 on a machine with none, and on the H100). Where that name is missing,
the build raises and the parent compiles the kernel itself.
"""

from __future__ import annotations

import time
from typing import Any

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import function_pickle
from numbatune.compilers.base import Built, LinkFailed, package_version
from numbatune.compilers.mlir_kernels import NAME, CompiledKernel, options_of

#: numba-cuda-mlir's modules that pickle functions for workers.
JIT = function_pickle.Jit(
    "numba_cuda_mlir.cuda", "numba_cuda_mlir.numba_cuda.cloudpickle", options_of
)
dumps_function, loads_function = JIT.dumps, JIT.loads


def toolchain() -> tuple[str, ...]:
    """The versions that decide the code a build makes: numba-cuda-mlir (which brings its
    LLVM) and the CUDA toolkit whose NVVM and assembler it uses."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        toolkit = f"{major}.{minor}"
    except Exception:  # no NVRTC: numba-cuda-mlir cannot compile here either
        toolkit = "missing"
    return (package_version(NAME), f"cuda toolkit {toolkit}")


def environment() -> list[str]:
    """What decides the code numba-cuda-mlir generates, for checksums: its
    :func:`toolchain`, cuda-bindings, and on a GPU the driver's version."""
    from cuda.bindings import driver

    parts = [*toolchain(), package_version("cuda-bindings")]
    if not SIMULATOR:
        parts.append(f"driver {driver.cuDriverGetVersion()[1]}")
    return parts


def warm() -> None:
    """Import numba-cuda-mlir's compiler (3 s and more), for a fork server of compile workers.
    Nothing is compiled: a compile starts threads in MLIR, which a fork does not carry (a
    forked worker then never finished its first compile)."""
    import numba_cuda_mlir.descriptor
    import numba_cuda_mlir.mlir_compiler
    import numba_cuda_mlir.mlir_optimization  # noqa: F401


def target(cc: tuple[int, int]) -> None:
    """Make numba-cuda-mlir compile for ``cc`` in this process without asking the driver (a
    RuntimeError where this version keeps the compute capability elsewhere)."""
    from numba_cuda_mlir import tools

    if not hasattr(tools, "_cached_cc"):
        raise RuntimeError(f"{package_version(NAME)} cannot be told the compute capability")
    tools._cached_cc = tuple(cc)


def build(
    function: Any,
    options: dict[str, Any],
    argtypes: tuple[Any, ...],
    cc: tuple[int, int],
    max_registers: tuple[int | None, ...] = (None,),
) -> list[Built | LinkFailed]:
    """(In a worker) compile the kernel function for ``argtypes`` and ``cc`` once per register cap
    (numba-cuda-mlir reads the cap as it compiles): a kernel each, in their order. The first
    compile's error raises (the variants' error); a later one fails that kernel alone."""
    from numba_cuda_mlir import cuda

    target(cc)
    tools = toolchain()
    built: list[Built | LinkFailed] = []
    for index, cap in enumerate(max_registers):
        started = time.perf_counter()
        capped = {**options, **({} if cap is None else {"max_registers": cap})}
        try:
            result = cuda.jit(**capped)(function).compile(argtypes)
        except Exception as error:
            if index == 0:
                raise
            built.append(LinkFailed(f"{type(error).__name__}: {error}"))
            continue
        payload = CompiledKernel.of(result).dumps()
        built.append(Built(payload, None, tools, time.perf_counter() - started))
    return built
