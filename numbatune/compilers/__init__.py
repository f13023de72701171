"""Kernel compilers numbatune tunes the kernels of, behind one seam
(:class:`~numbatune.compilers.base.KernelCompiler`): numba-cuda, and numba-cuda-mlir where it
is installed, side by side. The user's kernel object chooses its compiler
(:func:`compiler_for`); adding one is adding an implementation to :data:`COMPILERS` (from
outside, :func:`register`), with no change elsewhere.
"""

from __future__ import annotations

from typing import Any

from numbatune.compilers import mlir_kernels
from numbatune.compilers.base import KernelCompiler, Unwrapped
from numbatune.compilers.numba_cuda import NumbaCuda
from numbatune.compilers.numba_cuda_mlir import NumbaCudaMlir

NUMBA_CUDA = NumbaCuda()
NUMBA_CUDA_MLIR = NumbaCudaMlir()

#: The compilers, asked in order whether a kernel is theirs: numba-cuda-mlir only where it is
#: installed (it is not imported until one of its kernels is met).
COMPILERS: list[KernelCompiler] = [NUMBA_CUDA] + [NUMBA_CUDA_MLIR] * mlir_kernels.installed()

__all__ = [
    "COMPILERS",
    "NUMBA_CUDA",
    "NUMBA_CUDA_MLIR",
    "KernelCompiler",
    "Unwrapped",
    "available",
    "compiler_for",
    "register",
]


def available() -> dict[str, str]:
    """The known compilers' ``{name: version}``: ``"not installed"`` for those not installed."""
    found = {compiler.name: compiler.version for compiler in COMPILERS}
    for compiler in (NUMBA_CUDA, NUMBA_CUDA_MLIR):
        found.setdefault(compiler.name, "not installed")
    return found


def compiler_for(kernel: Any, name: str = "") -> KernelCompiler:
    """The first of :data:`COMPILERS` that claims ``kernel`` (a user's kernel, or one a
    compiler made); where none does, a TypeError naming the tuned kernel ``name``."""
    for compiler in COMPILERS:
        if compiler.claims(kernel):
            return compiler
    raise TypeError(
        f"autotune({name}): expected a numba.cuda.jit kernel (numba-cuda's or "
        f"numba-cuda-mlir's) or a plain Python function, got {type(kernel).__name__}"
    )


def register(compiler: KernelCompiler) -> None:
    """Add a compiler, asked before those known so far.

    Parameters
    ----------
    compiler
        The compiler.
    """
    COMPILERS.insert(0, compiler)
