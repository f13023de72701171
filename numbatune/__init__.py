"""numbatune: decorator-based autotuning for Numba-CUDA kernels.

>>> @numbatune.autotune(variants=numbatune.product(TPB=[8, 16, 32]), launch=...)
... @cuda.jit
... def kernel(...): ...
"""

from numbatune._backend import select_backend

select_backend()

from numbatune import config as _config  # noqa: E402
from numbatune._version import __version__  # noqa: E402
from numbatune.background import wait_for_background_tuning  # noqa: E402
from numbatune.cache.files import cache_import  # noqa: E402
from numbatune.config import OnMiss, Timing, configure, settings  # noqa: E402
from numbatune.decorator import autotune  # noqa: E402
from numbatune.dispatch import TunedKernel  # noqa: E402
from numbatune.errors import (  # noqa: E402
    BackendError,
    CacheFileError,
    CaptureError,
    KernelSourceError,
    LaunchFunctionError,
    NumbatuneError,
    ProfileError,
    StreamError,
    TuningError,
    TuningKeyError,
)
from numbatune.intrinsics import nonnegative  # noqa: E402
from numbatune.keys import anchor  # noqa: E402
from numbatune.launch.config import by_shape  # noqa: E402
from numbatune.strategies import Budget, Strategy  # noqa: E402
from numbatune.streams.memory import memory_cleanup, memory_usage  # noqa: E402
from numbatune.streams.monitor import end_profile, profile, start_profile  # noqa: E402
from numbatune.streams.profiles import Profile, ProfileToken  # noqa: E402
from numbatune.tuning.checks import Check, Mismatch  # noqa: E402
from numbatune.tuning.results import (  # noqa: E402
    Lookup,
    Origin,
    Source,
    Status,
    TuneReport,
    VariantResult,
)
from numbatune.unroll import static_range  # noqa: E402
from numbatune.variants import Variant, product  # noqa: E402

_config.load_environment()


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for grid sizes.

    Parameters
    ----------
    a
        The dividend: the number of elements, say.
    b
        The divisor: the elements a block covers, say.

    Returns
    -------
    int
        The smallest integer not below ``a / b``: ``cdiv(1000, 256) == 4``.
    """
    return -(-a // b)


__all__ = [
    "BackendError",
    "Budget",
    "CacheFileError",
    "CaptureError",
    "Check",
    "KernelSourceError",
    "LaunchFunctionError",
    "Lookup",
    "Mismatch",
    "NumbatuneError",
    "OnMiss",
    "Origin",
    "Profile",
    "ProfileError",
    "ProfileToken",
    "Source",
    "Status",
    "Strategy",
    "StreamError",
    "Timing",
    "TuneReport",
    "TunedKernel",
    "TuningError",
    "TuningKeyError",
    "Variant",
    "VariantResult",
    "__version__",
    "anchor",
    "autotune",
    "by_shape",
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
    "wait_for_background_tuning",
]
