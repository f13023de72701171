"""numba-cuda's build of one kernel for a compute capability without a GPU, in a compile
worker (:meth:`numbatune.compilers.base.Builds.build`).

numba asks the driver for the current device's compute capability; in a worker (no GPU)
:func:`build` tells numba the target's instead, compiles the kernel as numba's own compile
would (the same ``_Kernel``, linked by nvJitLink) and returns it serialised as numba's disk
cache serialises kernels, with the resources the assembler reported. Functions cross to the
worker as :mod:`numbatune.compilers.function_pickle` pickles them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import function_pickle
from numbatune.compilers import numba_liveness as liveness
from numbatune.compilers.base import Built, LinkFailed, Resources, package_version
from numbatune.compilers.numba_kernels import (
    NAME,
    code_library,
    device_options,
    dumps_kernel,
    full_cc,
)

#: numba-cuda's pickling of functions for workers: what :func:`build` is given.
JIT = function_pickle.Jit("numba.cuda", "numba.cuda.cloudpickle", device_options)
dumps_function, loads_function = JIT.dumps, JIT.loads


#: numba settings that change the code it generates (numba.cuda.core.config names).
CODEGEN_SETTINGS = (
    "OPT",
    "BOUNDSCHECK",
    "DEBUGINFO_DEFAULT",
    "CUDA_DEBUGINFO_DEFAULT",
    "FORCE_CUDA_CC",
    "CUDA_DEFAULT_PTX_CC",
    "LOOP_VECTORIZE",
    "SLP_VECTORIZE",
    "ENABLE_CUDASIM",
)


def environment() -> list[str]:
    """numba's, numba-cuda's and cuda-bindings' versions, numba's code-generation settings, and
    on a GPU the NVVM and driver versions."""
    from numba.cuda.core import config

    parts = [package_version("numba"), package_version(NAME), package_version("cuda-bindings")]
    parts += [f"{name}={getattr(config, name, None)!r}" for name in CODEGEN_SETTINGS]
    if not SIMULATOR:
        from numba.cuda.cudadrv import nvvm
        from numba.cuda.cudadrv.driver import driver

        parts.append(f"nvvm {nvvm.NVVM().get_version()}")
        parts.append(f"driver {driver.get_version()}")
    return parts


def toolchain() -> tuple[str, ...]:
    """numba-cuda's, NVVM's and nvJitLink's versions."""
    from cuda.bindings import nvjitlink
    from numba.cuda.cudadrv import nvvm

    return (
        package_version(NAME),
        f"nvvm {nvvm.NVVM().get_version()}",
        f"nvjitlink {nvjitlink.version()}",
    )


@contextlib.contextmanager
def _target(cc: tuple[int, int]) -> Iterator[None]:
    """numba compiles for ``cc`` without asking the driver, and its linker reports resources."""
    from numba.cuda import codegen, dispatcher
    from numba.cuda.cudadrv import driver

    class Device:
        compute_capability = cc

    patches = [
        (dispatcher, "get_current_device", lambda: Device()),
        (
            codegen.CUDACodeLibrary,
            "_ensure_cc",
            lambda library, wanted, ensure=codegen.CUDACodeLibrary._ensure_cc: ensure(
                library, full_cc(cc) if wanted is None else wanted
            ),
        ),
        (
            driver._Linker,
            "_get_linker_options",
            lambda linker, ptx, options=driver._Linker._get_linker_options: dataclasses.replace(
                options(linker, ptx), verbose=True
            ),
        ),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def warm() -> None:
    """Type and lower a small kernel, without NVVM: a fork server of compile workers runs this,
    so that the workers forked from it start with numba's lazy imports done and its typing
    tables filled (their first kernel took 2.2-2.6 s against 0.7-0.8 s for the next, 16 at
    once on the H100's host). NVVM and nvJitLink start threads, which a fork would not carry."""
    import math

    import numba
    import numpy as np
    from numba import cuda, float32
    from numba.cuda.compiler import compile_cuda

    def kernel(a, b):
        tile = cuda.shared.array(64, float32)
        mine = cuda.local.array(4, float32)
        i, t = cuda.grid(1), cuda.threadIdx.x
        for k in range(4):
            mine[k] = a[i, k] * 2.0 + math.exp(a[i, k])
        tile[t] = mine[0] + mine[3]
        cuda.syncthreads()
        x = cuda.shfl_down_sync(0xFFFFFFFF, tile[t], 1)
        if i < b.shape[0]:
            b[i, 0] = max(x, float32(0)) + min(mine[1], 1.0) + math.sqrt(abs(mine[2]))

    liveness.install()
    argtypes = (numba.typeof(np.zeros((2, 2), np.float32)),) * 2
    with _target((9, 0)):
        compile_cuda(kernel, numba.types.void, argtypes, cc=full_cc((9, 0)))


def build(
    function: Any,
    options: dict[str, Any],
    argtypes: tuple[Any, ...],
    cc: tuple[int, int],
    max_registers: tuple[int | None, ...] = (None,),
) -> list[Built | LinkFailed]:
    """Compile the kernel function for ``argtypes`` and ``cc`` once, to PTX, and link it to a
    cubin for each of the ``max_registers`` caps, which only linking reads, on threads of their
    own (nvJitLink lets go of the GIL). A compile error raises; a link error fails that kernel.
    numba's live-variable analysis is :mod:`numbatune.compilers.numba_liveness`'s."""
    from numba import cuda
    from numba.cuda.dispatcher import _Kernel

    started = time.perf_counter()
    liveness.install()
    target = full_cc(cc)
    with _target(cc):
        dispatcher = cuda.jit(**options)(function)
        kernel = _Kernel(dispatcher.py_func, argtypes, **dispatcher.targetoptions)
        library = code_library(kernel)
        library.get_ltoir(cc=target) if library._lto else library.get_asm_str(cc=target)
        compiled_s = time.perf_counter() - started
        with ThreadPoolExecutor(len(max_registers)) as links:
            return list(links.map(lambda cap: _linked(kernel, cap, target, compiled_s),
                                  max_registers))  # fmt: skip


def _linked(kernel: Any, cap: int | None, target: Any, compiled_s: float) -> Built | LinkFailed:
    """``kernel``, compiled, linked with register cap ``cap``; ``compiled_s``: its compile time."""
    from numba.cuda.cudadrv import driver

    started = time.perf_counter()
    library = code_library(kernel)
    try:
        linker = driver._Linker(max_registers=cap, cc=target, lto=library._lto)
        library._link_all(linker, target)
        cubin = linker.complete()
    except Exception as error:
        return LinkFailed(f"{type(error).__name__}: {error}")
    info = linker.info_log
    linked = {"cubin_cache": {target: cubin}, "linkerinfo_cache": {target: info},
              "max_registers": cap}  # fmt: skip
    seconds = compiled_s + time.perf_counter() - started
    return Built(dumps_kernel(kernel, linked), resources_of(info), toolchain(), seconds)


_RESOURCES = {
    "registers": r"Used (\d+) registers",
    "stack_bytes": r"(\d+) bytes stack frame",
    "spill_store_bytes": r"(\d+) bytes spill stores",
    "spill_load_bytes": r"(\d+) bytes spill loads",
    "shared_bytes": r"(\d+) bytes smem",
}


def resources_of(info_log: str) -> Resources | None:
    """The resources an assembler's verbose log reports, or None where it reports none."""
    found = {}
    for name, pattern in _RESOURCES.items():
        match = re.search(pattern, info_log or "")
        found[name] = int(match.group(1)) if match else 0
    return Resources(**found) if re.search(_RESOURCES["registers"], info_log or "") else None
