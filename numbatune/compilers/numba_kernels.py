"""numba-cuda's kernels: specialised dispatchers (and their simulator copies), compiled kernels
serialised and loaded, and the overload numba chooses for a kernel declared with signatures.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from numba import cuda

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers import payloads

#: The compiler's name, in identities and messages.
NAME = "numba-cuda"


@functools.cache
def dispatcher_class() -> type:
    """The class of numba's ``cuda.jit`` kernels (its simulator's, under the simulator)."""
    if SIMULATOR:
        from numba.cuda.simulator.kernel import FakeCUDAKernel

        return FakeCUDAKernel
    from numba.cuda.dispatcher import CUDADispatcher

    return CUDADispatcher


#: The format of a serialised kernel (:func:`dumps_kernel`); part of the kernel store's keys.
PAYLOAD_VERSION = 1


def full_cc(cc: tuple[int, int]) -> tuple[int, int, str]:
    """numba's form of a compute capability: (major, minor, 'a') from 9.0 on."""
    return (cc[0], cc[1], "a" if cc >= (9, 0) else "")


def code_library(kernel: Any) -> Any:
    """A compiled kernel's code library (its LLVM IR, PTX, cubins and linking)."""
    return kernel._codelibrary


def dumps_kernel(kernel: Any, linked: dict[str, Any] | None = None) -> bytes:
    """A compiled numba kernel serialised (its cubin and PTX, not its LLVM IR); ``linked``: its
    cubin, linker log and register cap, where they were linked apart from its library."""
    from numba.cuda import cloudpickle

    states = {k: v for k, v in kernel._reduce_states().items() if k != "codelibrary"}
    library_states = {**_library_states(code_library(kernel)), "llvm_strs": [], **(linked or {})}
    # numba's cloudpickle: an exception class of the user's script that a debug kernel raises
    # crosses to and from a worker (by value, and back as the script's own class)
    payload = {"kernel": states, "library": library_states}
    return payloads.pack(PAYLOAD_VERSION, payload, pickler=cloudpickle)


def _library_states(library: Any) -> dict[str, Any]:
    """numba's states of a code library, also where it links files (``cuda.fp16``'s, a
    kernel's ``link=``): numba refuses those, for its disk cache links a kernel again where
    it loads it; a payload holds the linked cubin (NRT, the one file numba keeps, is kept)."""
    from numba.cuda.codegen import NRT_LIBRARY

    alone = object.__new__(type(library))  # (copy.copy would reduce it, as pickling does)
    alone.__dict__.update(vars(library), _linking_files=library._linking_files & {NRT_LIBRARY})
    return alone._reduce_states()


def load(payload: bytes, cc: tuple[int, int]) -> Any:
    """The kernel :func:`dumps_kernel` serialised; ValueError when it is not one, or holds no
    cubin for ``cc``."""
    from numba.cuda.codegen import CUDACodeLibrary
    from numba.cuda.dispatcher import _Kernel

    states = payloads.unpack(payload, PAYLOAD_VERSION, NAME)
    library, kernel = states.get("library"), states.get("kernel")
    if not isinstance(library, dict) or not isinstance(kernel, dict):
        raise ValueError("not a compiled kernel (no code library and kernel)")
    cubins = library.get("cubin_cache")
    if not isinstance(cubins, dict) or full_cc(cc) not in cubins:
        raise ValueError(f"it holds no cubin for sm_{cc[0]}{cc[1]}")
    try:
        rebuilt = _Kernel._rebuild(codelibrary=CUDACodeLibrary._rebuild(**library), **kernel)
    except Exception as error:  # this format, but not the parts numba rebuilds a kernel from
        raise ValueError(f"not a compiled kernel ({type(error).__name__}: {error})") from None
    # numba's _Kernel() sets it and its _rebuild does not: a dispatcher that compiles no more
    # reads it of every overload to refuse a call that matches none ('_Kernel' object has no
    # attribute 'objectmode', instead of numba's No matching definition)
    rebuilt.objectmode = False
    return rebuilt


def jit(copy: types.FunctionType, original: types.FunctionType, options: dict[str, Any]) -> Any:
    """``numba.cuda.jit(**options)(copy)`` for a variant's ``copy`` of ``original`` (a kernel,
    or a device function with ``device=True``).

    Under the simulator, while the copy runs, the module of ``original`` holds the simulator's
    ``cuda`` too, as it does while ``original`` runs: the simulator puts its ``cuda`` into the
    globals of the function it runs (the copy's own), and a plain Python helper the kernel
    calls reads ``cuda`` from its module (``cuda.local.array``, say).
    """
    dispatcher = cuda.jit(**options)(copy)
    if SIMULATOR:
        dispatcher.__class__ = _simulated_copy_class()
        dispatcher.original = original
    return dispatcher


class _RunningKernelsCuda:
    """Under the simulator: stands for the ``cuda`` module of the kernel running now (the
    simulator makes one per launch, once the launch has begun)."""

    def __getattr__(self, name: str) -> Any:
        from numba.cuda.simulator.kernel import _get_kernel_context

        return getattr(_get_kernel_context(), name)


@functools.cache
def _simulated_copy_class() -> type:
    """The class of a variant's kernels and device functions under the simulator: numba's
    simulated dispatcher, which also gives ``original``'s module the simulator's ``cuda``
    while it runs (made on first use: its base class exists only under the simulator)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel
    from numba.cuda.simulator.kernelapi import swapped_cuda_module

    class SimulatedCopy(FakeCUDAKernel):
        original: types.FunctionType

        def __call__(self, *args: Any) -> Any:
            with swapped_cuda_module(self.original, _RunningKernelsCuda()):
                return super().__call__(*args)

    return SimulatedCopy


def device_options(dispatcher: Any) -> dict[str, Any]:
    """The options a kernel or device function was made with, ``device`` aside (the simulator
    keeps two, privately)."""
    if SIMULATOR:
        return {"fastmath": dispatcher._fastmath, "debug": dispatcher._debug}
    return {k: v for k, v in dispatcher.targetoptions.items() if k != "device"}


def declared_overload(dispatcher: Any, signature: tuple[Any, ...]) -> Any:
    """The compiled overload numba would convert arguments typed ``signature`` to, as it chooses one
    for a kernel declared with signatures; None where none (or several) would take them."""
    from numba.core import types as numba_types
    from numba.core.typing import signature as make_signature

    cases = [make_signature(numba_types.void, *argtypes) for argtypes in dispatcher.overloads]
    try:
        chosen = dispatcher.typingctx.resolve_overload(
            dispatcher.py_func, cases, signature, {}, allow_ambiguous=False
        )
    except TypeError:  # ambiguous: numba refuses the call too
        return None
    return None if chosen is None else dispatcher.overloads.get(tuple(chosen.args))


#: Values of numba.cuda.jit's options that mean "as numba does by default". numba resolves
#: its defaults when a kernel is decorated (a GPU process sees lto=True, opt=True, ...) and its
#: simulator keeps only two options: a kernel's options are what differs from these, the same
#: in both, so that its checksum and compiled-kernel keys are too.
_DEFAULT_OPTIONS: dict[str, tuple[Any, ...]] = {
    "debug": (False, None),
    "fastmath": (False,),
    "opt": (True, None),
    "lineinfo": (False,),
    "launch_bounds": (None,),
    "lto": (True, None),
    "forceinline": (False,),
    "inline": ("never",),
    "shared_memory_carveout": (None,),
    "extensions": ([], (), None),
    "link": ((), [], None),
    "max_registers": (None,),
}


def is_default(name: str, value: Any) -> bool:
    return value in _DEFAULT_OPTIONS.get(name, ())
