"""numbatune: decorator-based autotuning for Numba-CUDA kernels.

>>> @numbatune.autotune(variants=numbatune.product(TPB=[8, 16, 32]), launch=...)
... @cuda.jit
... def kernel(...): ...
"""

from numbatune._backend import select_backend

select_backend()

from numbatune._version import __version__  # noqa: E402
from numbatune.cachefile import cache_import  # noqa: E402
from numbatune.checks import Check, Mismatch  # noqa: E402
from numbatune.config import configure, load_environment, settings  # noqa: E402
from numbatune.device import nonnegative  # noqa: E402
from numbatune.dispatch import TunedKernel, autotune  # noqa: E402
from numbatune.keys import TuningKeyError, anchor  # noqa: E402
from numbatune.streams import (  # noqa: E402
    Profile,
    ProfileError,
    ProfileToken,
    StreamError,
    end_profile,
    memory_cleanup,
    memory_usage,
    profile,
    start_profile,
)
from numbatune.tuner import TuneReport, TuningError, VariantResult  # noqa: E402
from numbatune.unroll import static_range  # noqa: E402
from numbatune.variants import Variant, product  # noqa: E402

load_environment()


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for grid sizes: ``cdiv(1000, 256) == 4``."""
    return -(-a // b)


__all__ = [
    "Check",
    "Mismatch",
    "Profile",
    "ProfileError",
    "ProfileToken",
    "StreamError",
    "TuneReport",
    "TunedKernel",
    "TuningError",
    "TuningKeyError",
    "Variant",
    "VariantResult",
    "__version__",
    "anchor",
    "autotune",
    "cache_import",
    "cdiv",
    "configure",
    "end_profile",
    "memory_cleanup",
    "memory_usage",
    "nonnegative",
    "product",
    "profile",
    "settings",
    "start_profile",
    "static_range",
]
