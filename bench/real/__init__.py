"""Public numba-cuda kernels of real projects, each launched as its project launches it and as a
numbatune tuned kernel (``bench/real_kernels.py`` times the two against each other).

Each module ports one kernel (its header names the project, file, commit and licence;
``NOTICES.md`` holds the licences) and exposes the same small interface:

``SOURCE``, ``KIND``
    Where the kernel comes from, and what kind of kernel it is.
``SIZES``
    ``{"full": size, "smoke": size}``: the size for an H100 and the simulator's.
``TUNED``
    The tuned kernel: the same body under ``numbatune.autotune``, its compile-time constants
    (module globals the kernel reads) and launch values as variants.
``make_inputs(size, rng)``
    One copy of the inputs, an :class:`Inputs`.
``original(inputs, args)``
    One launch exactly as the project launches it (grid, block, constants, launch form); the
    benchmark launches ``TUNED(*args)`` against it.
``arguments(inputs, call)``
    The kernel's arguments for the call numbered ``call`` of a sequence of calls, as the
    project makes them (STUMPY's row, the checkerboard's colour); :func:`every_call` where
    they do not change.
``outputs(inputs)``
    Host copies of what the kernel computes, to compare the original's with the tuned one's
    (with ``TOLERANCE``, keyword arguments of ``numpy.testing.assert_allclose``);
    :func:`copied_outputs` where that is what the kernel writes.
``SIMULATOR_CANNOT`` (only where it applies)
    Why numba's simulator cannot run the kernel: the smoke run skips it.
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Inputs:
    """One copy of a kernel's inputs."""

    #: The kernel's arguments (device arrays and scalars), those of call 1 of a sequence.
    args: tuple[Any, ...]
    #: The device arrays the kernel writes, by name.
    outputs: dict[str, Any]
    #: What the project's launch takes: ``(grid, block)``, or ``forall``'s ``(count,)``.
    launch: tuple[Any, ...]


def every_call(inputs: Inputs, call: int) -> tuple[Any, ...]:
    """The arguments of kernels whose calls all take the same ones."""
    return inputs.args


def copied_outputs(inputs: Inputs) -> dict[str, Any]:
    """Host copies of the arrays the kernel writes."""
    return {name: array.copy_to_host() for name, array in inputs.outputs.items()}


KERNELS = (
    "stumpy",
    "upfirdn",
    "convolve2d",
    "ising",
    "csr_spmv",
    "reduce",
    "histogram",
    "nbody",
    "montecarlo",
)
