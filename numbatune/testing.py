"""Tools for testing tuned kernels: agreement across variants, and Hypothesis strategies.

``assert_variants_agree(tuned, *args)`` runs every variant on copies of the arguments and fails
with a diff naming the variants that disagree with the first. ``covering_variants(tuned)`` picks a
few variants that between them take every value of every parameter, for tests under numba's
simulator, where every thread is a Python thread. The strategies draw the inputs
autotuned kernels get wrong: sizes at and around each variant's block and tile sizes, empty and
one-element arrays, primes, non-contiguous views, and special float values on request.

Hypothesis is imported when a strategy is first asked for, so this module loads without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from numba import cuda

from numbatune import arrays
from numbatune.dispatch import TunedKernel
from numbatune.tuning.checks import Check, Observed, compare, observe
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
    """Run every variant of ``tuned`` on its own copies of ``args``; fail unless all leave the
    same array arguments as the reference variant (within ``rtol``/``atol``, by default per
    dtype as in :class:`numbatune.Check`), naming the variants that disagree or raise.

    The reference is ``tuned.reference_variant``: the variant equal to the kernel as written,
    else the first. ``outputs``, as :class:`numbatune.Check`'s, says what to compare (a
    function of host copies of the arguments after a run), for kernels whose outputs
    legitimately differ between variants. The caller's arrays are not written."""
    check = Check(rtol=rtol, atol=atol, outputs=outputs)
    names = list(tuned._parameters)
    reference = tuned.reference_variant
    others = [v for v in tuned.variants if v != reference]
    expected = _observed_run(tuned, reference, args, check, names)
    if isinstance(expected, str):
        raise AssertionError(f"{tuned.name}: the reference variant {reference.label} {expected}")
    problems = []
    for variant in others:
        got = _observed_run(tuned, variant, args, check, names)
        problem = got if isinstance(got, str) else compare(expected, got, check)
        if problem is not None:
            problems.append(f"  {variant.label}: {problem}")
    if problems:
        raise AssertionError(
            f"{tuned.name}: {len(problems)} of {len(others)} variants disagree with the "
            f"reference {reference.label}:\n" + "\n".join(problems)
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
    """A few of ``tuned``'s variants that between them take every value of every parameter
    (and jit option), in their original order: each code path a parameter switches on runs.

    Picked greedily, each time the variant that takes the most values not yet taken (the
    earliest on a tie). ``tuned.with_variants(covering_variants(tuned))`` tunes just these.
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
    """Sizes that autotuned kernels get wrong: 0, 1, small primes, and for every integer
    parameter value of ``tuned``'s variants (block and tile sizes) that value, one less and
    one more, and twice it plus one."""
    sizes = {0, 1, *_SMALL_PRIMES, *extra}
    for variant in tuned.variants if tuned is not None else ():
        for value in variant.params.values():
            if is_integer(value) and value > 0:
                value = int(value)
                sizes.update({value - 1, value, value + 1, 2 * value + 1})
    return sorted(size for size in sizes if size >= 0)


def shapes(tuned: TunedKernel | None = None, ndim: int = 1, max_side: int = 1 << 12) -> Any:
    """A Hypothesis strategy of ``ndim``-dimensional shapes whose sides are :func:`edge_sizes`
    of ``tuned`` (up to ``max_side``)."""
    from hypothesis import strategies as st

    sides = [size for size in edge_sizes(tuned) if size <= max_side]
    return st.tuples(*[st.sampled_from(sides)] * ndim)


def dtypes(kinds: str = "f") -> Any:
    """A Hypothesis strategy of NumPy dtypes of the given kinds (``f`` floats, ``i`` signed,
    ``u`` unsigned integers, ``c`` complex, ``b`` booleans)."""
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
    """A Hypothesis strategy of NumPy arrays of ``dtype`` and ``shape`` (a shape or a strategy
    of shapes). Floats are finite and normal unless ``special_values``: then negative zero,
    subnormals, infinities and NaN are drawn too."""
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
        elements = floats if dtype.kind == "f" else st.complex_numbers(width=2 * width)
    return hnp.arrays(dtype, shape, elements=elements)


def device_arrays(
    dtype: Any, shape: Any, special_values: bool = False, strided: bool | None = False
) -> Any:
    """Like :func:`host_arrays`, as numba device arrays. ``strided=True`` gives views of every
    other element of a larger array (not contiguous; empty arrays stay contiguous); ``None``
    draws both kinds."""
    from hypothesis import strategies as st

    def to_device(host: np.ndarray, step: int) -> Any:
        if step == 1 or host.size == 0:  # numba-cuda 0.30 cannot slice an empty device array
            return cuda.to_device(host)
        wide = np.zeros((host.shape[0] * step, *host.shape[1:]), host.dtype)
        wide[::step] = host
        return cuda.to_device(wide)[::step]

    steps = st.sampled_from([1, 2]) if strided is None else st.just(2 if strided else 1)
    return st.builds(to_device, host_arrays(dtype, shape, special_values), steps)
