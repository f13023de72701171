"""Choosing between a real GPU and numba's CUDA simulator, before numba.cuda is imported.

numba.cuda chooses between the two once, when it is first imported, from
``NUMBA_ENABLE_CUDASIM``. On a machine with no usable CUDA device a real launch can only fail,
so numbatune turns the simulator on there, unless the user has set the variable (to anything)
or has already imported numba.cuda. It sets the variable only while it imports numba.cuda, then
removes it again, from the environment and from the copy numba keeps to notice changes: child
processes do not inherit the choice (each makes its own when it imports numbatune), and numba's
later re-reads of its settings keep it. (numba re-reads every setting when a ``NUMBA_*``
variable changes; a program that changes one at run time, in a simulated process, should set
``NUMBA_ENABLE_CUDASIM=1`` itself.)
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import sys

logger = logging.getLogger("numbatune")

SIMULATOR_VARIABLE = "NUMBA_ENABLE_CUDASIM"

_CONFIG_MODULES = ("numba.core.config", "numba.cuda.core.config")


def cuda_device_count() -> int:
    """The number of CUDA devices the driver reports, or 0 without a driver; imports nothing."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            libcuda = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def select_backend() -> None:
    """Turn numba's CUDA simulator on when no GPU can be used and the user has not chosen."""
    if SIMULATOR_VARIABLE in os.environ or "numba.cuda" in sys.modules:
        return
    if cuda_device_count() > 0:
        return
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
    logger.warning(
        "numbatune: no CUDA GPU found; using numba's CUDA simulator (set %s=0 to prevent this)",
        SIMULATOR_VARIABLE,
    )
