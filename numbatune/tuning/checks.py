"""Check mode: every variant's outputs compared with a reference while a key is tuned.

A variant that is fast but wrong is the worst outcome an autotuner can give. In check mode each
variant runs once on fresh copies of the caller's arguments, and what it leaves is compared with
the reference's (:class:`Check`); one that disagrees cannot win, and the report, the disk cache
and a warning say where it differed (:class:`Mismatch`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatune import arrays
from numbatune.references import helpers, source_of
from numbatune.streams.handles import synchronize

#: (rtol, atol) by dtype kind and item size, for ``Check()`` without tolerances (others: exact).
_TOLERANCES = {
    ("f", 2): (1e-2, 1e-3),
    ("f", 4): (1e-4, 1e-6),
    ("f", 8): (1e-10, 1e-13),
    ("c", 8): (1e-4, 1e-6),
    ("c", 16): (1e-10, 1e-13),
}


@dataclass(frozen=True)
class Check:
    """How check mode compares variants: ``@autotune(check=Check(...))`` or ``check=True``.

    NaNs compare equal to NaNs. Record (structured) dtypes are compared field by field, each
    with its own tolerance.

    Parameters
    ----------
    rtol, atol
        Relative and absolute tolerances; None: by dtype (float32: 1e-4 and 1e-6, float64: 1e-10
        and 1e-13, float16: 1e-2 and 1e-3; exact for integers and booleans).
    reference
        Called with host (NumPy) copies of the arguments, it must leave in them what the
        kernel leaves in its arrays; it may instead return the expected value of the last
        array argument. None: the reference is the kernel as written, compiled with the values
        its module (or closure) gives the parameters, whether or not a variant equals it; where
        it cannot run (a parameter the launch function needs has no such value, say), tuning
        raises `TuningError` saying why, and measures nothing.
    outputs
        What to compare: called with host copies of the arguments after a run (the
        reference's too), it returns an array, a number or a tuple of them. None: every array
        argument. For kernels whose outputs legitimately differ between variants, such as one
        partial result per block with the block count tuned:
        ``outputs=lambda x, partials: partials.sum()``.
    """

    rtol: float | None = None
    atol: float | None = None
    reference: Callable[..., Any] | None = None
    outputs: Callable[..., Any] | None = None

    def tolerance(self, dtype: Any) -> tuple[float, float]:
        """The ``(rtol, atol)`` this check uses for arrays of ``dtype``: those given, else the
        dtype's defaults.

        Parameters
        ----------
        dtype
            A NumPy dtype, or what ``numpy.dtype`` takes.
        """
        dtype = np.dtype(dtype)
        rtol, atol = _TOLERANCES.get((dtype.kind, dtype.itemsize), (0.0, 0.0))
        return (rtol if self.rtol is None else self.rtol, atol if self.atol is None else self.atol)


@dataclass(frozen=True)
class Mismatch:
    """Where a variant's outputs differ from the reference's.

    Attributes
    ----------
    output : str
        The argument that differs (its name in the kernel's signature).
    count : int
        How many of its elements differ beyond the tolerance.
    size : int
        Of how many.
    largest_error : float
        The largest absolute difference (inf where one side is NaN or infinite and the other
        not).
    """

    output: str
    count: int
    size: int
    largest_error: float

    def __str__(self) -> str:
        return (
            f"{self.output}: {self.count} of {self.size} elements differ, largest error "
            f"{self.largest_error:.6g}"
        )


@dataclass(frozen=True)
class CannotRun:
    """Why the kernel as written, check mode's reference, cannot run on a call's arguments."""

    why: str


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


def fingerprint(check: Check) -> str:
    """A digest of what decides ``check``'s verdicts, the same in every process: its tolerances, and
    the source of its reference and outputs functions and of the functions of their own package they
    call (as the kernel's checksum covers its launch function: the values they read are not
    covered). A stored result's or an unfinished tuning's verdicts hold only for a check of the same
    digest (:mod:`numbatune.resolver`, :mod:`numbatune.cache.journal`)."""
    parts = [f"tolerances: {[None if t is None else float(t) for t in (check.rtol, check.atol)]}"]
    roles = (
        ("reference", check.reference, "the kernel as written"),
        ("outputs", check.outputs, "every array argument"),
    )
    for role, function, default in roles:
        parts.append(f"{role}: {default if function is None else source_of(function)}")
        if function is not None:
            parts += (f"{role} helper {h.__qualname__}: {source_of(h)}" for h in helpers(function))
    return hashlib.sha256("".join(f"{part}\0" for part in parts).encode()).hexdigest()[:32]


def _on_host(args: Sequence[Any], stream: Any) -> list[Any]:
    """``args`` with host copies of the arrays, once ``stream`` has passed the work queued on it."""
    host = [
        arrays.device_view(a).copy_to_host(stream=stream) if arrays.is_array(a) else a for a in args
    ]
    synchronize(stream)
    return host


#: What a run left to compare: (name, value) pairs.
Observed = list[tuple[str, np.ndarray]]


def _observed(check: Check, host_args: Sequence[Any], names: Sequence[str]) -> Observed:
    """What to compare of arguments after a run: ``check.outputs`` of them, else every array
    argument (``host_args`` holds host copies of the arrays, the other arguments as given)."""
    if check.outputs is not None:
        value = check.outputs(*host_args)
        values = value if isinstance(value, tuple) else (value,)
        labels = ["outputs"] if len(values) == 1 else [f"outputs[{i}]" for i in range(len(values))]
        return [(label, np.asarray(v)) for label, v in zip(labels, values, strict=True)]
    return [(n, a) for n, a in zip(names, host_args, strict=True) if isinstance(a, np.ndarray)]


def observe(check: Check, args: Sequence[Any], names: Sequence[str], stream: Any = 0) -> Observed:
    """What a variant's run on the device arrays ``args`` left to compare."""
    return _observed(check, _on_host(args, stream), names)


def reference_outputs(
    check: Check, args: Sequence[Any], names: Sequence[str], stream: Any = 0
) -> Observed:
    """What ``check.reference`` says a run on ``args`` leaves to compare."""
    assert check.reference is not None
    host = _on_host(args, stream)
    returned = check.reference(*host)
    if returned is not None:
        last = max(i for i, a in enumerate(args) if arrays.is_array(a))
        host[last] = np.asarray(returned)
    return _observed(check, host, names)


def compare(expected: Observed, got: Observed, check: Check) -> Mismatch | None:
    """The first output where ``got`` differs from ``expected``, or None."""
    for (name, want), (_, have) in zip(expected, got, strict=True):
        want, have = np.asarray(want), np.asarray(have)
        if want.shape != have.shape or want.dtype.names != have.dtype.names:
            return Mismatch(name, have.size, have.size, float("inf"))
        close = _close(want, have, check)
        if not close.all():
            differ = ~close
            return Mismatch(name, int(differ.sum()), int(have.size), _largest(want, have, differ))
    return None


def _close(want: np.ndarray, have: np.ndarray, check: Check) -> np.ndarray:
    """Element by element: whether ``have`` matches ``want`` (records: every field does)."""
    if want.dtype.names:
        close = np.ones(want.shape, bool)
        for field in want.dtype.names:
            matches = _close(want[field], have[field], check)
            close &= matches.all(axis=tuple(range(want.ndim, matches.ndim)))  # subarray fields
        return close
    if want.dtype.kind in "biufc":
        rtol, atol = check.tolerance(have.dtype)
        if rtol == atol == 0 and _integers(want, have):
            return want == have
        return np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=True)
    bytes_per_item = max(want.dtype.itemsize, 1)
    raw_want = np.ascontiguousarray(want).view(np.uint8).reshape(*want.shape, bytes_per_item)
    raw_have = np.ascontiguousarray(have).view(np.uint8).reshape(*have.shape, bytes_per_item)
    return (raw_want == raw_have).all(axis=-1)  # other kinds: the same bytes


def _largest(want: np.ndarray, have: np.ndarray, differ: np.ndarray) -> float:
    """The largest absolute difference among differing elements (inf where not numbers)."""
    if want.dtype.kind not in "biufc":
        return float("inf")
    if _integers(want, have):  # as Python integers: neither rounded nor overflowing
        return float(np.abs(have[differ].astype(object) - want[differ].astype(object)).max())
    with np.errstate(invalid="ignore", over="ignore"):
        errors = np.abs(have[differ].astype(np.complex128) - want[differ])
    return float(np.nan_to_num(errors, nan=np.inf, posinf=np.inf).max())


def _integers(*arrays: np.ndarray) -> bool:
    """Whether ``arrays`` all hold integers or booleans, which a float64 does not always hold
    exactly (int64 2**60 and 2**60 + 1 are one float64)."""
    return all(a.dtype.kind in "biu" for a in arrays)
