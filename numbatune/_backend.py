"""Choosing between a real GPU and numba's CUDA simulator, before numba.cuda is imported.

numba.cuda chooses once, when first imported, from ``NUMBA_ENABLE_CUDASIM``. Where no CUDA
device can be used, numbatune turns the simulator on, unless the user set the variable or
imported numba.cuda first. It sets the variable only while it imports numba.cuda, then removes
it from the environment and from numba's copy of it: child processes make their own choice,
and numba's later re-reads of its settings keep this one (a simulated program that changes a
``NUMBA_*`` variable at run time should set ``NUMBA_ENABLE_CUDASIM=1`` itself).

Where numba.cuda was imported first, with no GPU, numba has chosen the real driver for good
(the user's ``cuda`` names its modules): defining a tuned kernel then raises
:class:`~numbatune.errors.BackendError`, saying what to do, instead of numba's
``CudaSupportError`` at the first launch.
"""

from __future__ import annotations

import ctypes
import enum
import importlib
import logging
import os
import subprocess
import sys
from typing import Any

from numbatune.errors import BackendError

logger = logging.getLogger("numbatune")

SIMULATOR_VARIABLE = "NUMBA_ENABLE_CUDASIM"

#: Set once the notice that the simulator is on was given, for the processes this one starts.
NOTICE_GIVEN_VARIABLE = "NUMBATUNE_SIMULATOR_NOTICE_GIVEN"

#: Said once, when the first tuned kernel is defined under the simulator numbatune chose (not at
#: import: the cache commands run no kernel).
SIMULATOR_NOTICE = (
    "numbatune: no CUDA GPU found; using numba's CUDA simulator "
    f"({SIMULATOR_VARIABLE}=0 prevents this)"
)

IMPORTED_TOO_LATE = (
    "numba.cuda was imported before numbatune on a machine with no CUDA GPU, so numba uses the "
    "real CUDA driver and no kernel can run: import numbatune before numba (it then turns on "
    f"numba's CUDA simulator), or set {SIMULATOR_VARIABLE}=1"
)


class Backend(enum.Enum):
    """What :func:`select_backend` found."""

    #: A GPU, or the user's own choice (``NUMBA_ENABLE_CUDASIM`` set, or numba.cuda imported
    #: first where a GPU or the simulator can run it).
    AS_CHOSEN = enum.auto()
    #: No GPU: numbatune turned numba's simulator on.
    SIMULATOR = enum.auto()
    #: No GPU, and numba.cuda was imported first, for the real driver: nothing can run.
    NO_GPU_FOR_THE_DRIVER = enum.auto()


backend = Backend.AS_CHOSEN

_CONFIG_MODULES = ("numba.core.config", "numba.cuda.core.config")


#: ``count(library)``: the devices the CUDA driver in ``library`` reports (0 where it fails).
_COUNT = """
import ctypes


def count(library):
    devices = ctypes.c_int(0)
    driver = ctypes.CDLL(library)
    ok = driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(devices)) == 0
    return devices.value if ok else 0
"""


def _driver_library() -> str | None:
    """The name of the CUDA driver's library that loads here (loading it starts nothing), or
    None without one."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return name
    return None


def cuda_device_count() -> int:
    """The number of CUDA devices the driver reports, or 0 without a driver; imports nothing.
    Asked in a child process: a driver initialised here (``cuInit``) would leave the processes
    forked from this one unable to use CUDA."""
    library = _driver_library()
    if library is None:
        return 0
    if not sys.executable:  # an embedded interpreter, with no Python to run: asked here
        namespace: dict[str, Any] = {}
        exec(_COUNT, namespace)
        return int(namespace["count"](library))
    try:
        asked = subprocess.run(
            [sys.executable, "-I", "-S", "-c", f"{_COUNT}\nimport sys\nprint(count(sys.argv[1]))",
             library],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return int(asked.stdout.strip() or 0) if asked.returncode == 0 else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def select_backend() -> None:
    """Turn numba's CUDA simulator on when no GPU can be used and the user has not chosen
    (:data:`backend` says what it found)."""
    global backend
    if SIMULATOR_VARIABLE in os.environ:
        return
    if "numba.cuda" in sys.modules:
        if not sys.modules["numba.cuda"].config.ENABLE_CUDASIM and cuda_device_count() == 0:
            backend = Backend.NO_GPU_FOR_THE_DRIVER
            logger.warning("numbatune: %s", IMPORTED_TOO_LATE)
        return
    if cuda_device_count() > 0:
        return
    backend = Backend.SIMULATOR
    os.environ[SIMULATOR_VARIABLE] = "1"
    try:
        if "numba" in sys.modules:  # numba has read its settings already: read them again
            sys.modules["numba"].core.config.reload_config()
        importlib.import_module("numba.cuda")  # numba.cuda chooses the simulator, for good
    finally:
        del os.environ[SIMULATOR_VARIABLE]
        for name in _CONFIG_MODULES:  # numba's copy of the environment forgets it too
            reloader = getattr(sys.modules.get(name), "_env_reloader", None)
            if reloader is not None:
                reloader.old_environ.pop(SIMULATOR_VARIABLE, None)


def require_a_backend() -> None:
    """Raise :class:`BackendError`, saying what to do, where no kernel can run in this process
    (numba.cuda imported first, no GPU); where numbatune chose the simulator, say so once in
    this process and those it starts."""
    if backend is Backend.NO_GPU_FOR_THE_DRIVER:
        raise BackendError(IMPORTED_TOO_LATE)
    if backend is Backend.SIMULATOR and NOTICE_GIVEN_VARIABLE not in os.environ:
        os.environ[NOTICE_GIVEN_VARIABLE] = "1"
        logger.warning(SIMULATOR_NOTICE)
