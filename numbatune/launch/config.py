"""Launch functions: which variant parameters they take, and what they may return.

A launch function is called as ``launch(*args, **params)`` and returns ``(grid, block)`` or
``(grid, block, dynamic_shared_memory_bytes)``, grid and block each a positive integer or a
tuple of 1 to 3 of them, within the device's limits (:class:`Limits`: checked before a
tuning's launches and the general path's, under numba's simulator too, which would otherwise
run a block of 2,048 threads as 2,048 Python threads; a variant whose configuration is beyond
them fails while tuning). A hit's fast path leaves the check to the launch, and checks where
the C launcher or the driver refuses the configuration, so that its error says what is wrong.
A launch function wrapped in :func:`by_shape` is not called on a hit.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numbatune.arrays import SIMULATOR, read
from numbatune.errors import LaunchFunctionError
from numbatune.values import is_integer
from numbatune.variants import Variant

LaunchConfig = tuple[Any, ...]


class ByShape:
    """A launch function marked by :func:`by_shape`, called as it is; :meth:`remember` is the
    memo the fast path fills, keyed by the shapes and values its generated code read."""

    #: The most configurations kept per memo; a full memo is emptied.
    LIMIT = 1024

    def __init__(self, launch: Callable[..., LaunchConfig]) -> None:
        functools.update_wrapper(self, launch)  # (its signature is the launch function's)
        self.launch = launch
        self._configs: dict[Hashable, LaunchConfig] = {}

    def __call__(self, *args: Any, **params: Any) -> LaunchConfig:
        """The configuration for ``args`` and ``params``, computed once per their shapes,
        dtypes and values (arrays by their shape, dtype and layout, any other argument by its
        class and value; computed each time where one is unhashable)."""
        depends = (*map(_depends_on, args), *params.items())
        try:
            return self._configs[depends]
        except KeyError:
            config = self.launch(*args, **params)
        except TypeError:
            return self.launch(*args, **params)
        _keep(self._configs, depends, config)
        return config

    def remember(
        self,
        configs: dict[Hashable, LaunchConfig],
        depends: Hashable,
        args: tuple[Any, ...],
        params: dict[str, Any],
    ) -> LaunchConfig:
        """The configuration for ``args`` and ``params`` (through the memo of all calls), kept
        in ``configs``, a fast path's memo, under ``depends``, what its code read of them."""
        config = self(*args, **params)
        with contextlib.suppress(TypeError):  # (an unhashable argument: asked each time)
            _keep(configs, depends, config)
        return config


def _keep(configs: dict[Hashable, LaunchConfig], depends: Hashable, config: LaunchConfig) -> None:
    """Keep ``config`` under ``depends``; a memo of :attr:`ByShape.LIMIT` is emptied first."""
    if len(configs) >= ByShape.LIMIT:
        configs.clear()
    configs[depends] = config


def _depends_on(value: Any) -> Hashable:
    """What a :class:`ByShape` launch function's result depends on of one argument."""
    found = read(value)  # (an array's shape, dtype and layout)
    return (type(value), value) if found is None else found


def by_shape(launch: Callable[..., LaunchConfig]) -> ByShape:
    """Mark a launch function as depending only on the arrays' shapes and dtypes and the values
    of the other arguments, so that a hit does not call it.

    Its configuration is computed once per variant and per such value, and kept (at most
    1,024 per signature; a full memo is emptied). A cache hit's fast path looks it up by the
    shapes and values it reads of the arguments, which costs less than calling a Python
    function; the general path and tuning call it through the same memo. Use it for a launch
    function that reads nothing else of the arguments (not their contents, strides or data
    pointers) and nothing that changes between calls (a global, the time).

    Parameters
    ----------
    launch
        The launch function, as ``autotune(launch=...)`` takes it.

    Returns
    -------
    ByShape
        A launch function for ``autotune(launch=...)``, called as ``launch`` is.

    Raises
    ------
    TypeError
        ``launch`` is not callable.

    Examples
    --------
    >>> launch = by_shape(lambda x, out, *, BLOCK: ((out.shape[0] + BLOCK - 1) // BLOCK, BLOCK))
    """
    if not callable(launch):
        raise TypeError(f"by_shape: launch must be a launch function, got {launch!r}")
    return ByShape(launch)


def launch_params(launch: Callable[..., Any], variants: Sequence[Variant]) -> dict[Variant, dict]:
    """For each variant, the parameters to pass to ``launch`` (those it names, or all)."""
    try:
        parameters = inspect.signature(launch).parameters.values()
    except (TypeError, ValueError):
        return {v: dict(v.params) for v in variants}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return {v: dict(v.params) for v in variants}
    named = {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    return {v: {k: x for k, x in v.params.items() if k in named} for v in variants}


def check_launch(
    launch: Callable[..., Any],
    variants: Sequence[Variant],
    kernel_signature: inspect.Signature,
    name: str,
) -> None:
    """Refuse, when the kernel is defined, a launch function that is not callable, or that has
    a parameter every call would leave without a value: not one of the positional parameters
    that take the kernel's arguments, set by no variant, and without a default (a misspelt
    ``BLOCK``). A parameter with a default that no variant sets is fine."""
    if not callable(launch):
        raise TypeError(
            f"autotune({name}): launch must be a function of the kernel's arguments "
            f"returning (grid, block[, shared_memory_bytes]), got {launch!r}"
        )
    needed = needed_params(launch, len(kernel_signature.parameters))
    set_by_variants = {parameter for variant in variants for parameter in variant.params}
    for parameter in needed:
        if parameter not in set_by_variants:
            raise ValueError(
                f"autotune({name}): the launch function's parameter {parameter} has no "
                f"default, and neither the kernel's arguments (its first "
                f"{len(kernel_signature.parameters)} positional parameters) nor any variant "
                f"give it a value; the launch function takes {inspect.signature(launch)}, the "
                f"variants set {sorted(set_by_variants)}"
            )


def needed_params(function: Callable[..., Any], arity: int) -> list[str]:
    """The parameters of ``function`` (a launch or valid function) that every call must give
    besides the kernel's arguments (its first ``arity`` positional parameters): those without a
    default; none where its signature cannot be read (a builtin)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return []
    kinds = inspect.Parameter
    positional = [
        p.name for p in parameters if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    return [
        p.name
        for p in parameters
        if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
        and p.default is kinds.empty
        and p.name not in positional[:arity]
    ]


def params_taken(
    function: Callable[..., Any], variant: Variant, known: Mapping[Variant, dict[str, Any]]
) -> dict[str, Any]:
    """The parameters of ``variant`` that ``function`` (a launch or valid function) takes:
    ``known``'s where it has them (a tuned kernel's variants), else read from its signature
    (the kernel as written, which need not be one)."""
    found = known.get(variant)
    return found if found is not None else launch_params(function, (variant,))[variant]


def launch_config(
    launch: Callable[..., Any], args: tuple[Any, ...], params: dict[str, Any], name: str
) -> LaunchConfig:
    """What ``launch(*args, **params)`` returns, checked; an exception it raises comes back as
    a :class:`LaunchFunctionError` that says so."""
    return checked_launch_config(unchecked_launch_config(launch, args, params, name), name)


def unchecked_launch_config(
    launch: Callable[..., Any], args: tuple[Any, ...], params: dict[str, Any], name: str
) -> Any:
    """What ``launch(*args, **params)`` returns, unchecked; an exception it raises comes back
    as a :class:`LaunchFunctionError` that says so (every call of a launch function in Python
    goes through here; the fast path's generated code raises the same error)."""
    try:
        return launch(*args, **params)
    except Exception as error:
        raise launch_error(error, params, name) from error


def launch_error(
    error: Exception, params: dict[str, Any], name: str, function: str = "launch"
) -> LaunchFunctionError:
    """The error for an exception the launch function (or ``function``: ``valid``) raised."""
    return LaunchFunctionError(
        f"{name}: the {function} function raised {type(error).__name__}: {error} "
        f"(called with the arguments and {params})"
    )


def _dims(value: Any, least: int) -> bool:
    values = value if isinstance(value, tuple | list) else (value,)
    return 1 <= len(values) <= 3 and all(is_integer(v) and v >= least for v in values)


@dataclass(frozen=True)
class Limits:
    """What one launch may ask of a device."""

    threads_per_block: int
    #: The most threads of a block, and blocks of the grid, along x, y and z.
    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    #: The most shared memory a block may have without opting in to more (numba does not).
    shared_bytes: int


#: CUDA's limits for every compute capability from 3.0 on, with the shared memory of the
#: simulator's device (compute capability 5.2).
SIMULATED = Limits(1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535), 48 * 1024)

_limits: dict[int, Limits] = {}


def device_limits() -> Limits:
    """The current device's :class:`Limits` (read once per device), or the simulated one's."""
    if SIMULATOR:
        return SIMULATED
    from numba import cuda

    device = cuda.get_current_device()
    found = _limits.get(device.id)
    if found is None:
        found = _limits[device.id] = Limits(
            device.MAX_THREADS_PER_BLOCK,
            (device.MAX_BLOCK_DIM_X, device.MAX_BLOCK_DIM_Y, device.MAX_BLOCK_DIM_Z),
            (device.MAX_GRID_DIM_X, device.MAX_GRID_DIM_Y, device.MAX_GRID_DIM_Z),
            device.MAX_SHARED_MEMORY_PER_BLOCK,
        )
    return found


def _beyond(config: LaunchConfig, limits: Limits) -> str | None:
    """Which of the device's limits ``config`` passes, in words; None if none."""
    grid, block = ((*d, 1, 1)[:3] if isinstance(d, tuple | list) else (d, 1, 1) for d in config[:2])
    threads = block[0] * block[1] * block[2]
    if threads > limits.threads_per_block:
        return f"a block of {threads} threads; the device allows {limits.threads_per_block}"
    for what, sizes, most in (("threads", block, limits.block), ("blocks", grid, limits.grid)):
        for axis, size, limit in zip("xyz", sizes, most, strict=True):
            if size > limit:
                return f"{size} {what} in {axis}; the device allows {limit}"
    shared = config[2] if len(config) == 3 else 0
    if shared > limits.shared_bytes:
        return (f"{shared} bytes of dynamic shared memory; the device allows "
                f"{limits.shared_bytes} per block")  # fmt: skip
    return None


def checked_launch_config(config: Any, name: str) -> LaunchConfig:
    """Validate what a launch function returned: (grid, block[, shared_memory_bytes]), within
    the device's :class:`Limits`; ValueError says what is wrong, naming the limit. A grid with
    a dimension of 0 is valid: such a launch launches nothing (:func:`is_empty`)."""
    if (
        isinstance(config, tuple | list)
        and len(config) in (2, 3)
        and _dims(config[0], 0)
        and _dims(config[1], 1)
        and (len(config) == 2 or (is_integer(config[2]) and config[2] >= 0))
    ):
        beyond = _beyond(tuple(config), device_limits())
        if beyond is None:
            return tuple(config)
        raise ValueError(
            f"{name}: the launch function returned {config!r}, beyond the device's limits: {beyond}"
        )
    raise ValueError(
        f"{name}: the launch function returned {config!r}; expected (grid, block) or "
        "(grid, block, shared_memory_bytes), where grid is a non-negative integer or a tuple "
        "of 1 to 3 of them and block a positive integer or a tuple of 1 to 3 of them"
    )


def is_empty(config: LaunchConfig) -> bool:
    """Whether a checked launch configuration's grid has no block (there is nothing to do)."""
    grid = config[0] if isinstance(config[0], tuple | list) else (config[0],)
    return 0 in grid
