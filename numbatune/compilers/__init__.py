"""Kernel compilers numbatune tunes the kernels of, behind one seam
(:class:`~numbatune.compilers.base.KernelCompiler`); numba-cuda is the first.

The user's kernel object chooses its compiler (:func:`compiler_for`). Adding a compiler is
adding an implementation to :data:`COMPILERS` (or, from outside, :func:`register`); dispatch,
the tune cache, tuning, compiling in workers and trial runs need no change. The fast path
(:mod:`numbatune.launch`) plans numba-cuda's kernel parameters: another compiler's
:meth:`~KernelCompiler.overload_for` gives a reason not to take its overloads, and its kernels
are launched through its own launch.
"""

from __future__ import annotations

from typing import Any

from numbatune.compilers.base import KernelCompiler, Unwrapped
from numbatune.compilers.numba_cuda import NumbaCuda

NUMBA_CUDA = NumbaCuda()

#: The compilers, asked in order whether a kernel is theirs.
COMPILERS: list[KernelCompiler] = [NUMBA_CUDA]

__all__ = ["COMPILERS", "NUMBA_CUDA", "KernelCompiler", "Unwrapped", "compiler_for", "register"]


def compiler_for(kernel: Any, name: str = "") -> KernelCompiler:
    """The compiler whose kernel ``kernel`` is (a user's kernel, or one a compiler made).

    Parameters
    ----------
    kernel
        The kernel object.
    name
        The tuned kernel's name, for the message.

    Returns
    -------
    KernelCompiler
        The first of :data:`COMPILERS` that claims it.

    Raises
    ------
    TypeError
        No compiler claims it; the message says which kernels are supported.
    """
    for compiler in COMPILERS:
        if compiler.claims(kernel):
            return compiler
    kind = type(kernel)
    if kind.__module__.partition(".")[0] == "numba_cuda_mlir":
        raise TypeError(
            f"autotune({name}): {name} is a numba-cuda-mlir kernel ({kind.__module__}."
            f"{kind.__qualname__}), which numbatune does not support yet; it supports "
            "numba-cuda's numba.cuda.jit kernels and plain Python functions"
        )
    raise TypeError(
        f"autotune({name}): expected a numba.cuda.jit kernel or a plain Python function, "
        f"got {kind.__name__}"
    )


def register(compiler: KernelCompiler) -> None:
    """Add a compiler, asked before those known so far.

    Parameters
    ----------
    compiler
        The compiler.
    """
    COMPILERS.insert(0, compiler)
