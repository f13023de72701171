"""Where a tuning's arrays lie: copies of the arguments at several places in device memory.

A kernel's time can depend on where its arrays lie. On an H200, the same two variants of a
transpose were timed 1.1% apart in one fresh process and 3.8% apart in another, each time
within 0.3% of itself in the process: strided accesses meet the memory's channels differently
at different physical addresses, and each process's copies of the arguments lie elsewhere. A
winner chosen by one placement's times is then one draw of that, and fresh processes disagree.

So the tuner times every variant on several copies of the arguments, allocated one after
another (so at different places), and the rounds take them in turn
(:func:`numbatune.tuning.bench.measure`, rule 8): a variant's time is the mean over the copies,
about the same in every process. The copies are :data:`PLACEMENTS` at most, and only as many as
fit in :data:`MEMORY_SHARE` of the device's free memory (at least the one the tuning times on
anyway): large arguments get fewer. Arguments with no arrays get one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune import arrays
from numbatune.arrays import SIMULATOR, Arguments

#: The most copies of the arguments a tuning times its variants on.
PLACEMENTS = 8
#: The share of the device's free memory the copies beyond the first may take.
MEMORY_SHARE = 0.25


@dataclass(frozen=True)
class Copy:
    """One copy of a call's arguments (arrays cloned, other values as they are), and what
    queues the copies that put it back as the caller passed it."""

    args: tuple[Any, ...]
    restore: Callable[[], None]


def array_bytes(args: tuple[Any, ...]) -> int:
    """Bytes of the arrays among ``args``, those in tuples included."""
    return sum(arrays.nbytes(array) for value in args for array in arrays.arrays_in(value))


def count(size: int, free: float) -> int:
    """How many copies of arguments whose arrays take ``size`` bytes to time on, where
    ``free`` bytes of device memory are free: :data:`PLACEMENTS`, or fewer where the copies
    beyond the first would take more than :data:`MEMORY_SHARE` of ``free`` (one for no
    arrays)."""
    if size == 0:
        return 1
    if math.isinf(free):  # (the simulator's)
        return PLACEMENTS
    return min(PLACEMENTS, 1 + int(MEMORY_SHARE * free // size))


def copies(
    arguments: Arguments, first: Copy, originals: tuple[Any, ...], stream: Any = 0
) -> tuple[Copy, ...]:
    """``first`` (the clones a tuning times on anyway) and the further copies of ``arguments``
    that :func:`count` allows, each put back from ``originals`` (as
    :func:`numbatune.arrays.restorer` takes them), their copies queued on ``stream``."""
    free = math.inf if SIMULATOR else cuda.current_context().get_memory_info()[0]
    more = count(array_bytes(first.args), free) - 1
    made = [first]
    for _ in range(more):
        clones = arguments.clone(stream)
        made.append(Copy(clones, arrays.restorer(clones, originals, stream)))
    return tuple(made)
