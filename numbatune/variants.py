"""Variants: sets of compile-time constants, and kernels specialised on them.

A variant binds names the kernel reads as globals (or closure variables) to constant values,
plus optional ``numba.cuda.jit`` options. numba freezes globals at compile time, so compiling
the kernel's function again with those names rebound gives a kernel in which they are
constants: ``cuda.shared.array(shape=TPB, ...)`` and ``range(TPB)`` specialise.
"""

from __future__ import annotations

import dis
import hashlib
import inspect
import itertools
import types
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence, Set
from typing import Any

import numba
import numpy as np
from numba import cuda

from numbatune import unroll
from numbatune._version import __version__
from numbatune.arrays import SIMULATOR

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


#: A variant's priority: an integer, or a function of the tuning key that returns one.
Priority = int | Callable[[Hashable], int]


class Variant:
    """One point of a tuning space: compile-time parameters and ``numba.cuda.jit`` options.

    ``priority`` orders the variants for the tuning levels (see :mod:`numbatune.levels`):
    variants of equal priority form a group, and groups are tried from the highest priority
    down; the ``minimal`` level tries only the highest group. It is an integer (default 0) or
    a function of the tuning key that returns one, for a priority that depends on the
    problem (cubecl's tune groups). It does not change the kernel: two variants that differ
    only in priority are equal.

    >>> Variant({"TPB": 16}, fastmath=True)
    Variant(TPB=16, fastmath=True)
    >>> Variant({"TPB": 16}, priority=1)
    Variant(TPB=16, priority=1)
    """

    __slots__ = ("jit", "label", "params", "priority")

    def __init__(self, params: Mapping[str, Any], priority: Priority = 0, **jit: Any) -> None:
        if not isinstance(params, Mapping):
            raise TypeError(f"Variant: params must be a mapping of names to values, got {params!r}")
        if not callable(priority) and not _is_int(priority):
            raise TypeError(
                f"Variant: priority must be an integer or a function of the tuning key "
                f"returning one, got {priority!r}"
            )
        unknown = sorted(set(jit) - JIT_OPTIONS)
        if unknown:
            raise ValueError(
                f"Variant: unknown numba.cuda.jit options {unknown}; "
                f"known options are {sorted(JIT_OPTIONS)}"
            )
        self.params: dict[str, Any] = dict(params)
        self.jit: dict[str, Any] = dict(jit)
        self.priority: Priority = priority
        self.label = ", ".join(f"{k}={v!r}" for k, v in {**self.params, **self.jit}.items())

    def priority_for(self, key: Hashable) -> int:
        """The variant's priority for a tuning key (higher is tried first)."""
        if not callable(self.priority):
            return int(self.priority)
        value = self.priority(key)
        if not _is_int(value):
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
        return isinstance(other, Variant) and (self.params, self.jit) == (other.params, other.jit)

    def __hash__(self) -> int:
        return hash(self.label)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def product(
    where: Callable[..., bool] | None = None,
    jit: Mapping[str, Sequence[Any]] | None = None,
    priority: Callable[..., Priority] | None = None,
    **axes: Sequence[Any],
) -> list[Variant]:
    """Every combination of the given values, as variants.

    ``product(BM=[64, 128], BN=[64, 128], where=lambda BM, BN: BM >= BN)`` keeps the
    combinations the filter accepts (it is called with the parameters as keywords).
    ``jit={"fastmath": [False, True]}`` adds numba.cuda.jit options as further axes.
    ``priority=lambda BM, BN: ...`` gives each combination its priority (see
    :class:`Variant`); it is called with the parameters as keywords and returns an integer, or
    a function of the tuning key that returns one.
    """
    jit = dict(jit or {})
    for name, values in {**axes, **jit}.items():
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise TypeError(f"product: {name} must be a list of values, got {values!r}")
    if priority is not None and not callable(priority):
        raise TypeError(
            f"product: priority must be a function of the parameters (as keywords), "
            f"got {priority!r}"
        )
    names, jit_names = list(axes), list(jit)
    variants = []
    for values in itertools.product(*axes.values(), *jit.values()):
        params = dict(zip(names, values[: len(names)], strict=True))
        if where is None or where(**params):
            variants.append(
                Variant(
                    params,
                    0 if priority is None else priority(**params),
                    **dict(zip(jit_names, values[len(names) :], strict=True)),
                )
            )
    return variants


def as_variants(variants: Iterable[Variant | Mapping[str, Any]], kernel_name: str) -> list[Variant]:
    """Check and normalise ``variants=``: a non-empty list of unique Variants or dicts."""
    if isinstance(variants, Mapping) or not isinstance(variants, Iterable):
        raise TypeError(
            f"autotune({kernel_name}): variants must be a list of dicts or Variants "
            f"(numbatune.product builds one), got {variants!r}"
        )
    result = [v if isinstance(v, Variant) else Variant(v) for v in variants]
    if not result:
        raise ValueError(f"autotune({kernel_name}): variants is empty; give at least one")
    seen: set[Variant] = set()
    for variant in result:
        if variant in seen:
            raise ValueError(f"autotune({kernel_name}): variant {variant.label} is listed twice")
        seen.add(variant)
    return result


def _names_read(code: types.CodeType) -> set[str]:
    """Global and free-variable names a function's code (and the code nested in it) reads.

    Attribute names (``module.NAME``) are not counted: rebinding them would change nothing.
    """
    names = {
        instruction.argval
        for instruction in dis.get_instructions(code)
        if instruction.opname in {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"}
    }
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_read(constant)
    return names


def _source_of(function: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        code = function.__code__
        return repr((code.co_code, code.co_consts, code.co_names))


class KernelTemplate:
    """The user's kernel function, from which each variant's kernel is compiled."""

    def __init__(self, kernel: Any, name: str) -> None:
        self.function, self.jit_options = _unwrap(kernel, name)
        self.name = name
        self.signature = inspect.signature(self.function)
        self._names_read = _names_read(self.function.__code__)
        self._static_loops = unroll.has_static_loops(self.function)

    def check_params(self, variants: Sequence[Variant], launch_reads: Set[str]) -> None:
        """Refuse parameters that neither the kernel nor the launch function reads.

        Such a parameter would silently change nothing.
        """
        unread = sorted({p for v in variants for p in v.params} - self._names_read - launch_reads)
        if unread:
            raise ValueError(
                f"autotune({self.name}): variant parameters {unread} are read neither by the "
                "kernel nor by the launch function; a parameter must be a global or closure "
                "variable the kernel uses, or a keyword argument of the launch function"
            )

    def specialise(self, variant: Variant) -> Any:
        """A new ``numba.cuda.jit`` dispatcher in which the variant's parameters are constants."""
        function = self.function
        namespace = dict(function.__globals__)
        namespace.update(variant.params)
        closure = function.__closure__
        if closure is not None:
            closure = tuple(
                types.CellType(variant.params[name]) if name in variant.params else cell
                for name, cell in zip(function.__code__.co_freevars, closure, strict=True)
            )
        code = function.__code__
        if self._static_loops:
            code, closure = unroll.unrolled(function, namespace, closure)
        specialised = types.FunctionType(
            code, namespace, function.__name__, function.__defaults__, closure
        )
        specialised.__kwdefaults__ = function.__kwdefaults__
        specialised.__qualname__ = function.__qualname__
        specialised.__module__ = function.__module__
        specialised.__doc__ = function.__doc__
        options = {**self.jit_options, **variant.jit}
        if SIMULATOR:
            options = {k: v for k, v in options.items() if k in SIMULATOR_JIT_OPTIONS}
        return cuda.jit(**options)(specialised)

    def checksum(self, variants: Sequence[Variant], launch: Callable[..., Any]) -> str:
        """A digest of everything that decides what the variants compute and how fast.

        It covers the kernel's source and the source of the device functions it calls, each
        variant's parameters and jit options, the launch function and the versions of numba,
        numba-cuda and numbatune. A stored result whose checksum differs is tuned again.
        """
        digest = hashlib.sha256()
        parts = [
            __version__,
            numba.__version__,
            _numba_cuda_version(),
            repr(sorted((k, v) for k, v in self.jit_options.items() if k in JIT_OPTIONS)),
            _source_of(self.function),
            _source_of(launch),
            *(
                _source_of(value.py_func)
                for name in sorted(self._names_read)
                if hasattr(value := self.function.__globals__.get(name), "py_func")
            ),
            *(repr((sorted(v.params.items()), sorted(v.jit.items()))) for v in variants),
        ]
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()[:32]


def _numba_cuda_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba-cuda")
    except PackageNotFoundError:
        return "unknown"


def _unwrap(kernel: Any, name: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The Python function and jit options behind a ``cuda.jit`` kernel or a plain function."""
    if isinstance(kernel, types.FunctionType):
        return kernel, {}
    function = getattr(kernel, "py_func", None)
    if not isinstance(function, types.FunctionType):
        raise TypeError(
            f"autotune({name}): expected a numba.cuda.jit kernel or a plain Python function, "
            f"got {type(kernel).__name__}"
        )
    if SIMULATOR:
        options = {"fastmath": kernel._fastmath, "debug": kernel._debug}
        is_device = kernel._device  # the simulator keeps these private
    else:
        options = {k: v for k, v in kernel.targetoptions.items() if k != "device"}
        is_device = kernel.targetoptions.get("device", False)
    if is_device:
        raise TypeError(
            f"autotune({name}): {name} is a device function (cuda.jit(device=True)); "
            "autotune kernels, which are launched from the host"
        )
    return function, options
