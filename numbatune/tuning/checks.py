"""Check mode: every variant's outputs compared with a reference while a key is tuned.

A variant that is fast but wrong is the worst outcome an autotuner can give. In check mode
each variant runs once on fresh copies of the caller's arguments, and every array argument it
leaves behind is compared with the reference's: by default the first variant that runs, or a
user function on host copies of the arguments. A variant that disagrees cannot win; the
report, the disk cache and a warning say which output differed, in how many elements, and by
how much at most.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatune import arrays
from numbatune.streams.handles import synchronize

#: (rtol, atol) by dtype kind and item size, for ``Check()`` without tolerances.
_TOLERANCES = {
    ("f", 2): (1e-2, 1e-3),
    ("f", 4): (1e-4, 1e-6),
    ("f", 8): (1e-10, 1e-13),
    ("c", 8): (1e-4, 1e-6),
    ("c", 16): (1e-10, 1e-13),
}


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for comparing arrays of ``dtype``: exact for integers and booleans."""
    dtype = np.dtype(dtype)
    return _TOLERANCES.get((dtype.kind, dtype.itemsize), (0.0, 0.0))


@dataclass(frozen=True)
class Check:
    """How check mode compares variants: ``@autotune(check=Check(...))`` or ``check=True``.

    ``reference``, when given, is called with host (NumPy) copies of the arguments and must
    leave in them what the kernel leaves in its arrays; it may instead return the expected
    value of the last array argument. Without it the reference is the first variant that runs.
    ``rtol``/``atol`` default per dtype (:func:`default_tolerance`); NaNs compare equal to NaNs.
    """

    rtol: float | None = None
    atol: float | None = None
    reference: Callable[..., Any] | None = None

    def tolerance(self, dtype: Any) -> tuple[float, float]:
        """The (rtol, atol) this check uses for ``dtype``."""
        rtol, atol = default_tolerance(dtype)
        return (
            rtol if self.rtol is None else self.rtol,
            atol if self.atol is None else self.atol,
        )


@dataclass(frozen=True)
class Mismatch:
    """Where a variant's outputs differ from the reference's."""

    #: The argument that differs (its name in the kernel's signature).
    output: str
    #: How many of its elements differ beyond the tolerance, of how many.
    count: int
    size: int
    #: The largest absolute difference (inf where one side is NaN or infinite and the other not).
    largest_error: float

    def __str__(self) -> str:
        return (
            f"{self.output}: {self.count} of {self.size} elements differ, largest error "
            f"{self.largest_error:.6g}"
        )


def as_check(check: bool | Check | None, kernel_name: str) -> Check | None:
    """The ``check=`` argument of :func:`numbatune.autotune` as a :class:`Check` or None."""
    if check is None or check is False:
        return None
    if check is True:
        return Check()
    if isinstance(check, Check):
        return check
    raise TypeError(
        f"autotune({kernel_name}): check must be True, False, None or numbatune.Check(...), "
        f"got {check!r}"
    )


def host_outputs(args: Sequence[Any], stream: Any = 0) -> list[np.ndarray | None]:
    """Host copies of the array arguments (None for the others), once ``stream`` has passed
    the work queued on it."""
    from numba import cuda

    host = [
        (a if hasattr(a, "copy_to_host") else cuda.as_cuda_array(a)).copy_to_host(stream=stream)
        if arrays.is_array(a)
        else None
        for a in args
    ]
    synchronize(stream)
    return host


def reference_outputs(check: Check, args: Sequence[Any], stream: Any = 0) -> list[Any]:
    """What ``check.reference`` says the array arguments hold after the kernel."""
    assert check.reference is not None
    copies = host_outputs(args, stream)
    host = [a if copy is None else copy for a, copy in zip(args, copies, strict=True)]
    returned = check.reference(*host)
    outputs = [h if arrays.is_array(a) else None for a, h in zip(args, host, strict=True)]
    if returned is not None:
        last = max(i for i, a in enumerate(args) if arrays.is_array(a))
        outputs[last] = np.asarray(returned)
    return outputs


def compare(
    expected: Sequence[np.ndarray | None],
    got: Sequence[np.ndarray | None],
    names: Sequence[str],
    check: Check,
) -> Mismatch | None:
    """The first array argument where ``got`` differs from ``expected``, or None."""
    for name, want, have in zip(names, expected, got, strict=True):
        if want is None or have is None:
            continue
        want, have = np.asarray(want), np.asarray(have)
        if want.shape != have.shape:
            return Mismatch(name, have.size, have.size, float("inf"))
        rtol, atol = check.tolerance(have.dtype)
        close = np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            differ = ~close
            with np.errstate(invalid="ignore", over="ignore"):
                errors = np.abs(have[differ].astype(np.complex128) - want[differ])
            largest = float(np.nan_to_num(errors, nan=np.inf).max())
            return Mismatch(name, int(differ.sum()), int(have.size), largest)
    return None
