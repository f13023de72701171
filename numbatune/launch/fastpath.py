"""Fast paths: a tuned kernel's winners launched with their parameters packed by hand, the
work numba's launch does on every call done once per argument signature and device; the
generated code (:mod:`numbatune.launch.codegen`) launches the key's winner
(docs/concepts/launching.md says what a hit does).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune import _native, native
from numbatune.arraykinds import kind_of
from numbatune.cache.tunecache import WinnerTable
from numbatune.compilers import compiler_for
from numbatune.eager import run_as_written
from numbatune.launch import codegen
from numbatune.launch.config import ByShape, checked_launch_config, is_empty, launch_error
from numbatune.launch.layout import ArgumentPlan, half_bits
from numbatune.rawstreams import stream_handle
from numbatune.streams.handles import check_stream
from numbatune.streams.monitor import monitor

logger = logging.getLogger("numbatune")

#: ``general(args, stream)``: the tuned kernel's general path.
General = Callable[[tuple[Any, ...], Any], None]


@dataclass(frozen=True)
class Hooks:
    """What a fast path calls back into its tuned kernel."""

    name: str
    #: The launch function, ``launch(*args, **params)``.
    config: Callable[..., tuple[Any, ...]]
    #: The key function, or None for the default key (computed from the fields read).
    key: Callable[[tuple[Any, ...]], Hashable] | None
    general: General
    #: The tuned kernel's lookup of the fast path by argument classes.
    by_classes: General
    #: ``numba(args, winner, config, stream)``: launch a winner through numba instead.
    numba: Callable[[tuple[Any, ...], Any, tuple[Any, ...], Any], None]
    #: The ``valid`` function, ``valid(*args, **params)``, or None: every variant may run.
    valid: Callable[..., bool] | None = None
    #: The parameters ``valid`` takes, by variant index.
    valid_params: tuple[dict[str, Any], ...] = ()


@dataclass(eq=False, repr=False)
class FastPath:
    """The generated launch of one argument signature on one device, made by :func:`build`:
    ``call`` and ``launch_winner`` (:mod:`numbatune.launch.codegen`); :meth:`learn` adds a
    variant's compiled function for this signature."""

    call: Callable[..., Any]
    launch_winner: Callable[..., bool]
    #: The C ``Launcher`` they hand what they read to.
    launcher: Any
    _functions: dict[int, int]
    _layout: list[tuple[int, int]]
    _name: str
    code: str
    _cooperative: bool

    def learn(self, index: int, dispatcher: Any, args: tuple[Any, ...]) -> bool:
        """Launch ``dispatcher``'s overload for ``args`` (compiled already) for variant
        ``index``. False when this path cannot (the caller then launches through numba)."""
        if index in self._functions:
            return True
        target = compiler_for(dispatcher).launch_target(dispatcher, args)
        if isinstance(target, str):
            reason = target
        elif target.layout != self._layout:
            reason = "this variant's parameter layout differs from the signature's"
        elif target.cooperative != self._cooperative:
            reason = "this variant synchronises its grid and the signature's first did not"
        else:
            self._functions[index] = target.handle
            return True
        through_numba(self._name, args, reason)
        return False


def build(
    dispatcher: Any, args: tuple[Any, ...], winners: WinnerTable, hooks: Hooks, next_path: General
) -> FastPath | None:
    """A fast path for arguments typed as ``args`` (whose classes the caller has matched, and
    whose overload of ``dispatcher`` is compiled), launching the winners in ``winners``; calls
    of another signature go to ``next_path``. None, logging why as a warning, where it has no
    plan for the kernel or its arguments (the caller then launches through numba)."""
    target = compiler_for(dispatcher).launch_target(dispatcher, args)
    if isinstance(target, str):
        through_numba(hooks.name, args, target)
        return None
    plan = ArgumentPlan(target.parameters)
    for index, ((actual, declared, argtype), value) in enumerate(
        zip(target.argtypes, args, strict=True)
    ):
        if argtype is None or not plan.add(f"a{index}", argtype, value):
            through_numba(hooks.name, args, f"no plan for {actual} as {declared}")
            return None
    plan.close()
    layout = target.layout
    if layout is None:
        through_numba(hooks.name, args, "the driver gives no parameter layout")
        return None
    planned = [struct.calcsize(letter) for letter in plan.fields]
    if [size for _, size in layout] != planned:
        logger.warning(
            "%s: numba's kernel parameter layout is not the expected one (sizes %s, planned %s);"
            " launching through numba",
            hooks.name,
            [size for _, size in layout],
            planned,
        )
        return None
    return _generate(plan, layout, args, winners, hooks, next_path, target.cooperative)


#: (kernel name, argument classes, reason) already warned about by :func:`through_numba`.
_warned: set[tuple[str, tuple[type, ...], str]] = set()


def through_numba(name: str, args: tuple[Any, ...], reason: str) -> None:
    """Say, once per kernel, argument classes and reason, at WARNING level, that a winner is
    launched through numba's launch (its hits cost several times a fast path's)."""
    seen = (name, tuple(map(type, args)), reason)
    if seen not in _warned:
        _warned.add(seen)
        logger.warning(
            "%s: launched through numba, whose launch costs several times numbatune's on every "
            "call, for arguments (%s): %s",
            name,
            ", ".join(type(a).__name__ for a in args),
            reason,
        )


def _generate(
    plan: ArgumentPlan,
    layout: list[tuple[int, int]],
    args: tuple[Any, ...],
    winners: WinnerTable,
    hooks: Hooks,
    next_path: General,
    cooperative: bool,
) -> FastPath:
    from numba.cuda.core import config as numba_config

    code = codegen.source(plan, len(args), hooks.key is not None)
    namespace = {**plan.constants, "_same_classes": _native.same_classes,
                 "_classes": tuple(map(type, args)), "_key": hooks.key,
                 "_by_classes": hooks.by_classes, "_next": next_path, "_order": monitor.order,
                 "_half_bits": half_bits}  # fmt: skip
    exec(compile(code, f"<numbatune fast path of {hooks.name}>", "exec"), namespace)
    top = next((plan.read_kinds.index(kind) for kind in map(kind_of, map(type, args))
                if kind in plan.read_kinds and kind.stream is not None), -1)  # fmt: skip
    functions: dict[int, int] = {}
    memo = isinstance(hooks.config, ByShape)
    launcher = _native.Launcher(
        winners=winners,
        functions=functions,
        config=hooks.config,
        configs={} if memo else None,
        readers=tuple(plan.readers),
        scalars=tuple(i for i, value in enumerate(args) if kind_of(type(value)) is None),
        pack=_native.Packer(struct.Struct(codegen.struct_format(plan, layout)).pack),
        launch=_native.launch,
        offsets=struct.pack(f"<{len(layout)}q", *(offset for offset, _ in layout)),
        context=int(cuda.current_context().handle),
        cooperative=cooperative,
        order=monitor.order,
        fallbacks=Fallbacks(hooks, namespace["buffers"], namespace["kept"]),
        name=hooks.name,
        sync=bool(numba_config.CUDA_ARRAY_INTERFACE_SYNC),
        reads=len(plan.reads),
        streamed=sum(1 << i for i, kind in enumerate(plan.read_kinds) if kind.stream is not None),
        top=top,
        remember=hooks.key is None,
        valid=hooks.valid is not None,
    )
    namespace.update(_hit=launcher.hit, _launch_winner=launcher.launch_winner)
    call, launch_winner = namespace["call"], namespace["launch_winner"]
    run_as_written(call, launch_winner)  # (torch.compile runs them as written)
    return FastPath(call, launch_winner, launcher, functions, layout, hooks.name, code, cooperative)


class Fallbacks:
    """What a fast path's C ``Launcher`` hands to Python: the calls it cannot take, the errors
    it words, and the reads of the arguments' allocations and arrays in Python (``buffers`` and
    ``kept``, the generated code's)."""

    def __init__(
        self,
        hooks: Hooks,
        buffers: Callable[[tuple[Any, ...]], tuple[Any, ...]],
        kept: Callable[[tuple[Any, ...], int], tuple[Any, ...]],
    ) -> None:
        self._hooks = hooks
        self.buffers = buffers
        self.kept = kept
        self.handle = stream_handle

    def general(self, args: tuple[Any, ...], stream: Any) -> Any:
        """A new key, or a winner with no function for this signature: the general path."""
        return self._hooks.general(args, stream)

    def valid(self, args: tuple[Any, ...], winner: Any) -> bool:
        """Whether the ``valid`` function lets ``winner`` run on ``args``."""
        params = self._hooks.valid_params[winner.index]
        try:
            return bool(self._hooks.valid(*args, **params))  # type: ignore[misc]
        except Exception as error:  # the valid function's: say so, as the general path
            raise launch_error(error, params, self._hooks.name, "valid") from error

    def numba(
        self, args: tuple[Any, ...], winner: Any, config: tuple[Any, ...], given: Any
    ) -> bool:
        """A value the packing refused (an int over 2**63, 1e39 for a float32), which numba
        types or converts otherwise: numba's launch."""
        self._hooks.numba(args, winner, config, given)
        return True

    def config_failed(self, error: Exception, params: dict[str, Any]) -> None:
        """The launch function raised ``error``: raised again, saying so."""
        raise launch_error(error, params, self._hooks.name) from error

    def bad_config(self, error: Exception, config: Any) -> None:
        """The launch refused ``config`` with ``error``: what is wrong with it, in words."""
        checked_launch_config(config, self._hooks.name)
        raise error

    def failed(
        self,
        error: int,
        args: tuple[Any, ...],
        winner: Any,
        config: tuple[Any, ...],
        given: Any,
        stream: int,
        in_call: bool,
    ) -> bool:
        """The launch returned ``error``: another device or thread (nothing ran), an empty
        grid, or the driver's error raised."""
        hooks = self._hooks
        if error == native.WRONG_CONTEXT:  # another device, or a new thread: nothing ran
            if in_call:
                hooks.general(args, given)
            else:
                hooks.numba(args, winner, config, given)
            return True
        if is_empty(checked_launch_config(config, hooks.name)):  # (a clear error for others)
            return True  # an empty grid: nothing to launch
        from numba.cuda.cudadrv.driver import CudaAPIError

        check_stream(stream)  # a clearer error when the stream is the cause
        raise CudaAPIError(error, f"{hooks.name}: launching with (grid, block[, shared]) {config}")
