"""Tools for testing tuned kernels: agreement across variants, and Hypothesis strategies.

The strategies draw the inputs autotuned kernels get wrong: sizes at and around each variant's
block and tile sizes, empty and one-element arrays, primes, non-contiguous views, and special
float values on request. Hypothesis is imported when a strategy is first asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from numba import cuda

from numbatune import arrays
from numbatune.dispatch import TunedKernel
from numbatune.tuning.checks import CannotRun, Check, Observed, compare, observe
from numbatune.values import is_integer
from numbatune.variants import Variant

_SMALL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 257, 509, 1021)


def assert_variants_agree(
    tuned: TunedKernel,
    *args: Any,
    rtol: float | None = None,
    atol: float | None = None,
    outputs: Callable[..., Any] | None = None,
) -> None:
    """Run every variant of a tuned kernel on copies of ``args`` and compare their outputs with
    the kernel as written's (compiled with the values its module or closure gives the
    parameters, as check mode's reference). The caller's arrays are not written.

    Parameters
    ----------
    tuned
        The tuned kernel.
    *args
        Its arguments, as for a call.
    rtol, atol
        Tolerances; None: by dtype, as in `numbatune.Check`.
    outputs
        What to compare, as `numbatune.Check`'s: a function of host copies of the arguments
        after a run, for kernels whose outputs legitimately differ between variants. None:
        every array argument.

    Raises
    ------
    AssertionError
        A variant left other outputs than the reference did, or raised (the message names each
        and where it differed), or the kernel as written cannot run on ``args`` (it says why).
    """
    check = Check(rtol=rtol, atol=atol, outputs=outputs)
    names = list(tuned._parameters)
    written = tuned._spec.as_written(args)
    if isinstance(written, CannotRun):
        raise AssertionError(
            f"{tuned.name}: the reference, the kernel as written, cannot run: {written.why}"
        )
    runner = tuned if written in tuned.variants else tuned.with_variants([written])
    expected = _observed_run(runner, written, args, check, names)
    if isinstance(expected, str):
        raise AssertionError(
            f"{tuned.name}: the reference, the kernel as written ({written.label}), {expected}"
        )
    others = [v for v in tuned.variants if v != written]
    problems = []
    for variant in others:
        got = _observed_run(tuned, variant, args, check, names)
        problem = got if isinstance(got, str) else compare(expected, got, check)
        if problem is not None:
            problems.append(f"  {variant.label}: {problem}")
    if problems:
        raise AssertionError(
            f"{tuned.name}: {len(problems)} of {len(others)} variants disagree with the "
            f"reference, the kernel as written ({written.label}):\n" + "\n".join(problems)
        )


def _observed_run(
    tuned: TunedKernel, variant: Variant, args: tuple[Any, ...], check: Check, names: list[str]
) -> Observed | str:
    """What ``variant`` leaves to compare on copies of ``args``, or what it raised."""
    copies = arrays.clone_arguments(args)
    try:
        tuned.run_variant(variant, *copies)
        return observe(check, copies, names)
    except Exception as error:
        return f"raised {type(error).__name__}: {error}"


def covering_variants(tuned: TunedKernel) -> list[Variant]:
    """A few variants that between them take every value of every parameter and jit option, in
    their order, so that each code path a parameter switches on runs in tests under numba's
    simulator (``tuned.with_variants(covering_variants(tuned))``). Picked greedily: each time
    the variant that takes the most values not yet taken (the earliest on a tie).

    Parameters
    ----------
    tuned
        The tuned kernel whose variants to pick from.
    """
    variants = tuned.variants
    values = [
        {(name, repr(value)) for name, value in v.params.items()}
        | {(f"jit:{name}", repr(value)) for name, value in v.jit.items()}
        for v in variants
    ]
    untaken = set().union(*values)
    chosen: list[int] = []
    while untaken:
        best = max(range(len(variants)), key=lambda i: len(values[i] & untaken))
        chosen.append(best)
        untaken -= values[best]
    return [variants[i] for i in sorted(chosen)]


def edge_sizes(tuned: TunedKernel | None = None, extra: Iterable[int] = ()) -> list[int]:
    """Sizes that autotuned kernels get wrong, sorted: 0, 1, small primes up to 1021, and for
    every positive integer parameter value of ``tuned``'s variants that value, one less and one
    more, and twice it plus one.

    Parameters
    ----------
    tuned
        A tuned kernel whose integer parameter values (block and tile sizes) add sizes, or None.
    extra
        More sizes to include.
    """
    sizes = {0, 1, *_SMALL_PRIMES, *extra}
    for variant in tuned.variants if tuned is not None else ():
        for value in variant.params.values():
            if is_integer(value) and value > 0:
                value = int(value)
                sizes.update({value - 1, value, value + 1, 2 * value + 1})
    return sorted(size for size in sizes if size >= 0)


def shapes(tuned: TunedKernel | None = None, ndim: int = 1, max_side: int = 1 << 12) -> Any:
    """A Hypothesis strategy of shapes (tuples of ``ndim`` sides) whose sides are the
    `edge_sizes` of a tuned kernel.

    Parameters
    ----------
    tuned
        The tuned kernel, or None for the sizes of no kernel.
    ndim
        The number of dimensions.
    max_side
        The largest side drawn.
    """
    from hypothesis import strategies as st

    sides = [size for size in edge_sizes(tuned) if size <= max_side]
    return st.tuples(*[st.sampled_from(sides)] * ndim)


def dtypes(kinds: str = "f") -> Any:
    """A Hypothesis strategy of NumPy dtypes.

    Parameters
    ----------
    kinds
        Letters of the kinds to draw: ``f`` floats (float32, float64), ``i`` signed and ``u``
        unsigned integers (8 to 64 bits), ``c`` complex, ``b`` booleans (a ValueError for
        others).
    """
    from hypothesis import strategies as st

    table = {
        "f": ["float32", "float64"],
        "i": ["int8", "int16", "int32", "int64"],
        "u": ["uint8", "uint16", "uint32", "uint64"],
        "c": ["complex64", "complex128"],
        "b": ["bool"],
    }
    unknown = set(kinds) - set(table)
    if unknown:
        raise ValueError(f"dtypes: kinds must be letters of 'fiucb', got {kinds!r}")
    return st.sampled_from([np.dtype(name) for kind in kinds for name in table[kind]])


def host_arrays(dtype: Any, shape: Any, special_values: bool = False) -> Any:
    """A Hypothesis strategy of NumPy arrays.

    Parameters
    ----------
    dtype
        The arrays' dtype.
    shape
        A shape, or a strategy of shapes (see `shapes`).
    special_values
        Draw negative zero, subnormals, infinities and NaN too; otherwise floats (and both
        parts of complex numbers) are finite and normal, or zero.
    """
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    dtype = np.dtype(dtype)
    elements = None
    if dtype.kind in "fc":
        width = 8 * dtype.itemsize // (2 if dtype.kind == "c" else 1)
        floats = st.floats(
            width=width,
            allow_nan=special_values,
            allow_infinity=special_values,
            allow_subnormal=special_values,
        )
        if special_values:
            tiny = float(np.finfo(np.dtype(f"float{width}")).smallest_subnormal)
            floats = st.one_of(floats, st.sampled_from([-0.0, tiny, -tiny, np.inf, np.nan]))
        else:
            floats = floats.map(lambda value: value + 0.0)  # -0.0 + 0.0 is 0.0
        # complex numbers: real and imaginary parts drawn as the floats are, by the same rules
        elements = floats if dtype.kind == "f" else st.builds(complex, floats, floats)
    return hnp.arrays(dtype, shape, elements=elements)


def device_arrays(
    dtype: Any, shape: Any, special_values: bool = False, strided: bool | None = False
) -> Any:
    """A Hypothesis strategy of numba device arrays, drawn as `host_arrays` draws.

    Parameters
    ----------
    dtype, shape, special_values
        As for `host_arrays`.
    strided
        True: views of every other element of a larger array (not contiguous; empty arrays
        stay contiguous); False: contiguous arrays; None: both kinds.
    """
    from hypothesis import strategies as st

    def to_device(host: np.ndarray, step: int) -> Any:
        if step == 1 or host.size == 0:  # numba-cuda 0.30 cannot slice an empty device array
            return cuda.to_device(host)
        wide = np.zeros((host.shape[0] * step, *host.shape[1:]), host.dtype)
        wide[::step] = host
        return cuda.to_device(wide)[::step]

    steps = st.sampled_from([1, 2]) if strided is None else st.just(2 if strided else 1)
    return st.builds(to_device, host_arrays(dtype, shape, special_values), steps)
