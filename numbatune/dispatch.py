"""The ``@autotune`` decorator and the tuned kernel it returns.

A call looks its fast path up by the classes of its arguments (one dictionary lookup); the fast
path computes the key, finds the winner in the winner table and launches it: that is the whole
hot path. Anything else goes to the general path, which finds the winner in memory, on disk, or
by tuning the key (once, however many threads ask), and launches it on the caller's arguments.
State that belongs to a device (its winners, its fast paths, its disk partition) is kept per
device.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from numbatune import keys
from numbatune.arrays import SIMULATOR, is_array
from numbatune.cache.tunecache import TuneCache, Winner
from numbatune.compile.compiler import Compiler
from numbatune.config import settings
from numbatune.devices import current_kind
from numbatune.launch import fastpath
from numbatune.launch.config import LaunchConfig, checked_launch_config, launch_params
from numbatune.launch.numbalaunch import numba_launch
from numbatune.streams.handles import numba_stream, raw_stream
from numbatune.streams.monitor import monitor
from numbatune.template import KernelTemplate
from numbatune.tuning import checks, levels, tuner
from numbatune.tuning.job import Launcher, TuneJob
from numbatune.tuning.results import Failed, Source, TuneReport, VariantResult
from numbatune.values import canonical_key
from numbatune.variants import Variant, as_variants


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
    ``(grid, block, dynamic_shared_memory_bytes)``.

    ``key`` chooses which calls share a result. By default: calls whose array arguments have
    the same shapes rounded up to powers of two (:func:`anchor`), dtypes and layouts. A name or
    a list of names: for each named array its anchored shape, dtype and layout, for each named
    scalar its value. A function: called with the kernel's arguments, its (hashable) result.
    The dtype, layout and number of dimensions of every array argument are always part of it.

    ``prune(key, variants)`` returns the variants worth trying for a key, before any is
    compiled. ``level`` (``minimal``, ``balanced``, ``extensive`` or ``full``; by default the
    ``level`` setting, ``NUMBATUNE_LEVEL``) bounds how many priority groups of the variants are
    tried: ``minimal`` the variants of the highest :attr:`Variant.priority` only, ``balanced``
    two groups, ``extensive`` three, ``full`` all; the next group is tried only when all fail.

    ``check=True`` (or ``numbatune.Check(rtol=, atol=, reference=)``; by default the ``check``
    setting, ``NUMBATUNE_CHECK``) compares every variant's outputs with a reference while a key
    is tuned: a variant that disagrees cannot win, and the report says where it differed.

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


class _DeviceState:
    """What a tuned kernel keeps per device: its tune cache (with the winner table) and its
    fast paths, found by argument classes and by numba signature."""

    def __init__(self, cache: TuneCache) -> None:
        self.cache = cache
        #: Argument classes -> the newest fast path's ``call`` for those classes.
        self.paths: dict[tuple[type, ...], Callable[[tuple[Any, ...], Any], None]] = {}
        #: numba signature -> its fast path, or None where the fast launch has no plan.
        self.signatures: dict[tuple[Any, ...], fastpath.FastPath | None] = {}


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
        self._index = {variant: index for index, variant in enumerate(self._variants)}
        if not callable(launch):
            raise TypeError(
                f"autotune({self.name}): launch must be a function of the kernel's arguments "
                f"returning (grid, block[, shared_memory_bytes]), got {launch!r}"
            )
        self._launch = launch
        self._launch_params = launch_params(launch, self._variants)
        launch_reads = {name for params in self._launch_params.values() for name in params}
        self._template.check_params(self._variants, launch_reads)
        self._parameters = tuple(self._template.signature.parameters)
        self._key = keys.build_key(key, self._template.signature, self.name)
        self._level = levels.check_level(level, self.name)
        self._prune = levels.check_prune(prune, self.name)
        self._check = checks.as_check(check, self.name)
        self.__name__ = self.name
        self.__doc__ = self._template.function.__doc__
        module = getattr(self._template.function, "__module__", None) or "__main__"
        self.function_id = f"{module}.{self._template.function.__qualname__}"
        self._checksum: str | None = None
        self._compiler = Compiler(self._template, self.function_id)
        self._devices: dict[Any, _DeviceState] = {}
        self._lock = threading.RLock()
        self._hooks = fastpath.Hooks(
            self.name,
            launch,
            None if self._key is keys.default_key else self._key,
            self._dispatch,
            self._numba_launch,
        )
        self._binder = _binder(len(self._parameters), self._dispatch)
        self._call = self._binder.call
        self._benchmarks = 0

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
        """The general path: for calls that no fast path takes."""
        if len(args) != len(self._parameters):
            raise TypeError(
                f"{self.name}() takes {len(self._parameters)} arguments "
                f"({', '.join(self._parameters)}), got {len(args)}"
            )
        state = self._device_state()
        key = self._key(args)
        winner = _known(state, key, self.name)
        if winner is None:
            winner, _ = self._answer(state, key, args, stream, force=False)
        self._launch_winner(state, winner, args, stream)

    def _launch_winner(
        self, state: _DeviceState, winner: Winner, args: tuple[Any, ...], stream: Any
    ) -> None:
        """Launch ``winner`` through the fast path for the signature of ``args`` (made if
        needed), or through numba where no fast path serves them."""
        kernel = self._compiled(winner.variant, args)
        config = checked_launch_config(self._launch(*args, **winner.params), self.name)
        if settings.fast_launch and not SIMULATOR:
            path = self._fast_path(state, kernel, args)
            if (
                path is not None
                and path.learn(winner.index, kernel, args)
                and path.launch_winner(args, winner, stream)
            ):
                return
        numba_launch(kernel, self.name)(args, config, stream)

    def _fast_path(
        self, state: _DeviceState, kernel: Any, args: tuple[Any, ...]
    ) -> fastpath.FastPath | None:
        """The fast path for the signature of ``args`` on this device, made on first use."""
        classes = tuple(map(type, args))
        signature = (*classes, *(kernel.typeof_pyval(a) for a in args))
        with self._lock:
            if signature not in state.signatures:
                older = state.paths.get(classes, self._dispatch)
                path = fastpath.build(kernel, args, state.cache.winners, self._hooks, older)
                state.signatures[signature] = path
                if path is not None:
                    state.paths[classes] = path.call
            return state.signatures[signature]

    def _numba_launch(
        self, args: tuple[Any, ...], winner: Winner, config: LaunchConfig, stream: Any
    ) -> None:
        numba_launch(self._compiled(winner.variant, args), self.name)(args, config, stream)

    def _device_state(self) -> _DeviceState:
        """This kernel's state on the current device; the binder is pointed at its paths."""
        if SIMULATOR:
            device: Any = "simulator"
        else:
            from numba import cuda

            device = int(cuda.current_context().handle)
        state = self._devices.get(device)
        if state is None:
            with self._lock:
                state = self._devices.get(device)
                if state is None:
                    state = self._devices[device] = _DeviceState(self._new_cache())
        self._binder.paths = state.paths
        return state

    def _new_cache(self) -> TuneCache:
        directory = settings.cache_dir
        return TuneCache(
            self.function_id,
            self._variants,
            self._launch_params,
            None if directory is None else directory / current_kind().partition,
            self.checksum,
        )

    def checksum(self) -> str:
        """The digest of the kernel, its variants, launch function and the versions that decide
        whether a stored result holds (computed once, on first use)."""
        if self._checksum is None:
            self._checksum = self._template.checksum(self._variants, self._launch)
        return self._checksum

    # -- the miss path ----------------------------------------------------------------------

    def _answer(
        self, state: _DeviceState, key: Hashable, args: tuple[Any, ...], stream: Any, force: bool
    ) -> tuple[Winner, TuneReport]:
        """The winner for ``key`` from memory, disk or tuning, and the report behind it."""
        keys.check_hashable(key, self.name)
        self._check_arguments(args)
        stream = numba_stream(stream, args)
        # The clones tuning reads are copied on this stream: after the arrays' last tuned uses.
        handle = raw_stream(stream)
        if handle != monitor.stream:
            monitor.before(handle, tuple(a for a in args if is_array(a)), None, stream)
        plan = levels.plan(
            self.name, key, self._variants, self._level or settings.level, self._prune
        )
        check = self._check or (checks.Check() if settings.check else None)
        job = TuneJob(
            self.name, key, self._variants, args, self._parameters, stream, plan,
            self._compile_variants, check,
        )  # fmt: skip

        def tune() -> TuneReport:
            if not settings.tune:  # tuning off: the first variant the level tries, unmeasured
                first = self._index[plan.first[0]]
                results = tuple(VariantResult(v) for v in self._variants)
                return TuneReport(key, first, Source.UNTUNED, results)
            self._compiler.warm_up(plan.first)
            compiles = self._compiler.compiles
            report = tuner.tune(job)
            if report.source is Source.BENCHMARK:
                with self._lock:
                    self._benchmarks += 1
            return dataclasses.replace(report, compiles=self._compiler.compiles - compiles)

        return state.cache.lookup(
            key, tune, force=force, reuse=lambda stored: _reuse(stored, plan, check)
        )

    def _check_arguments(self, args: tuple[Any, ...]) -> None:
        for name, value in zip(self._parameters, args, strict=True):
            if isinstance(value, np.ndarray) and value.ndim > 0:
                raise TypeError(
                    f"{self.name}: argument {name!r} is a host (NumPy) array; pass a device "
                    "array (numba.cuda.to_device(x), a CuPy array or a CUDA torch tensor)"
                )

    def _compiled(self, variant: Variant, args: tuple[Any, ...]) -> Any:
        """The variant's dispatcher, compiled (or loaded) for the types of ``args``."""
        return self._compiler.compiled(variant, args)

    def _launcher(self, variant: Variant, kernel: Any, args: tuple[Any, ...]) -> Launcher:
        """A launch of the compiled ``kernel`` of ``variant`` through numba, with the launch
        configuration its launch function gives for ``args``."""
        params = self._launch_params[variant]
        config = checked_launch_config(self._launch(*args, **params), self.name)
        launch = numba_launch(kernel)
        return lambda args, stream: launch(args, config, stream)

    def _compile_variants(
        self, variants: Sequence[Variant], args: tuple[Any, ...], done: Callable[[int], None]
    ) -> dict[Variant, Launcher | Failed]:
        launchers: dict[Variant, Launcher | Failed] = {}
        for variant, kernel in self._compiler.compile_all(variants, args, done).items():
            try:
                launchers[variant] = (
                    kernel if isinstance(kernel, Failed) else self._launcher(variant, kernel, args)
                )
            except Exception as error:
                launchers[variant] = Failed.of(error)
        return launchers

    # -- introspection ----------------------------------------------------------------------

    @property
    def py_func(self) -> Callable[..., None]:
        """The Python function behind the kernel, as on numba's dispatchers."""
        return self._template.function

    @property
    def stats(self) -> dict[str, int]:
        """Work done so far: kernels compiled (here or in worker processes; variants that
        differ only in what the launch function reads share one), kernels loaded from the
        disk, and keys benchmarked."""
        compiler = self._compiler
        return {
            "compiles": compiler.compiles,
            "loaded": compiler.loaded,
            "benchmarks": self._benchmarks,
        }

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
        if variant not in self._index:
            raise ValueError(f"{self.name}: {variant!r} is not one of its variants")
        self._check_arguments(args)
        self._launcher(variant, self._compiled(variant, args), args)(args, stream)

    def tune(self, *args: Any, force: bool = False, stream: Any = None) -> TuneReport:
        """Tune for these arguments if needed (always with ``force``) without launching on them.

        Returns the report: ``key``, ``best`` (the winner's parameters), ``source`` (where the
        answer came from) and ``results`` (one record per variant).
        """
        winner, report = self._answer(
            self._device_state(), self._key(args), args, stream, force=force
        )
        checked_launch_config(self._launch(*args, **winner.params), self.name)
        return report

    def __repr__(self) -> str:
        return f"<numbatune.TunedKernel {self.name} with {len(self._variants)} variants>"


def _known(state: _DeviceState, key: Hashable, name: str) -> Winner | None:
    """The winner the table holds for ``key``, or None; a clear error for unhashable keys."""
    try:
        return state.cache.winners.get(key) or state.cache.winners.get(canonical_key(key))
    except TypeError:
        keys.check_hashable(key, name)
        raise


def _reuse(stored: TuneReport, plan: levels.Plan, check: checks.Check | None) -> TuneReport | None:
    """A stored report as the answer, or None to tune again: in check mode, one tuned without
    checks is tuned again; otherwise as :func:`numbatune.tuning.levels.reuse` decides."""
    if check is not None and not stored.checked:
        return None
    return levels.reuse(stored, plan)


class _Binder:
    """A tuned kernel's entry: finds the fast path of a call by its argument classes."""

    call: Callable[[tuple[Any, ...], Any], None]
    paths: dict[tuple[type, ...], Callable[[tuple[Any, ...], Any], None]]


def _binder(arity: int, general: Callable[[tuple[Any, ...], Any], None]) -> _Binder:
    """The binder of a kernel of ``arity`` arguments: one generated function that looks the
    fast path up by the classes of the arguments and calls it, or ``general`` when none.

    ``binder.paths`` may be replaced (by the paths of another device); the function reads it
    on each call.
    """
    binder = _Binder()
    binder.paths = {}
    names = "".join(f"a{i}, " for i in range(arity))
    classes = "".join(f"type(a{i}), " for i in range(arity))
    code = "\n".join(
        [
            "def call(args, stream):",
            f"    if len(args) != {arity}:",
            "        return _general(args, stream)",
            *([f"    {names}= args"] if arity else []),
            f"    path = _binder.paths.get(({classes}))",
            "    if path is None:",
            "        return _general(args, stream)",
            "    return path(args, stream)",
        ]
    )
    namespace = {"_binder": binder, "_general": general}
    exec(compile(code, "<numbatune binder>", "exec"), namespace)
    binder.call = namespace["call"]
    return binder
