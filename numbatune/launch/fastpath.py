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

    stream = codegen.stream_lines(args, bool(numba_config.CUDA_ARRAY_INTERFACE_SYNC), plan)
    memo = isinstance(hooks.config, ByShape)
    code = codegen.source(
        plan, len(args), hooks.key is not None, hooks.valid is not None, stream,
        codegen.depends_on(args, plan) if memo else None,
    )  # fmt: skip
    functions: dict[int, int] = {}
    namespace = {
        "_same_classes": _native.same_classes,
        "_classes": tuple(map(type, args)),
        **plan.constants,
        "struct": struct,
        "_pack": _native.Packer(struct.Struct(codegen.struct_format(plan, layout)).pack),
        "_offsets": struct.pack(f"<{len(layout)}q", *(offset for offset, _ in layout)),
        "_winners": winners,
        "_last": [(None, -1, None)],
        "_functions": functions,
        "_key": hooks.key,
        "_config": hooks.config,
        **({"_configs": {}} if memo else {}),
        "_valid": hooks.valid,
        "_valid_params": hooks.valid_params,
        "_launch_error": launch_error,
        "_general": hooks.general,
        "_by_classes": hooks.by_classes,
        "_next": next_path,
        **_callbacks(hooks),
        "_checked_config": checked_launch_config,
        "_stream_handle": stream_handle,
        "_half_bits": half_bits,
        "_launch": _native.launch,
        "_context": int(cuda.current_context().handle),
        "_cooperative": cooperative,
        "_order": monitor.order,
        "_name": hooks.name,
    }
    exec(compile(code, f"<numbatune fast path of {hooks.name}>", "exec"), namespace)
    call, launch_winner = namespace["call"], namespace["launch_winner"]
    run_as_written(call, launch_winner)  # (torch.compile runs them as written)
    return FastPath(call, launch_winner, functions, layout, hooks.name, code, cooperative)


def _callbacks(hooks: Hooks) -> dict[str, Callable[..., bool]]:
    """What the generated code calls to launch through numba instead (``_numba``) and when its
    launch returned an error (``_failed``)."""

    def numba(args: tuple[Any, ...], winner: Any, config: tuple[Any, ...], stream: Any) -> bool:
        hooks.numba(args, winner, config, stream)
        return True

    def failed(
        error: int,
        args: tuple[Any, ...],
        winner: Any,
        config: tuple[Any, ...],
        given: Any,
        stream: int,
        in_call: bool,
    ) -> bool:
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

    return {"_numba": numba, "_failed": failed}
