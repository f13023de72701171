"""The ``@autotune`` decorator and the tuned kernel it returns.

A call computes the key, looks it up in memory and launches the winner: that is the whole hot
path. On a miss the cache finds the answer on disk or tunes the key (once, however many threads
ask), and the winner is launched on the caller's arguments.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from numbatune import arrays, checks, keys, levels, streams, tuner
from numbatune.arrays import SIMULATOR
from numbatune.cache import TuneCache, device_partition
from numbatune.config import settings
from numbatune.launch import FastPath, fast_path, numba_launch, numba_stream, raw_stream
from numbatune.tuner import TuneReport
from numbatune.variants import KernelTemplate, Variant, as_variants

LaunchConfig = tuple[Any, ...]


def autotune(
    kernel: Any = None,
    *,
    variants: Iterable[Variant | Mapping[str, Any]],
    launch: Callable[..., LaunchConfig],
    key: str | Sequence[str] | Callable[..., Hashable] | None = None,
    name: str | None = None,
    level: str | None = None,
    prune: levels.Prune | None = None,
    check: bool | checks.Check | None = None,
) -> Any:
    """Make a numba CUDA kernel tune its compile-time parameters on first use of each key.

    ``kernel`` is a ``numba.cuda.jit`` kernel or a plain Python kernel function. Each variant
    (a dict of the global names the kernel reads, or a :class:`Variant` with jit options) is
    compiled as a kernel of its own in which those names are constants. ``launch`` is called as
    ``launch(*args, **params)`` with the call's arguments and the parameters of a variant that
    it names (all of them if it takes ``**kwargs``), and returns ``(grid, block)`` or
    ``(grid, block, dynamic_shared_memory_bytes)``. ``key`` chooses which calls share a result
    (see :func:`numbatune.keys.build_key`); by default, calls whose array arguments have the
    same shapes rounded up to powers of two, dtypes and layouts.

    ``prune(key, variants)`` returns the variants worth trying for a key, before any is
    compiled. ``level`` (``minimal``, ``balanced``, ``extensive`` or ``full``; by default the
    ``level`` setting, ``NUMBATUNE_LEVEL``) bounds how many priority groups of the variants are
    tried (see :mod:`numbatune.levels`).

    ``check=True`` (or ``numbatune.Check(rtol=, atol=, reference=)``; by default the ``check``
    setting, ``NUMBATUNE_CHECK``) compares every variant's outputs with a reference while a key
    is tuned: a variant that disagrees cannot win, and the report says where it differed (see
    :mod:`numbatune.checks`).

    Use it as ``@autotune(variants=..., launch=...)`` above ``@cuda.jit``; the result is called
    like a function: ``kernel(*args)`` or ``kernel(*args, stream=s)`` (see
    :meth:`TunedKernel.__call__`).
    """

    def decorate(kernel: Any) -> TunedKernel:
        return TunedKernel(
            kernel,
            variants=variants,
            launch=launch,
            key=key,
            name=name,
            level=level,
            prune=prune,
            check=check,
        )

    return decorate if kernel is None else decorate(kernel)


class TunedKernel:
    """A kernel with several compile-time variants that launches the fastest for each key."""

    def __init__(
        self,
        kernel: Any,
        *,
        variants: Iterable[Variant | Mapping[str, Any]],
        launch: Callable[..., LaunchConfig],
        key: str | Sequence[str] | Callable[..., Hashable] | None = None,
        name: str | None = None,
        level: str | None = None,
        prune: levels.Prune | None = None,
        check: bool | checks.Check | None = None,
    ) -> None:
        #: What this kernel was made from, for :meth:`with_variants`.
        self._made_from = dict(
            kernel=kernel, launch=launch, key=key, name=name, level=level, prune=prune, check=check
        )
        self.name = name or getattr(kernel, "__name__", type(kernel).__name__)
        self._template = KernelTemplate(kernel, self.name)
        self._variants = as_variants(variants, self.name)
        if not callable(launch):
            raise TypeError(
                f"autotune({self.name}): launch must be a function of the kernel's arguments "
                f"returning (grid, block[, shared_memory_bytes]), got {launch!r}"
            )
        self._launch = launch
        self._launch_params = _launch_params(launch, self._variants)
        launch_reads = {name for params in self._launch_params.values() for name in params}
        self._template.check_params(self._variants, launch_reads)
        self._parameters = list(self._template.signature.parameters)
        self._arity = len(self._parameters)
        self._key = keys.build_key(key, self._template.signature, self.name)
        self._level = levels.check_level(level, self.name)
        self._prune = levels.check_prune(prune, self.name)
        self._check = checks.as_check(check, self.name)
        self.__name__ = self.name
        self.__doc__ = self._template.function.__doc__
        module = getattr(self._template.function, "__module__", None) or "__main__"
        self.function_id = f"{module}.{self._template.function.__qualname__}"
        self._checksum = self._template.checksum(self._variants, launch)
        self._cache: TuneCache | None = None
        self._kernels: dict[Variant, Any] = {}
        self._hot: dict[Hashable, _Winner] = {}
        # Fast paths by argument classes and numba signature; calls try the newest first.
        self._paths: dict[tuple[Any, ...], FastPath] = {}
        self._call: Callable[[tuple[Any, ...], Any], None] = self._dispatch
        self._lock = threading.Lock()
        #: Counters of work done: variants compiled (per signature) and keys benchmarked.
        self.stats = {"compiles": 0, "benchmarks": 0}

    # -- the hot path -----------------------------------------------------------------------

    def __call__(self, *args: Any, stream: Any = None) -> None:
        """Launch the fastest variant for these arguments, tuning first if the key is new.

        ``stream`` is a numba, torch or CuPy stream or a raw ``CUstream`` handle. With None, the
        kernel goes to the current stream of torch or CuPy when the arguments are theirs (as
        Triton does), else to numba's default stream. Arrays of torch or CuPy used on another
        stream make it wait on the device for their current stream, as their
        ``__cuda_array_interface__`` asks.
        """
        self._call(args, stream)

    def _dispatch(self, args: tuple[Any, ...], stream: Any) -> None:
        """The general path: for calls that no fast path takes (see :meth:`_launch_winner`)."""
        if len(args) != self._arity:
            raise TypeError(
                f"{self.name}() takes {len(self._parameters)} arguments "
                f"({', '.join(self._parameters)}), got {len(args)}"
            )
        key = self._key(args)
        try:
            winner = self._hot.get(key)
        except TypeError:
            keys.check_hashable(key, self.name)
            raise
        if winner is None:
            winner = self._miss(key, args, stream)
        self._launch_winner(winner, args, stream)

    # -- the miss path ----------------------------------------------------------------------

    def _miss(self, key: Hashable, args: tuple[Any, ...], stream: Any) -> _Winner:
        return self._remember(key, self._report(key, args, stream, force=False), args)

    def _remember(self, key: Hashable, report: TuneReport, args: tuple[Any, ...]) -> _Winner:
        """Put the winner of ``report`` on the hot path, checking its launch function once."""
        variant = report.best_variant
        params = self._launch_params[variant]
        _checked_launch_config(self._launch(*args, **params), self.name)
        winner = _Winner(variant, params)
        with self._lock:
            if key in self._hot:  # tuned again: the fast paths learn the new winner
                for path in self._paths.values():
                    path.clear()
            self._hot[key] = winner
        return winner

    def _launch_winner(self, winner: _Winner, args: tuple[Any, ...], stream: Any) -> None:
        """Launch ``winner`` through the fast path for the signature of ``args``, made and
        taught this key if needed, or through numba where no fast path serves them.

        Fast paths form a chain from ``self._call``, newest first: each takes calls of its own
        signature and known keys and passes others to the next, the last to :meth:`_dispatch`.
        """
        kernel = self._prepare_kernel(winner.variant, args)
        if settings.fast_launch and not SIMULATOR:
            signature = (*map(type, args), *(kernel.typeof_pyval(a) for a in args))
            key = None if self._key is keys.default_key else self._key
            with self._lock:
                path = self._paths.get(signature)
                if path is None and signature not in self._paths:
                    path = self._paths[signature] = fast_path(
                        kernel, args, self.name, key, self._launch, self._call
                    )
                    if path is not None:
                        self._call = path.call
                added = path is not None and path.add(kernel, args, winner.params)
            if added:
                path.call(args, stream)  # finds the key just added: never back here
                return
        numba_launch(kernel, self.name)(args, self._launch(*args, **winner.params), stream)

    def _report(self, key: Hashable, args: tuple[Any, ...], stream: Any, force: bool) -> TuneReport:
        keys.check_hashable(key, self.name)
        self._check_arguments(args)
        stream = numba_stream(stream, args)
        # The clones tuning reads are copied on this stream: after the arrays' last tuned uses.
        handle = raw_stream(stream)
        if handle != streams.monitor.stream:
            watched = tuple(a for a in args if arrays.is_array(a))
            streams.monitor.before(handle, watched, None, stream)

        planned = levels.plan(
            self.name, key, self._variants, self._level or settings.level, self._prune
        )

        check = self._check or (checks.Check() if settings.check else None)

        def tune() -> TuneReport:
            if not settings.tune:  # tuning off: the first variant the level tries, unmeasured
                first = self._variants.index(planned.first[0])
                results = [tuner.VariantResult(v, None) for v in self._variants]
                return TuneReport(key, first, "untuned", results)
            report = levels.tune(
                self.name,
                key,
                self._variants,
                planned,
                args,
                self._prepare,
                stream,
                check,
                self._parameters,
            )
            if report.source == "benchmark":
                with self._lock:
                    self.stats["benchmarks"] += 1
            return report

        return self._tune_cache().lookup(
            key, tune, force=force, reuse=lambda stored: reuse(stored, planned, check)
        )

    def _tune_cache(self) -> TuneCache:
        if self._cache is None:
            with self._lock:
                if self._cache is None:
                    directory = settings.cache_dir
                    self._cache = TuneCache(
                        self.function_id,
                        self._checksum,
                        self._variants,
                        None if directory is None else directory / device_partition(),
                    )
        return self._cache

    def _check_arguments(self, args: tuple[Any, ...]) -> None:
        for name, value in zip(self._parameters, args, strict=True):
            if isinstance(value, np.ndarray) and value.ndim > 0:
                raise TypeError(
                    f"{self.name}: argument {name!r} is a host (NumPy) array; pass a device "
                    "array (numba.cuda.to_device(x), a CuPy array or a CUDA torch tensor)"
                )

    def _prepare_kernel(self, variant: Variant, args: tuple[Any, ...]) -> Any:
        """The variant's dispatcher, compiled for the types of ``args``."""
        with self._lock:
            kernel = self._kernels.get(variant)
            if kernel is None:
                kernel = self._kernels[variant] = self._template.specialise(variant)
        if not SIMULATOR:
            signature = tuple(kernel.typeof_pyval(a) for a in args)
            if signature not in kernel.overloads:
                kernel.compile(signature)
                with self._lock:
                    self.stats["compiles"] += 1
        return kernel

    def _prepare(self, variant: Variant, args: tuple[Any, ...]) -> tuner.Launcher:
        kernel = self._prepare_kernel(variant, args)
        config = _checked_launch_config(
            self._launch(*args, **self._launch_params[variant]), self.name
        )
        launch = numba_launch(kernel)
        return lambda args, stream: launch(args, config, stream)

    # -- introspection ----------------------------------------------------------------------

    @property
    def py_func(self) -> Callable[..., None]:
        """The Python function behind the kernel, as on numba's dispatchers."""
        return self._template.function

    @property
    def variants(self) -> list[Variant]:
        """The variants, in the order given."""
        return list(self._variants)

    def with_variants(self, variants: Iterable[Variant | Mapping[str, Any]]) -> TunedKernel:
        """A new tuned kernel like this one (kernel, launch, key and options) over ``variants``.

        For trying a few variants while developing, or under numba's simulator (see
        :func:`numbatune.testing.covering_variants`). It tunes and compiles on its own; its
        results share this kernel's name in the disk cache, where the differing variants
        make each one tune again over the other's.
        """
        return TunedKernel(variants=variants, **self._made_from)

    def run_variant(
        self, variant: Variant | Mapping[str, Any], *args: Any, stream: Any = None
    ) -> None:
        """Launch one given variant on ``args``, as if it had won (compiling it if needed)."""
        variant = variant if isinstance(variant, Variant) else Variant(variant)
        if variant not in self._launch_params:
            raise ValueError(f"{self.name}: {variant!r} is not one of its variants")
        self._check_arguments(args)
        self._prepare(variant, args)(args, stream)

    def tune(self, *args: Any, force: bool = False, stream: Any = None) -> TuneReport:
        """Tune for these arguments if needed (always with ``force``) without launching on them.

        Returns the report: ``key``, ``best`` (the winner's parameters), ``source`` (where the
        answer came from) and ``results`` (one record per variant).
        """
        key = self._key(args)
        report = self._report(key, args, stream, force=force)
        self._remember(key, report, args)
        return report

    def __repr__(self) -> str:
        return f"<numbatune.TunedKernel {self.name} with {len(self._variants)} variants>"


def reuse(
    stored: TuneReport, planned: levels.Plan, check: checks.Check | None
) -> TuneReport | None:
    """A stored report as the answer, or None to tune again: in check mode, one tuned without
    checks is tuned again; otherwise as :func:`numbatune.levels.reuse` decides."""
    if check is not None and not stored.checked:
        return None
    return levels.reuse(stored, planned)


class _Winner(NamedTuple):
    """A key's winning variant and the parameters its launch function takes."""

    variant: Variant
    params: dict[str, Any]


def _launch_params(launch: Callable[..., Any], variants: Sequence[Variant]) -> dict[Variant, dict]:
    """For each variant, the parameters to pass to ``launch`` (those it names, or all)."""
    try:
        parameters = inspect.signature(launch).parameters.values()
    except (TypeError, ValueError):
        return {v: dict(v.params) for v in variants}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return {v: dict(v.params) for v in variants}
    named = {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    return {v: {k: x for k, x in v.params.items() if k in named} for v in variants}


def _checked_launch_config(config: Any, name: str) -> LaunchConfig:
    """Validate what a launch function returned: (grid, block[, shared_memory_bytes])."""

    def dims(value: Any) -> bool:
        values = value if isinstance(value, tuple | list) else (value,)
        return 1 <= len(values) <= 3 and all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in values
        )

    if (
        isinstance(config, tuple | list)
        and len(config) in (2, 3)
        and dims(config[0])
        and dims(config[1])
        and (
            len(config) == 2
            or (
                isinstance(config[2], int | np.integer)
                and not isinstance(config[2], bool)
                and config[2] >= 0
            )
        )
    ):
        return tuple(config)
    raise ValueError(
        f"{name}: the launch function returned {config!r}; expected (grid, block) or "
        "(grid, block, shared_memory_bytes), where grid and block are positive integers or "
        "tuples of 1 to 3 positive integers"
    )
