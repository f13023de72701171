"""The errors numbatune raises of its own.

Each derives from :class:`NumbatuneError`, so ``except numbatune.NumbatuneError`` catches every
one, and from the built-in error it always was (``RuntimeError``, ``ValueError`` or
``TypeError``), so code written against those keeps working. Bad arguments to numbatune's
functions raise plain ``TypeError`` and ``ValueError`` that name the argument. A public name
on its way out warns with :func:`deprecated` for one minor release first.
"""

from __future__ import annotations

import warnings
from typing import Any


def deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that ``old`` is deprecated, naming ``new`` to use instead;
    ``stacklevel`` 3 points at the caller of the function that warns."""
    warnings.warn(f"numbatune: {old} is deprecated; use {new}", DeprecationWarning, stacklevel)


class NumbatuneError(Exception):
    """The base of numbatune's own errors."""


class TuningError(NumbatuneError, RuntimeError):
    """Every variant failed for a key; the message names each variant and its error, and
    ``results`` holds the outcome of each variant measured
    (:class:`numbatune.VariantResult`; empty where none was)."""

    def __init__(self, *args: object, results: tuple[Any, ...] = ()) -> None:
        super().__init__(*args)
        self.results = results


def as_raised(error: TuningError, raised: list[BaseException]) -> TuningError:
    """``error``, where every variant's run raised an exception of one class (``raised``, one
    per variant), as a TuningError that is also of that class, caused by the first: ``except
    MyError`` catches the first call's error as a hit's (numba's launch raises the kernel's own).
    ``error`` itself where they differ, or the class cannot be combined with TuningError."""
    kinds = {type(exception) for exception in raised}
    if len(kinds) != 1 or issubclass(kinds.pop(), TuningError):
        return error
    kind = type(raised[0])
    try:
        combined = type(kind.__name__, (TuningError, kind), {"__module__": kind.__module__})
        both = combined(*error.args, results=error.results)
    except Exception:  # a layout or constructor TuningError cannot share
        return error
    both.__cause__ = raised[0]
    return both


class TuningKeyError(NumbatuneError, ValueError):
    """The key of a call could not be computed, or cannot be a cache key; or, under
    ``on_miss="error"``, it has no stored result (the message names the key)."""


class StreamError(NumbatuneError, ValueError):
    """A stream that cannot take numbatune's launches: destroyed, or of another context."""


class CaptureError(NumbatuneError, RuntimeError):
    """A call (or ``tune``) made while its stream is captured into a CUDA graph would tune (a
    key with no winner in memory), which cannot run inside a capture; nothing reached the
    device, and the capture stays valid (the message says to tune ahead: ``kernel.warmup``)."""


class ProfileError(NumbatuneError, ValueError):
    """A profile token that is not open: ended already, or not made by ``start_profile``."""


class CacheFileError(NumbatuneError, ValueError):
    """A cache file that cannot be imported: not JSON, or not numbatune's format."""


class LaunchFunctionError(NumbatuneError, RuntimeError):
    """A tuned kernel's launch function raised (the cause, ``__cause__``); the message names the
    kernel and the parameters it was called with."""


class KernelSourceError(NumbatuneError, TypeError):
    """A kernel whose code numbatune must rewrite (``static_range``) and cannot: its source
    cannot be read, or a loop cannot be written out (the message names the kernel and line)."""


class BackendError(NumbatuneError, RuntimeError):
    """No kernel can run in this process: numba.cuda was imported before numbatune on a machine
    with no CUDA GPU, so numba uses the real driver rather than its simulator (the message says
    to import numbatune first, or set ``NUMBA_ENABLE_CUDASIM=1``)."""


class CompilerNotFoundError(NumbatuneError, RuntimeError):
    """Compiling ahead of time (``numbatune compile``) found no CUDA compiler library (NVRTC,
    NVVM or nvJitLink; the message names it and the extra that installs it)."""


class RayNotInstalled(NumbatuneError, RuntimeError):
    """A sweep over Ray (``numbatune sweep --ray``) where Ray is not installed; the message says
    what to install."""
