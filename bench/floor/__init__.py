"""The driver's floor for a launch, from a small CUDA C program (``floor.cu``): the dispatch
bench's kernel launched with ``cuLaunchKernel``, its parameters packed once, and with the
runtime's ``<<<>>>`` for reference.

``floor.cu`` is built with nvcc twice: as a program that times the two itself and prints JSON
(:func:`run_program`), and as a shared library whose batches of launches the dispatch bench
times in its own rounds, taking turns with the hits in the same process (:func:`batched`). Both
need nvcc (:func:`nvcc`) and a GPU; without them each says why not, as a string.

    python3 -m bench.floor [BATCHES [PER_BATCH]]
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("floor.cu")
#: The floor's methods: what ``floor_batch`` takes, by the name the bench reports.
METHODS = {"cuLaunchKernel, packed once": 0, "runtime <<<>>>": 1}


def nvcc() -> Path | None:
    """The CUDA compiler: on the path, else in ``CUDA_HOME`` or ``/usr/local/cuda``; or None."""
    homes = [home for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if home]
    found = [shutil.which("nvcc"), *(f"{home}/bin/nvcc" for home in homes)]
    return next((Path(path) for path in found if path and Path(path).is_file()), None)


def _arch() -> str | None:
    """The current GPU's architecture, as nvcc names it (``sm_90``), or None without a GPU."""
    from numba import cuda

    try:
        major, minor = cuda.get_current_device().compute_capability
    except Exception:  # (numba's errors where no driver or device is found)
        return None
    return f"sm_{major}{minor}"


def build(into: Path, library: bool) -> Path | str:
    """``floor.cu`` built into ``into`` as the program or (``library``) the shared library; or
    why it was not."""
    compiler = nvcc()
    if compiler is None:
        return "not run: no nvcc (set CUDA_HOME, or put nvcc on the path)"
    arch = _arch()
    if arch is None:
        return "not run: no GPU"
    target = into / ("libfloor.so" if library else "floor")
    flags = ["-shared", "-Xcompiler", "-fPIC", "-DFLOOR_LIBRARY"] if library else []
    done = subprocess.run(
        [str(compiler), f"-arch={arch}", "-O2", *flags, "-o", str(target), str(SOURCE), "-ldl"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        return f"not run: nvcc failed: {done.stderr.strip()[-500:]}"
    return target


def run_program(batches: int, per_batch: int) -> dict | str:
    """The program's own timing (JSON: each method's median and batches, in us per launch),
    built and run in a directory of its own; or why it did not run."""
    with tempfile.TemporaryDirectory(prefix="numbatune-floor-") as scratch:
        program = build(Path(scratch), library=False)
        if isinstance(program, str):
            return program
        done = subprocess.run([str(program), str(batches), str(per_batch)], capture_output=True,
                              text=True, check=False)  # fmt: skip
    if done.returncode:
        return f"not run: the floor program failed: {done.stderr.strip()[-500:]}"
    return json.loads(done.stdout)


@dataclass(frozen=True)
class Batch:
    """One of the floor's methods as the dispatch bench times it: ``batch(count)`` makes
    ``count`` launches in C, with no Python between them (calling it makes one)."""

    run: ctypes._CFuncPtr
    method: int

    def batch(self, count: int) -> None:
        error = self.run(self.method, count)
        if error:
            raise RuntimeError(f"the floor's launch failed: {error}")

    def __call__(self) -> None:
        self.batch(1)


def batched() -> dict[str, Batch] | str:
    """The floor's methods, loaded into this process (the shared library, built in a
    directory that is removed once it is loaded); or why not."""
    with tempfile.TemporaryDirectory(prefix="numbatune-floor-") as scratch:
        library = build(Path(scratch), library=True)
        if isinstance(library, str):
            return library
        run = ctypes.CDLL(str(library)).floor_batch
    run.argtypes, run.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    methods = {name: Batch(run, method) for name, method in METHODS.items()}
    try:
        next(iter(methods.values()))()
    except RuntimeError as error:
        return f"not run: {error}"
    return methods
