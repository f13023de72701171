"""Functions the tests run in worker processes (numbatune.processes imports them there)."""

import os
import time

#: The pid of the process that ran :func:`warm` (a fork server), in the workers forked from it.
WARMED_IN = None


def warm():
    global WARMED_IN
    WARMED_IN = os.getpid()


def warm_and_tell(path):
    """:func:`warm`, then write this process's pid to ``path`` (whole when it appears: written
    beside it, then renamed)."""
    warm()
    written = f"{path}.{os.getpid()}"
    with open(written, "w") as file:
        file.write(str(os.getpid()))
    os.replace(written, path)


def warmed_in():
    """Which process ran warm() before this worker was forked from it (None: none did), and
    this worker's parent."""
    return WARMED_IN, os.getppid()


def frozen_objects():
    """How many objects this worker's garbage collector leaves alone (gc.freeze)."""
    import gc

    return gc.get_freeze_count()


def numba_imported():
    import sys

    return "numba.cuda" in sys.modules


def square(x):
    return x * x


def fail(message):
    raise ValueError(message)


def die(status):
    os._exit(status)


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def load_kernel(payload, cc):
    """Load a compiled kernel in a process outside the simulator; its name and types."""
    from numbatune.compilers import NUMBA_CUDA

    kernel = NUMBA_CUDA.load(payload, cc)
    return kernel.entry_name, str(kernel.argument_types)


def device_functions():
    """The device functions this worker rebuilt: each one's name and how many signatures it
    compiled for."""
    from numbatune.compilers import function_pickle

    rebuilt = function_pickle._device_functions.values()
    return [(d.py_func.__name__, len(d.overloads)) for d in rebuilt]


def store_round_trip(cache_dir, cc, payload, damage):
    """Save ``payload`` in a kernel store, damage it as asked, and load it back: what load
    gives (a kernel's name or None), and whether the entry is still there."""
    import pickle
    import zlib
    from pathlib import Path

    from numbatune.compile.store import KernelStore
    from numbatune.compilers import numba_kernels

    store = KernelStore(Path(cache_dir), cc, "tests.kernel")
    cubins = {numba_kernels.full_cc(cc): b""}
    wrong = {
        "version": numba_kernels.PAYLOAD_VERSION,
        "library": {"cubin_cache": cubins},
        "kernel": {},
    }
    stored = {"garbage": b"not a kernel", "foreign": payload, "good": payload,
              "wrong contents": zlib.compress(pickle.dumps(wrong))}  # fmt: skip
    store.save("key", stored[damage])
    loaded = KernelStore(Path(cache_dir), cc if damage != "foreign" else (8, 0), "tests.kernel")
    if damage == "foreign":  # the same entry read for another compute capability
        loaded._folder = store._folder
    kernel = loaded.load("key")
    return (None if kernel is None else kernel.entry_name), loaded._open().get("key") is not None


def spoil():
    """Raise an error that says this worker must end (as a CUDA error in a trial does)."""
    error = RuntimeError(str(os.getpid()))
    error.end_worker = True
    raise error


def pid():
    return str(os.getpid())


class UnopenableHandle:
    """Stands for a CUDA IPC handle that the worker cannot open (another platform's refusal)."""

    def __enter__(self):
        raise OSError("this handle cannot be opened here")

    def __exit__(self, *details):
        return False


def built_counting_compiles(kernel_compiler, function_bytes, options, argtypes, cc, max_registers):
    """numbatune's worker task (``build_in_worker``), and how many numba compiles it made:
    each kernel's register cap and resources, and the count."""
    from numba.cuda import dispatcher

    from numbatune.compile import compiler
    from numbatune.compilers import NUMBA_CUDA, numba_kernels

    compile_cuda, calls = dispatcher.compile_cuda, []

    def counted(*args, **kwargs):
        calls.append(1)
        return compile_cuda(*args, **kwargs)

    dispatcher.compile_cuda = counted
    try:
        built = compiler.build_in_worker(
            kernel_compiler, function_bytes, options, argtypes, cc, max_registers
        )
    finally:
        dispatcher.compile_cuda = compile_cuda
    caps = [
        numba_kernels.code_library(NUMBA_CUDA.load(b.payload, cc))._max_registers for b in built
    ]
    return caps, [b.resources for b in built], len(calls)


def built_unlinked(max_registers):
    """numbatune's build of a kernel that calls a device function declared but never linked,
    once for each register cap."""
    import numba
    import numpy as np
    from numba import cuda

    from numbatune.compilers import NUMBA_CUDA

    missing = cuda.declare_device("numbatune_missing", "float32(float32)")

    def unlinked(a):
        a[0] = missing(a[0])

    argtypes = (numba.typeof(np.zeros(4, np.float32)),)
    return NUMBA_CUDA.builds.build(unlinked, {}, argtypes, (9, 0), max_registers)


def live_maps_compared(kernel_compiler, function_bytes, options, argtypes, cc, max_registers):
    """numbatune's worker task, with numba's live-variable analysis and numbatune's
    (:mod:`numbatune.compilers.numba_liveness`) run side by side wherever numba asks for one:
    how many times it asked, the most blocks one graph had, and how many maps differed."""
    from numba.cuda.core import analysis, ir_utils

    from numbatune.compile import compiler
    from numbatune.compilers import numba_liveness as liveness

    numbas = analysis.compute_live_map
    assert numbas.__module__ == analysis.__name__  # numba's own, not replaced in this worker
    blocks_seen, differing = [], []

    def compared(cfg, blocks, var_use_map, var_def_map):
        expected = numbas(cfg, blocks, var_use_map, var_def_map)
        blocks_seen.append(len(blocks))
        if liveness.compute_live_map(cfg, blocks, var_use_map, var_def_map) != expected:
            differing.append(len(blocks))
        return expected

    liveness.install = lambda: True  # (the build would put numbatune's in numba's place)
    analysis.compute_live_map = ir_utils.compute_live_map = compared
    compiler.build_in_worker(kernel_compiler, function_bytes, options, argtypes, cc, max_registers)
    return len(blocks_seen), max(blocks_seen), len(differing)


def live_map_function():
    """Where numba-cuda's live-variable analysis comes from in this worker."""
    from numba.cuda.core import analysis, ir_utils

    return analysis.compute_live_map.__module__, ir_utils.compute_live_map.__module__


def compiler_library_not_found(path):
    """Fail as a compile does where NVRTC is not installed, noting the call in ``path``."""
    from cuda.pathfinder import DynamicLibNotFoundError

    with open(path, "a") as file:
        file.write("compiled\n")
    raise DynamicLibNotFoundError('Failure finding "libnvrtc.so.13": No such file: libnvrtc.so.13')


def append_records(path, writer, count):
    """Append ``count`` records of calls to ``path``, as the process ``writer`` would."""
    from numbatune import record

    for number in range(count):
        arguments = (writer, number, *range(100))  # long lines: many straddle pages
        record.write(path, "app.k", "app", "k", f"({writer}, {number})", arguments)
