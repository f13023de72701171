"""Choosing between a real GPU and numba's CUDA simulator, before numba is imported.

numba.cuda reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported. On a machine with no
usable CUDA device a real launch can only fail, so numbatune turns the simulator on there,
unless the user has set the variable (to anything) or has already imported numba.cuda.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

logger = logging.getLogger("numbatune")

SIMULATOR_VARIABLE = "NUMBA_ENABLE_CUDASIM"


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
    if cuda_device_count() == 0:
        os.environ[SIMULATOR_VARIABLE] = "1"
        if "numba" in sys.modules:  # numba has read its settings already: read them again
            sys.modules["numba"].core.config.reload_config()
        logger.warning(
            "numbatune: no CUDA GPU found; using numba's CUDA simulator (set %s=0 to prevent this)",
            SIMULATOR_VARIABLE,
        )
