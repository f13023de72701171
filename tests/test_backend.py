"""The import order: numba.cuda imported before numbatune, on a machine with no GPU, leaves numba
on the real driver; defining a tuned kernel then says what to do, and doing it works."""

import os
import subprocess
import sys

import pytest

from numbatune._backend import (
    IMPORTED_TOO_LATE,
    NOTICE_GIVEN_VARIABLE,
    SIMULATOR_NOTICE,
    cuda_device_count,
)

SCRIPT = """
from numba import cuda
import numpy as np
import numbatune as nt

@nt.autotune(variants=nt.product(BLOCK=[4]), launch=lambda x, *, BLOCK: (1, BLOCK))
@cuda.jit
def fill(x):
    x[cuda.grid(1)] = 7

x = cuda.to_device(np.zeros(4, np.int32))
fill(x)
print(x.copy_to_host().tolist())
"""


def _run(script: str = SCRIPT, **environment: str) -> subprocess.CompletedProcess:
    chosen = ("NUMBA_ENABLE_CUDASIM", NOTICE_GIVEN_VARIABLE)
    env = {k: v for k, v in os.environ.items() if k not in chosen}
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**env, **environment}, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.skipif(cuda_device_count() > 0, reason="with a GPU, numba.cuda may come first")
def test_numba_cuda_imported_first_without_a_gpu_says_what_to_do_at_the_kernels_definition():
    done = _run()
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"numbatune.errors.BackendError: {IMPORTED_TOO_LATE}"
    )
    assert "CudaSupportError" not in done.stderr
    assert "NUMBA_ENABLE_CUDASIM=1" in IMPORTED_TOO_LATE and "import numbatune" in IMPORTED_TOO_LATE


def test_with_the_simulator_asked_for_numba_cuda_may_be_imported_first():
    done = _run(NUMBA_ENABLE_CUDASIM="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[7, 7, 7, 7]"


#: Defines a tuned kernel, which under the simulator gives the notice, the first of a process.
DEFINE = """
import numbatune as nt
from numba import cuda

nt.autotune(variants=[{}], launch=lambda x: (1, 1))(cuda.jit(lambda x: None))
"""
#: Says it imported numbatune, defines a kernel, then starts a process that defines one too.
NOTICE_SCRIPT = f"""
import subprocess, sys
import numbatune

print("imported", file=sys.stderr, flush=True)
{DEFINE}
subprocess.run([sys.executable, "-c", {DEFINE!r}], check=True)
"""


@pytest.mark.skipif(cuda_device_count() > 0, reason="the simulator is chosen only without a GPU")
def test_the_simulator_notice_comes_with_the_first_kernel_in_100_columns_and_once():
    done = _run(NOTICE_SCRIPT)
    assert done.returncode == 0, done.stderr
    # Not at import (the command line's help and cache commands run no kernel); not again in
    # the processes started after it; within 100 columns.
    assert done.stderr.splitlines() == ["imported", SIMULATOR_NOTICE], done.stderr
    assert len(SIMULATOR_NOTICE) <= 100


FORK_AFTER_IMPORT = """
import ctypes, os
from numbatune.arrays import SIMULATOR
assert not SIMULATOR, "a GPU is there: the simulator must not be chosen"
pid = os.fork()
if pid == 0:  # the child uses CUDA for the first time
    driver, count = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(0)
    ok = driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0
    os._exit(0 if ok and count.value > 0 else 1)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.gpu
def test_a_process_forked_after_importing_numbatune_can_use_cuda():
    """Choosing between the GPU and the simulator does not initialise CUDA in the importing
    process (the driver is asked in a child): a process forked from it, before it used CUDA,
    can use CUDA, as after importing numba or torch."""
    done = _run(FORK_AFTER_IMPORT)
    assert done.stdout.strip() == "0", done.stderr
