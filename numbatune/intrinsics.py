"""Helpers to call from inside kernels."""

from numba import cuda, int64, uint32


@cuda.jit(device=True)
def nonnegative(index: int) -> int:
    """``index`` as an int64 that the compiler knows is not negative; call it inside kernels.

    For thread and block indices (``nt.nonnegative(cuda.threadIdx.x)``) and loop counters,
    whose values lie in [0, 2**32). numba types ``cuda.threadIdx.x`` and its kin, and range()
    counters, as signed integers, so every array access they index carries numba's
    negative-index wraparound, and its guards and addresses are computed in full 64-bit
    arithmetic. Widened from its low 32 bits taken as unsigned, the index keeps its value and
    its top bits are known to be zero: the compiler drops the wraparound, folds constant
    offsets into the loads and can issue guarded loads together, before any is used. In the
    transpose and softmax examples this removed about half of the instructions (docs/examples.md).

    Parameters
    ----------
    index
        An integer in [0, 2**32). A negative value, or one of 2**32 or more, comes back
        changed.

    Returns
    -------
    int
        ``index``, as an int64.
    """
    return int64(uint32(index))
