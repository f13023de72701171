"""Kernels for the tests, written as numba users write them: constants are module globals."""

import math
from pathlib import Path
from types import ModuleType

from numba import cuda

import numbatune as nt
from numbatune.demo import load_module

BLOCK = 4
REPS = 1


def matmul_launch(A, B, C, *, TPB):
    return (nt.cdiv(C.shape[0], TPB), nt.cdiv(C.shape[1], TPB)), (TPB, TPB)


def load_example(name: str) -> ModuleType:
    """The module examples/NAME.py (examples/ is not a package), loaded afresh."""
    return load_module(Path(__file__).parents[1] / "examples" / f"{name}.py")


#: numba-cuda's documentation example, unchanged (it reads the global TPB of examples/matmul.py).
fast_matmul = load_example("matmul").fast_matmul.py_func


def accumulate_launch(a, out, *, BLOCK):
    return nt.cdiv(a.shape[0], BLOCK), BLOCK


@cuda.jit
def grid_total(a, out):
    """A cooperative kernel: every block writes ``out[i + 1] = a[i]``, the grid waits, then one
    thread adds them up into ``out[0]``."""
    grid = cuda.cg.this_grid()
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i + 1] = a[i]
    grid.sync()
    if i == 0:
        total = 0.0
        for k in range(a.shape[0]):
            total += out[k + 1]
        out[0] = total


@cuda.jit
def accumulate(a, out):
    """out += a: a second launch would show in the result."""
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] += a[i]


@cuda.jit
def repeated_sine(a, out):
    """REPS dependent sines per element: more REPS is more work for the same result shape."""
    i = cuda.grid(1)
    if i < a.shape[0]:
        s = a[i]
        for _ in range(REPS):
            s = math.sin(s) + a[i]
        out[i] = s


def forget_shared_state(monkeypatch) -> None:
    """Tuned kernels made from now on share nothing in memory with earlier ones, as in a new
    process (kernels of the same code share their winners within a process)."""
    import collections

    from numbatune import shared

    monkeypatch.setattr(shared, "_shared", collections.OrderedDict())


def load_written(path: Path, text: str, monkeypatch) -> ModuleType:
    """The module ``text``, written to ``path`` and loaded as a new process would load it
    (tuned kernels made before share nothing in memory with its own)."""
    path.write_text(text)
    forget_shared_state(monkeypatch)
    return load_module(path)


@cuda.jit
def fill_with(x, value):
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = value


@cuda.jit
def wait_for_gate(gate):
    """Spin until ``gate[0]`` is set (by :func:`open_gate`, on another stream)."""
    while cuda.atomic.add(gate, 0, 0) == 0:
        cuda.nanosleep(1000)


@cuda.jit
def open_gate(gate):
    cuda.atomic.exch(gate, 0, 1)


def non_blocking_stream() -> int:
    """A raw CUDA stream that does not wait for the legacy default stream (nor it for it)."""
    from cuda.bindings import driver

    cuda.current_context()  # the stream belongs to numba's context
    error, stream = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
    assert not error
    return int(stream)


def to_host(array):
    """A numba, CuPy or torch device array's contents as a NumPy array."""
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "get"):
        return array.get()
    return array.cpu().numpy()


def store_keys(kernel: nt.TunedKernel) -> list[str]:
    """The kernel store's keys of a tuned kernel's variants (for sm_90, no argument types)."""
    from numbatune.compile.compiler import store_key

    return [store_key(kernel._template, v, (), (9, 0), ()) for v in kernel.variants]
