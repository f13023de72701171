"""Variants: the points of a tuning space, names the kernel reads as globals (or closure
variables) bound to constants (:mod:`numbatune.template` compiles them in), and jit options.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from numbatune.values import is_integer, plain, stable_text

# numba.cuda.jit options a variant may set. The simulator accepts only the first group; the
# others still count in the checksum, since they change the code on a GPU.
SIMULATOR_JIT_OPTIONS = frozenset({"fastmath", "debug", "opt"})
JIT_OPTIONS = SIMULATOR_JIT_OPTIONS | frozenset(
    {
        "max_registers",
        "lineinfo",
        "launch_bounds",
        "lto",
        "forceinline",
        "inline",
        "shared_memory_carveout",
    }
)
#: The jit options that only linking PTX to a cubin reads: variants that differ in nothing
#: else share numba's compile and its PTX.
LINK_OPTIONS = frozenset({"max_registers"})


#: A variant's priority: an integer, or a function of the tuning key that returns one.
Priority = int | Callable[[Hashable], int]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class Variant:
    """One point of a tuning space: compile-time parameters and ``numba.cuda.jit`` options.

    Two variants are equal when their parameters and options would compile the same kernel:
    ``Variant({"TPB": 16}) == Variant({"TPB": np.int64(16)})`` (numba types both as int64),
    while ``16`` and ``16.0`` differ. Labels are the same in every process.

    Parameters
    ----------
    params
        The global (or closure) names the kernel reads, and the constant value each takes.
    priority
        Orders the variants for the tuning levels (``autotune(level=...)``): variants of equal
        priority form a group, groups are tried from the highest down. An integer, or a function
        of the tuning key that returns one (cubecl's tune groups). Variants that differ only in
        priority are equal.
    **jit
        ``numba.cuda.jit`` options: ``fastmath``, ``debug``, ``opt`` (the only ones the simulator
        takes), ``max_registers``, ``lineinfo``, ``launch_bounds``, ``lto``, ``forceinline``,
        ``inline``, ``shared_memory_carveout``.

    Attributes
    ----------
    params, jit : dict
        The parameters and jit options, as given (NumPy int64, float64 and bool scalars made
        Python values).
    priority
        The priority, as given.
    label : str
        ``"TPB=16, fastmath=True"``: the parameters and options as text.

    Raises
    ------
    TypeError
        ``params`` is not a mapping of identifiers, or ``priority`` is neither an integer nor a
        function.
    ValueError
        An unknown jit option.

    Examples
    --------
    >>> Variant({"TPB": 16}, fastmath=True)
    Variant(TPB=16, fastmath=True)
    >>> Variant({"TPB": 16}, priority=1)
    Variant(TPB=16, priority=1)
    """

    __slots__ = ("_identity", "jit", "label", "params", "priority")

    def __init__(self, params: Mapping[str, Any], priority: Priority = 0, **jit: Any) -> None:
        if not isinstance(params, Mapping):
            raise TypeError(f"Variant: params must be a mapping of names to values, got {params!r}")
        if not all(isinstance(name, str) and name.isidentifier() for name in params):
            raise TypeError(f"Variant: parameter names must be identifiers, got {list(params)}")
        _check_priority(priority)
        _check_jit_options(jit)
        self.params = {name: plain(value) for name, value in params.items()}
        self.jit = {name: plain(value) for name, value in jit.items()}
        self.priority = priority
        param_texts = {name: stable_text(value) for name, value in self.params.items()}
        jit_texts = {name: stable_text(value) for name, value in self.jit.items()}
        self.label = ", ".join(f"{n}={t}" for n, t in [*param_texts.items(), *jit_texts.items()])
        self._identity = (tuple(sorted(param_texts.items())), tuple(sorted(jit_texts.items())))

    @classmethod
    def _made(
        cls,
        params: dict[str, Any],
        jit: dict[str, Any],
        priority: Priority,
        label: str,
        identity: tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]],
    ) -> Variant:
        """A variant whose checked values, label and identity :func:`product` made."""
        variant = cls.__new__(cls)
        variant.params, variant.jit, variant.priority = params, jit, priority
        variant.label, variant._identity = label, identity
        return variant

    def priority_for(self, key: Hashable) -> int:
        """The variant's priority for a tuning key (higher is tried first).

        Parameters
        ----------
        key
            The tuning key, passed to the priority function if the priority is one (a TypeError
            where that returns no integer).
        """
        if not callable(self.priority):
            return int(self.priority)
        value = self.priority(key)
        if not is_integer(value):
            raise TypeError(
                f"Variant({self.label}): its priority function returned {value!r} for key "
                f"{key!r}; expected an integer"
            )
        return int(value)

    def __repr__(self) -> str:
        if callable(self.priority) or self.priority != 0:
            return f"Variant({self.label}, priority={self.priority!r})"
        return f"Variant({self.label})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Variant) and self._identity == other._identity

    def __hash__(self) -> int:
        return hash(self._identity)


def product(
    where: Callable[..., bool] | None = None,
    jit: Mapping[str, Sequence[Any]] | None = None,
    priority: Callable[..., Priority] | None = None,
    **axes: Sequence[Any],
) -> list[Variant]:
    """Every combination of the given values, as variants.

    Parameters
    ----------
    where
        A filter, called with each combination's parameters as keywords: the combinations
        for which it returns False are left out.
    jit
        ``numba.cuda.jit`` options as further axes: ``jit={"fastmath": [False, True]}``.
    priority
        Called with each combination's parameters as keywords, it returns the combination's
        priority (see `Variant`).
    **axes
        Each parameter's name and the list of its values.

    Returns
    -------
    list[Variant]
        The combinations the filter keeps, the first axis varying slowest.

    Raises
    ------
    TypeError
        An axis that is not a list of values, or a ``where`` or ``priority`` that is not a
        function.
    ValueError
        An unknown jit option.

    Examples
    --------
    >>> product(BM=[64, 128], BN=[64, 128], where=lambda BM, BN: BM >= BN)
    [Variant(BM=64, BN=64), Variant(BM=128, BN=64), Variant(BM=128, BN=128)]
    """
    jit = dict(jit or {})
    for name, values in {**axes, **jit}.items():
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise TypeError(f"product: {name} must be a list of values, got {values!r}")
    if where is not None and not callable(where):
        raise TypeError(f"product: where must be a function of the parameters, got {where!r}")
    if priority is not None and not callable(priority):
        raise TypeError(
            f"product: priority must be a function of the parameters (as keywords), "
            f"got {priority!r}"
        )
    _check_jit_options(jit)
    names, jit_names, count = list(axes), list(jit), len(axes)
    # Each axis value made plain, with its label and identity parts, once: not per variant.
    columns = [
        [
            (plain(value), f"{name}={stable_text(value)}", (name, stable_text(value)))
            for value in values
        ]
        for name, values in [*axes.items(), *jit.items()]
    ]
    param_order = sorted(range(count), key=lambda axis: names[axis])
    jit_order = sorted(range(count, len(columns)), key=lambda axis: jit_names[axis - count])
    variants = []
    for combination in itertools.product(*columns):
        params = {name: column[0] for name, column in zip(names, combination, strict=False)}
        if where is not None and not where(**params):
            continue
        identity = (
            tuple([combination[axis][2] for axis in param_order]),
            tuple([combination[axis][2] for axis in jit_order]),
        )
        chosen = 0 if priority is None else _check_priority(priority(**params))
        label = ", ".join([column[1] for column in combination])
        jit_columns = zip(jit_names, combination[count:], strict=True)
        jits = {name: column[0] for name, column in jit_columns}
        variants.append(Variant._made(params, jits, chosen, label, identity))
    return variants


def grouped(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` (variants, or groups of them) by ``key``, groups and members in the order met."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _check_jit_options(names: Iterable[str]) -> None:
    unknown = sorted(set(names) - JIT_OPTIONS)
    if unknown:
        raise ValueError(
            f"Variant: unknown numba.cuda.jit options {unknown}; "
            f"known options are {sorted(JIT_OPTIONS)}"
        )


def _check_priority(priority: Any) -> Priority:
    if not callable(priority) and not is_integer(priority):
        raise TypeError(
            f"Variant: priority must be an integer or a function of the tuning key "
            f"returning one, got {priority!r}"
        )
    return priority


def as_variants(variants: Any, kernel_name: str) -> tuple[Variant, ...]:
    """Check and normalise ``variants=``: a non-empty list of unique Variants or dicts."""
    if isinstance(variants, str | bytes | Mapping) or not isinstance(variants, Iterable):
        raise TypeError(
            f"autotune({kernel_name}): variants must be a list of dicts or Variants "
            f"(numbatune.product builds one), got {variants!r}"
        )
    result = []
    for variant in variants:
        if isinstance(variant, Variant):
            result.append(variant)
        elif isinstance(variant, Mapping):
            result.append(Variant(variant))
        else:
            raise TypeError(
                f"autotune({kernel_name}): each of variants must be a dict of parameters or a "
                f"numbatune.Variant, got {variant!r}"
            )
    if not result:
        raise ValueError(f"autotune({kernel_name}): variants is empty; give at least one")
    seen: set[Variant] = set()
    for variant in result:
        if variant in seen:
            raise ValueError(f"autotune({kernel_name}): variant {variant.label} is listed twice")
        seen.add(variant)
    return tuple(result)
