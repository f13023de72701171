"""The ``@autotune`` decorator and the tuned kernel it returns.

A call looks its fast path up by the classes of its arguments (one dictionary lookup, skipped
while one set of classes has a fast path: that path checks the classes itself); the fast path
computes the key, finds the winner in the winner table and launches it: that is the whole
hot path. Anything else goes to the general path, which finds the winner in memory, on disk, or
by tuning the key (once, however many threads ask), and launches it on the caller's arguments.
State that belongs to a device (its winners, its fast paths, its disk partition) is kept per
device.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import multiprocessing
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from numbatune import background, devices, identity, keys, processes, record, references
from numbatune._backend import require_a_backend
from numbatune.arrays import SIMULATOR, Arguments, ArrayView
from numbatune.cache import ranks
from numbatune.cache.tunecache import TuneCache, Winner, stored_anywhere
from numbatune.compile.compiler import Compiler, Tally
from numbatune.config import OnMiss, settings
from numbatune.errors import LaunchFunctionError
from numbatune.forking import ForkSafeLock
from numbatune.launch import fastpath
from numbatune.launch.config import (
    LaunchConfig,
    check_launch,
    is_empty,
    launch_config,
    launch_params,
)
from numbatune.launch.numbalaunch import numba_launch
from numbatune.strategies import Budget, Search, Strategy, as_budget, as_strategy
from numbatune.streams.handles import numba_stream, raw_stream
from numbatune.streams.monitor import monitor
from numbatune.template import KernelTemplate
from numbatune.trials import trying
from numbatune.tuning import checks, levels, tuner
from numbatune.tuning.job import Journal, NoJournal, TuneJob
from numbatune.tuning.results import Source, TuneReport, VariantResult
from numbatune.values import canonical_key, key_text
from numbatune.variants import Variant, as_variants

logger = logging.getLogger("numbatune")

#: Where a report of a key served without tuning (``on_miss``) comes from.
_SERVED = (Source.NEAREST, Source.UNTUNED)

#: A launch function slower than this a call (a hit costs about 5 us on an H100) is warned
#: about, timed over so many calls once a key is tuned.
_SLOW_LAUNCH_FUNCTION_S = 20e-6
_LAUNCH_FUNCTION_CALLS = 5


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
    read_only: Sequence[str] = (),
    search: str | None = None,
    budget: Budget | int | str | None = None,
    valid: Callable[..., bool] | None = None,
    on_miss: OnMiss | str | None = None,
) -> Any:
    """Make a numba CUDA kernel tune its compile-time parameters on first use of each key.

    Each variant is compiled as a kernel of its own in which the global names it sets are
    constants. The first call for a key measures the variants on copies of the arguments and
    launches the fastest; later calls with the same key launch it directly.

    Use it as ``@autotune(variants=..., launch=...)`` above ``@cuda.jit``; the result is called
    like a function: ``kernel(*args)`` or ``kernel(*args, stream=s)``.

    Parameters
    ----------
    kernel
        A ``numba.cuda.jit`` kernel or a plain Python kernel function. Leave it out to use
        ``autotune(...)`` as a decorator.
    variants
        The points of the tuning space: dicts of the global names the kernel reads and their
        values, or `Variant` objects, which also carry ``numba.cuda.jit`` options and a
        priority. `product` builds them from lists of values. At least one.
    launch
        Called as ``launch(*args, **params)`` with the call's arguments and the parameters of a
        variant that it names (all of them if it takes ``**kwargs``); returns ``(grid, block)``
        or ``(grid, block, dynamic_shared_memory_bytes)``.
    key
        Which calls share a tuning result. None (the default): calls whose array arguments
        have the same shapes rounded up to powers of two (`anchor`), dtypes and layouts, and
        whose boolean arguments (mode flags, which select code paths) have the same values. A
        name or a list of names: for each named array its anchored shape, dtype and layout, for
        each named scalar its value. A function: called with the kernel's arguments, its (hashable)
        result. The dtype, layout and number of dimensions of every array argument are always
        part of the key.
    name
        The tuned kernel's name in messages and logs; by default the kernel function's name.
    level
        How many priority groups of the variants a key's tuning tries: ``"minimal"`` the
        variants of the highest `Variant` priority only, ``"balanced"`` two groups,
        ``"extensive"`` three, ``"full"`` all; the next group is tried only when all of them
        fail. None: the ``level`` setting (``NUMBATUNE_LEVEL``, default ``"full"``).
    prune
        ``prune(key, variants)`` returns the variants worth trying for a key, before any is
        compiled.
    check
        True, or a `Check` (tolerances, a reference), compares every variant's outputs with a
        reference while a key is tuned: a variant that disagrees cannot win, and the report
        says where it differed. None: the ``check`` setting (``NUMBATUNE_CHECK``, default off).
    read_only
        Names of arguments the kernel only reads (through device functions, say). Every run
        while tuning starts from the arguments as the caller passed them: arrays a run may
        change are copied back before each run, outside the timed region. Arrays the kernel's
        own code only reads or only writes are found from its source and not copied either.
    search
        How a key's tuning chooses the variants it measures: ``"auto"`` (every variant of
        spaces of up to 100, a pattern search of larger ones), ``"exhaustive"`` (every
        variant), ``"pattern"`` (a local search over the parameter grid from the kernel as
        written and the winners of nearby keys), ``"model"`` (a random forest fitted to the
        times so far picks the next variants; needs ``numbatune[model]``) or ``"random"``.
        None: the ``search`` setting (``NUMBATUNE_SEARCH``, default ``"auto"``).
    budget
        When a search stops: a `Budget`, a number of variants, or its text (``"200"``,
        ``"60s"``, ``"200,60s"``, ``"unlimited"``). An exhaustive tuning ignores it. None: the
        ``search_budget`` setting (default 100 variants).
    valid
        Called like ``launch``, as ``valid(*args, **params)``: whether a variant may run on
        these arguments (a tile that must divide the size, say). A key's tuning tries only the
        variants valid for the arguments it is tuned with; a call for which the key's winner is
        not valid launches the fastest variant measured for that key that is, and raises
        ``ValueError`` when none is. None: every variant may run on any arguments.
    on_miss
        What a call does with a key that has no stored result: ``"tune"`` it now;
        ``"nearest"``: launch the winner of the kernel's nearest tuned key (else the kernel as
        written), unmeasured, and record the key for ``numbatune sweep``; ``"background"``: as
        ``"nearest"``, and tune the key in a background thread, whose winner then replaces it.
        ``tune(...)`` always tunes. None: the ``on_miss`` setting (``NUMBATUNE_ON_MISS``,
        default ``"tune"``).

    Returns
    -------
    TunedKernel
        The tuned kernel; or, with ``kernel`` left out, a decorator that makes one.

    Raises
    ------
    TypeError
        An option of the wrong kind: a kernel that is neither a function nor a numba kernel, a
        launch or prune that is not callable, variants that are not dicts or `Variant`
        objects, a budget of another type. The message names the kernel and the option.
    ValueError
        An option with a wrong value: no variants, or one listed twice; a variant parameter
        that neither the kernel, its device functions nor the launch function reads, or that
        the kernel assigns or takes as an argument; an unknown level or search; ``read_only``
        names that are not arguments; a budget that cannot be read; a parameter of the launch
        function that neither the kernel's arguments nor any variant give a value, with no
        default; an unknown ``on_miss``. At a call: no variant valid for the arguments
        (``valid``).
    ImportError
        ``search="model"`` without scikit-learn installed.

    Examples
    --------
    ```python
    BLOCK = 128

    @nt.autotune(
        variants=nt.product(BLOCK=[64, 128, 256]),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(out.shape[0], BLOCK), BLOCK),
    )
    @cuda.jit
    def double(x, out):
        i = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
        if i < out.shape[0]:
            out[i] = 2 * x[i]
    ```
    """

    require_a_backend()
    options = dict(
        variants=variants, launch=launch, key=key, name=name, level=level, prune=prune,
        check=check, read_only=read_only, search=search, budget=budget, valid=valid,
        on_miss=on_miss,
    )  # fmt: skip
    make = functools.partial(TunedKernel, **options)
    return make if kernel is None else make(kernel)


class _Shared:
    """What tuned kernels with the same sharing key share in a process
    (:func:`numbatune.identity.sharing_key`): the compiled kernels, the state per device and
    cache directory (the winner tables), and the checksum."""

    def __init__(self, compiler: Compiler) -> None:
        self.compiler = compiler
        self.devices: dict[tuple[Any, Any], _DeviceState] = {}
        self.checksum: str | None = None
        self.lock = ForkSafeLock(reentrant=True)


#: Shared states by sharing key, the most recently made last; the oldest are dropped past
#: _SHARED_LIMIT (a factory making kernels with ever new closure values stays bounded).
_shared: collections.OrderedDict[str, _Shared] = collections.OrderedDict()
_shared_lock = ForkSafeLock()
_SHARED_LIMIT = 1024


def _shared_state(key: str, make: Callable[[], _Shared]) -> _Shared:
    with _shared_lock:
        shared = _shared.get(key)
        if shared is None:
            shared = _shared[key] = make()
            if len(_shared) > _SHARED_LIMIT:
                _shared.popitem(last=False)
        _shared.move_to_end(key)
        return shared


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
    """A kernel with several compile-time variants that launches the fastest for each key.

    Made by `autotune`, whose parameters it takes. Call it like the kernel:
    ``kernel(*args)`` or ``kernel(*args, stream=s)``; `tune` and `best` tune without
    launching and say what was chosen.

    Attributes
    ----------
    name : str
        The name in messages and logs (``autotune(name=...)``, or the kernel function's).
    """

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
        read_only: Sequence[str] = (),
        search: str | None = None,
        budget: Budget | int | str | None = None,
        valid: Callable[..., bool] | None = None,
        on_miss: OnMiss | str | None = None,
    ) -> None:
        #: What this kernel was made from, for :meth:`with_variants`.
        self._made_from = dict(
            kernel=kernel, launch=launch, key=key, name=name, level=level, prune=prune,
            check=check, read_only=read_only, search=search, budget=budget, valid=valid,
            on_miss=on_miss,
        )  # fmt: skip
        self.name = name or getattr(kernel, "__name__", type(kernel).__name__)
        self._template = KernelTemplate(kernel, self.name)
        self._variants = as_variants(variants, self.name)
        self._index = {variant: index for index, variant in enumerate(self._variants)}
        check_launch(launch, self._variants, self._template.signature, self.name)
        self._launch = launch
        self._launch_params = launch_params(launch, self._variants)
        self._valid = valid
        self._valid_params = _valid_params(valid, self._variants, self.name)
        launch_reads = {name for params in self._launch_params.values() for name in params}
        self._template.check_params(self._variants, launch_reads)
        self._parameters = tuple(self._template.signature.parameters)
        _check_parameter_names(self._variants, self._parameters, self.name)
        self._read_only = _checked_read_only(read_only, self._parameters, self.name)
        self._array_parameters = references.array_parameters(self._template.function)
        self._key = keys.build_key(key, self._template.signature, self.name)
        self._level = levels.check_level(level, self.name)
        self._prune = levels.check_prune(prune, self.name)
        self._check = checks.as_check(check, self.name)
        self._strategy, self._budget = _search_options(search, budget, self.name)
        self._on_miss = _on_miss_option(on_miss, self.name)
        self.__name__ = self.name
        self.__doc__ = self._template.function.__doc__
        self.function_id = identity.function_id(self._template.function)
        self._shared = self._share(
            key=key, level=level, prune=prune, check=check, name=name, search=search,
            budget=budget, valid=valid, on_miss=self._on_miss,
        )  # fmt: skip
        self._compiler = self._shared.compiler
        self._tally, self._benchmarks = Tally(), 0
        self._compile = functools.partial(trying.compile_and_try, self._compiling)
        self._warned_slow_launch = False
        self._binder = _Binder(len(self._parameters), self._dispatch)
        self._hooks = self._fast_path_hooks()
        _prepare_workers(self._compiler, self._variants, self.function_id)

    @functools.cached_property
    def _compiling(self) -> trying.KernelVariants:
        """What compiling, trying and launching the variants takes."""
        return trying.KernelVariants(
            self.name, self._compiler, self._tally, self._launch, self._launch_params
        )

    def _fast_path_hooks(self) -> fastpath.Hooks:
        """What this kernel's fast paths call back into it."""
        return fastpath.Hooks(
            self.name,
            self._launch,
            None if self._key is keys.default_key else self._key,
            self._dispatch,
            self._binder.by_classes,
            self._numba_launch,
            self._valid,
            tuple(self._valid_params),
        )

    def _share(self, **settings: Any) -> _Shared:
        """The state this kernel shares with tuned kernels of the same code and settings."""
        template = self._template
        key = identity.sharing_key(
            f"{template.compiler.identity()}\0{template.code_text()}",
            template.jit_options,
            template.signatures,
            self._variants,
            self._launch,
            settings,
        )
        return _shared_state(key, lambda: _Shared(Compiler(template, self.function_id)))

    @property
    def _lock(self) -> ForkSafeLock:
        return self._shared.lock

    # -- the hot path -----------------------------------------------------------------------

    def __call__(self, *args: Any, stream: Any = None) -> None:
        """Launch the fastest variant for these arguments, tuning first if the key is new.

        Parameters
        ----------
        *args
            The kernel's arguments: numba device arrays, CuPy arrays, torch tensors on the GPU
            (anything with ``__cuda_array_interface__``) and scalars. Host NumPy arrays are
            refused.
        stream
            A numba, torch, CuPy or cuda.core stream, or a raw ``CUstream`` handle. None: the
            current stream of torch or CuPy when the arguments are theirs (as Triton does),
            else numba's default stream. Arrays of torch or CuPy used on another stream make
            the launch wait on the device for their current stream, as their
            ``__cuda_array_interface__`` asks.

        Raises
        ------
        TypeError
            The wrong number of arguments, or an argument of the wrong kind (a host array, a
            scalar where the kernel indexes an array), named in the message.
        ValueError
            An array on another GPU than the current one.
        TuningError
            Every variant failed for this key; the message names each and its error.
        TuningKeyError
            The key of the call could not be computed, or cannot be a cache key.
        LaunchFunctionError
            The launch function raised.
        StreamError
            ``stream`` cannot take launches (destroyed, or of another context).
        """
        self._binder.entry(args, stream)

    def _dispatch(self, args: tuple[Any, ...], stream: Any) -> None:
        """The general path: for calls that no fast path takes."""
        self._check_arguments(args)
        state = self._device_state()
        key = self._key(args)
        winner = _known(state, key, self.name)
        if winner is None:
            if is_empty(self._launch_config(args, self.reference_variant)):
                return  # nothing to do, and nothing to tune (empty inputs, say)
            winner, _ = self._answer(state, key, args, stream, force=False, serve=True)
        if self._valid is not None and not self.is_valid(winner.variant, *args):
            winner = self._valid_winner(winner, args)
        self._launch_winner(state, winner, args, stream)

    def _launch_winner(
        self, state: _DeviceState, winner: Winner, args: tuple[Any, ...], stream: Any
    ) -> None:
        """Launch ``winner`` through the fast path for the signature of ``args`` (made if
        needed), or through numba where no fast path serves them."""
        config = launch_config(self._launch, args, winner.params, self.name)
        if is_empty(config):
            return
        kernel = self._compiled(winner.variant, args)
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
        signature = (*classes, *self._template.compiler.argument_types(kernel, args))
        with self._lock:
            if signature not in state.signatures:
                older = state.paths.get(classes, self._dispatch)
                path = fastpath.build(kernel, args, state.cache.winners, self._hooks, older)
                state.signatures[signature] = path
                if path is not None:
                    state.paths[classes] = path.call
                    self._binder.point(state.paths)
            return state.signatures[signature]

    def _numba_launch(
        self, args: tuple[Any, ...], winner: Winner, config: LaunchConfig, stream: Any
    ) -> None:
        numba_launch(self._compiled(winner.variant, args), self.name)(args, config, stream)

    def _device_state(self) -> _DeviceState:
        """This kernel's state on the current device (and cache directory: a test that gives
        itself a cache of its own gets a state of its own); the binder is pointed at its
        paths."""
        if SIMULATOR:
            device: Any = "simulator"
        else:
            from numba import cuda

            device = int(cuda.current_context().handle)
        place = (device, settings.cache_dir)
        states = self._shared.devices
        state = states.get(place)
        if state is None:
            with self._lock:
                state = states.get(place)
                if state is None:
                    state = states[place] = _DeviceState(self._new_cache())
        self._binder.point(state.paths)
        return state

    def _new_cache(self) -> TuneCache:
        directory = settings.cache_dir
        return TuneCache(
            self.function_id,
            self._variants,
            self._launch_params,
            None if directory is None else directory / devices.current_kind().partition,
            self.checksum,
        )

    def checksum(self) -> str:
        """The digest of the kernel, its variants, launch function and the versions that decide
        whether a stored result holds (computed once, on first use)."""
        shared = self._shared
        if shared.checksum is None:
            shared.checksum = self._template.checksum(self._variants, self._launch)
        return shared.checksum

    # -- the miss path ----------------------------------------------------------------------

    def _answer(
        self,
        state: _DeviceState,
        key: Hashable,
        args: tuple[Any, ...],
        stream: Any,
        force: bool,
        serve: bool = False,
    ) -> tuple[Winner, TuneReport]:
        """The winner for ``key`` from memory, disk or tuning (or, for a call, ``serve``, as
        the ``on_miss`` option or setting says), and the report behind it."""
        keys.check_hashable(key, self.name)
        arguments = self._check_arguments(args)
        stream = numba_stream(stream, args)
        # The clones tuning reads are copied on this stream: after the arrays' last tuned uses.
        handle = raw_stream(stream)
        if handle != monitor.stream:
            monitor.watch(handle, arguments.arrays, None, stream)
        plan = self._plan(key, args)
        check = self._check or (checks.Check() if settings.check else None)
        search = Search(
            self._strategy or settings.search,
            self._budget or settings.search_budget,
            settings.search_seed,
        )
        searched = search.strategy.for_space(len(plan.first)) is not Strategy.EXHAUSTIVE
        on_miss = self._on_miss or settings.on_miss
        serving = serve and on_miss is not OnMiss.TUNE
        self._record(key, args, serving)

        def job(plan: levels.Plan, search: Search, journal: Journal) -> TuneJob:
            return TuneJob(
                self.name, key, self._variants, args, self._parameters, stream, plan,
                self._compile, check, self.reference_variant, self._unrestored(arguments),
                search, self._starts(state, key, plan) if searched else (), journal,
                self._template.build_key,
            )  # fmt: skip

        def whole() -> TuneReport:
            return self._tuned(job(plan, search, state.cache.journal(key, fresh=force)))

        def share(index: int, count: int) -> TuneReport:  # ranks tuning together
            if count == 1:
                return whole()
            part = levels.Plan(plan.level, (tuple(plan.first[index::count]),), 1, plan.pruned)
            exhaustive = dataclasses.replace(search, strategy=Strategy.EXHAUSTIVE)
            return self._tuned(job(part, exhaustive, NoJournal()))

        group = ranks.group() if not serving and len(plan.first) > 1 else None
        tune = functools.partial(self._served, state, key, plan) if serving else whole
        winner, report = state.cache.lookup(
            key, tune, force=force, reuse=lambda stored: _reuse(stored, plan, check, searched),
            agree=None if group is None else lambda local: state.cache.agreed(
                group, self.name, key, local, share, not searched, len(plan.first)
            ),
        )  # fmt: skip
        if report.source in _SERVED and on_miss is OnMiss.BACKGROUND:
            background.start(self, arguments.clone(stream), self.name)
        return winner, report

    def _tuned(self, job: TuneJob) -> TuneReport:
        """Tune ``job``'s key now; the report, with this kernel's compiles and trial time."""
        self._compiler.warm_up(job.plan.first)
        trying.start_worker()
        compiles, trial_s = self._tally.compiles, self._tally.trial_s
        report = tuner.tune(job)
        self._time_launch_function(job.args, report.winner)
        if report.source is Source.BENCHMARK:
            with self._lock:
                self._benchmarks += 1
        trial_s = self._tally.trial_s - trial_s  # timed by the tuner as compiling
        return dataclasses.replace(
            report,
            compiles=self._tally.compiles - compiles,
            compile_s=report.compile_s - trial_s,
            trial_s=trial_s,
        )

    def _plan(self, key: Hashable, args: tuple[Any, ...]) -> levels.Plan:
        """The variants a tuning of ``key`` tries: pruned, valid for ``args``, by level."""
        level = self._level or settings.level
        plan = levels.plan(self.name, key, self._variants, level, self._prune)
        if self._valid is None:
            return plan
        return plan.keeping(lambda variant: self.is_valid(variant, *args), self.name)

    def _time_launch_function(self, args: tuple[Any, ...], variant: Variant) -> None:
        """Time the launch function for the tuned winner (it runs on every launch); warn once,
        naming it, when it is slow (a copy from the device in it, say)."""
        params = self._launch_params[variant]
        times = []
        for _ in range(_LAUNCH_FUNCTION_CALLS):
            started = time.perf_counter()
            self._launch(*args, **params)
            times.append(time.perf_counter() - started)
        cost = sorted(times)[len(times) // 2]
        if cost > _SLOW_LAUNCH_FUNCTION_S and not self._warned_slow_launch:
            self._warned_slow_launch = True
            logger.warning(
                "numbatune: %s: its launch function %s takes %.0f us a call (median of %d "
                "while tuning), paid on every launch; compute values it reads from the device "
                "once and pass them as scalar arguments instead (see the porting guide)",
                self.name,
                getattr(self._launch, "__qualname__", repr(self._launch)),
                cost * 1e6,
                _LAUNCH_FUNCTION_CALLS,
            )

    def _served(self, state: _DeviceState, key: Hashable, plan: levels.Plan) -> TuneReport:
        """A key ``on_miss`` says not to tune now: the winner of the nearest tuned
        key that the plan allows, else the kernel as written (or the first variant the plan
        tries), unmeasured."""
        allowed = set(plan.allowed)
        nearest = [v for v in state.cache.winners_near(key) if v in allowed][:1]
        if nearest:
            variant, source = nearest[0], Source.NEAREST
        else:
            written = self.reference_variant
            variant = written if written in allowed else plan.first[0]
            source = Source.UNTUNED
        results = tuple(VariantResult(v) for v in self._variants)
        return TuneReport(key, self._index[variant], source, results)

    def _record(self, key: Hashable, args: tuple[Any, ...], serving: bool) -> None:
        """Record the key (numbatune.record) where the settings ask for it."""
        path = settings.record
        if path is None and serving and settings.cache_dir is not None:
            path = record.served_keys_path(settings.cache_dir)
        if path is None:
            return
        function = self._template.function
        try:
            record.write(
                path, self.function_id, function.__module__, function.__qualname__,
                key_text(key), args,
            )  # fmt: skip
        except (OSError, TypeError) as error:
            logger.warning("numbatune: %s: could not record key %r in %s: %s",
                           self.name, key, path, error)  # fmt: skip

    def _starts(self, state: _DeviceState, key: Hashable, plan: levels.Plan) -> tuple[Variant, ...]:
        """Where a search starts: the kernel as written, the variants of the highest priority
        (when priorities differ), and the winners of this kernel's other keys, nearest first."""
        highest = plan.groups[0] if len(plan.groups) > 1 else ()
        return (self.reference_variant, *highest, *state.cache.winners_near(key))

    def _check_arguments(self, args: tuple[Any, ...]) -> Arguments:
        """Refuse, naming the argument, calls numba would fail on less clearly; the arguments,
        read once."""
        if len(args) != len(self._parameters):
            raise TypeError(
                f"{self.name}() takes {len(self._parameters)} arguments "
                f"({', '.join(self._parameters)}), got {len(args)}"
            )
        arguments = Arguments.read(args)
        for name, value, view in zip(self._parameters, args, arguments.views, strict=True):
            host = isinstance(value, np.ndarray) and value.ndim > 0
            refused = "a host (NumPy) array" if host else view and view.kind.refusal(value)
            if refused:
                raise TypeError(
                    f"{self.name}: argument {name!r} is {refused}; pass a device array "
                    "(numba.cuda.to_device(x), a CuPy array or a CUDA torch tensor)"
                )
            use = self._array_parameters.get(name)
            if use is not None and not _can_be(use, value, view):
                expected = "a device array" + (" or a tuple" if use == "indexed" else "")
                how = "indexed" if use == "indexed" else f"read as {name}{use}"
                raise TypeError(
                    f"{self.name}: argument {name!r} is {how} in the kernel, so it must be "
                    f"{expected} (numba, CuPy or torch); got {type(value).__name__} {value!r:.60}"
                )
        if devices.several():
            self._check_devices(arguments)
        return arguments

    def _check_devices(self, arguments: Arguments) -> None:
        """Refuse arrays on another GPU than the one the kernel launches on."""
        here = devices.current_index()
        for name, value, view in zip(
            self._parameters, arguments.values, arguments.views, strict=True
        ):
            there = None if view is None else devices.array_device(value, view.kind)
            if there not in (None, here):
                raise ValueError(
                    f"{self.name}: argument {name!r} is on GPU {there}, but the kernel "
                    f"launches on GPU {here} (numba's current device); call it inside "
                    f"`with numba.cuda.gpus[{there}]:`, or move the array"
                )

    @functools.cached_property
    def _element_uses(self) -> dict[str, references.ElementUse]:
        """How the kernel's own code uses each parameter's elements (its source read once)."""
        return references.element_uses(self._template.function)

    def _unrestored(self, arguments: Arguments) -> frozenset[str]:
        """The arguments tuning need not copy back before each run: those named ``read_only``,
        and the arrays whose elements the kernel only reads or only writes."""
        unchanged = set(self._read_only)
        for name, view in zip(self._parameters, arguments.views, strict=True):
            use = self._element_uses.get(name)
            if use is None or view is None:
                continue
            if use.rerun_changes_nothing(len(view.shape), view.record):
                unchanged.add(name)
        return frozenset(unchanged)

    def _compiled(self, variant: Variant, args: tuple[Any, ...]) -> Any:
        """The variant's dispatcher, compiled (or loaded) for the types of ``args``."""
        return self._compiler.compiled(variant, args, self._tally)

    def _launch_config(self, args: tuple[Any, ...], variant: Variant) -> LaunchConfig:
        """The launch configuration the launch function gives ``variant`` for ``args``."""
        return launch_config(self._launch, args, self._launch_params[variant], self.name)

    # -- introspection ----------------------------------------------------------------------

    @property
    def py_func(self) -> Callable[..., None]:
        """The Python function behind the kernel, as on numba's dispatchers."""
        return self._template.function

    @property
    def stats(self) -> dict[str, int]:
        """Work this tuned kernel caused so far, by kind.

        ``"compiles"``: kernels compiled, here or in worker processes (variants that differ
        only in what the launch function reads share one); ``"loaded"``: kernels loaded from
        the disk cache; ``"benchmarks"``: keys whose variants were measured."""
        return {
            "compiles": self._tally.compiles,
            "loaded": self._tally.loaded,
            "benchmarks": self._benchmarks,
        }

    @property
    def written_variant(self) -> Variant | None:
        """The variant equal to the kernel as written (its parameters have the values the
        kernel's module gives them), or None when no variant is."""
        return self._template.default_variant(self._variants)

    @property
    def reference_variant(self) -> Variant:
        """The variant that check mode and `numbatune.testing.assert_variants_agree` compare
        the others with: `written_variant`, else the first."""
        return self.written_variant or self._variants[0]

    def is_valid(self, variant: Variant, *args: Any) -> bool:
        """Whether ``variant`` may run on ``args``, as the kernel's ``valid`` function says.

        Parameters
        ----------
        variant
            One of this kernel's variants.
        *args
            The kernel's arguments, as for a call.

        Returns
        -------
        bool
            What ``valid(*args, **params)`` says; True for every variant where the kernel
            has no ``valid`` function.

        Raises
        ------
        LaunchFunctionError
            The ``valid`` function raised; the message names the parameters it was called with.
        """
        if self._valid is None:
            return True
        params = self._valid_params[self._index[variant]]
        try:
            return bool(self._valid(*args, **params))
        except Exception as error:
            raise LaunchFunctionError(
                f"{self.name}: the valid function raised {type(error).__name__}: {error} "
                f"(called with the arguments and {params})"
            ) from error

    def _valid_winner(self, winner: Winner, args: tuple[Any, ...]) -> Winner:
        """For a call the key's ``winner`` is not valid for: the fastest variant measured for
        the key that is."""
        timed = sorted(
            (result.median_s, self._index[result.variant])
            for result in winner.report.results
            if result.median_s is not None and self.is_valid(result.variant, *args)
        )
        if not timed:
            raise ValueError(
                f"{self.name}: the winner for key {key_text(winner.report.key)} "
                f"({winner.variant.label}) is not valid for these arguments, and no other "
                "variant measured for that key is; give a key that tells these arguments apart "
                "(key=...), so that they are tuned on their own"
            )
        variant = self._variants[timed[0][1]]
        return Winner(timed[0][1], variant, self._launch_params[variant], winner.report)

    @property
    def variants(self) -> list[Variant]:
        """The variants, in the order given."""
        return list(self._variants)

    def with_variants(
        self, variants: Iterable[Variant | Mapping[str, Any]], **options: Any
    ) -> TunedKernel:
        """A new tuned kernel like this one (kernel, launch, key and options) over ``variants``.

        For trying a few variants while developing, under numba's simulator (see
        `numbatune.testing.covering_variants`), or a wider space searched. It tunes and
        compiles on its own; its results share this kernel's name in the disk cache, where the
        differing variants make each one tune again over the other's.

        Parameters
        ----------
        variants
            The new kernel's variants, as for `autotune`.
        **options
            `autotune` options to change (``search=``, ``budget=``, ``key=``, ...); the others
            are this kernel's.

        Returns
        -------
        TunedKernel
            The new tuned kernel.

        Raises
        ------
        TypeError
            An option that `autotune` does not have, or one `autotune` refuses.
        ValueError
            As `autotune` raises for the new variants and options.
        """
        unknown = sorted(set(options) - set(self._made_from) - {"kernel", "launch"})
        if unknown:
            raise TypeError(f"{self.name}.with_variants: unknown options {unknown}")
        return TunedKernel(variants=variants, **{**self._made_from, **options})

    def run_variant(
        self, variant: Variant | Mapping[str, Any], *args: Any, stream: Any = None
    ) -> None:
        """Launch one given variant on ``args``, as if it had won (compiling it if needed).

        Parameters
        ----------
        variant
            One of this kernel's variants, or the dict of its parameters.
        *args
            The kernel's arguments, as for a call.
        stream
            The stream to launch on, as for a call.

        Raises
        ------
        ValueError
            ``variant`` is not one of this kernel's variants, or the kernel's ``valid`` function
            says it may not run on ``args``.
        TypeError
            The arguments are not what the kernel takes, as for a call.
        """
        variant = variant if isinstance(variant, Variant) else Variant(variant)
        if variant not in self._index:
            raise ValueError(f"{self.name}: {variant!r} is not one of its variants")
        self._check_arguments(args)
        if not self.is_valid(variant, *args):
            raise ValueError(f"{self.name}: {variant.label} is not valid for these arguments")
        if not is_empty(self._launch_config(args, variant)):
            self._compiling.launcher(variant, self._compiled(variant, args), args)(args, stream)

    def tune(self, *args: Any, force: bool = False, stream: Any = None) -> TuneReport:
        """Tune for these arguments if needed, without launching on them.

        Parameters
        ----------
        *args
            The kernel's arguments, as for a call. Tuning runs on copies of them.
        force
            Tune again even if the key has a stored result.
        stream
            The stream to tune on, as for a call.

        Returns
        -------
        TuneReport
            The key's report: ``key``, ``winner`` (the winning variant: its parameters and
            jit options), ``best`` (its parameters alone), ``source`` (where the answer came
            from: ``"benchmark"``, ``"memory"``, ``"disk"``, ...), the time spent compiling and
            measuring, and ``results``, one record per variant.

        Raises
        ------
        TuningError
            Every variant failed for this key.
        TypeError
            The arguments are not what the kernel takes, as for a call.
        """
        self._check_arguments(args)
        state, key = self._device_state(), self._key(args)
        known = _known(state, key, self.name)
        served = known is not None and known.report.source in _SERVED
        winner, report = self._answer(state, key, args, stream, force=force or served)
        if self._valid is not None and not self.is_valid(winner.variant, *args):
            winner = self._valid_winner(winner, args)
            report = dataclasses.replace(report, best_index=winner.index)
        launch_config(self._launch, args, winner.params, self.name)
        return report

    def best(self, *args: Any, stream: Any = None) -> dict[str, Any]:
        """The winning variant's parameters for these arguments, tuning first if needed.

        Never launches on the arguments. For host code that depends on the winner, such as a
        buffer of one partial result per block sized from the tuned block count.

        Parameters
        ----------
        *args
            The kernel's arguments, as for a call.
        stream
            The stream to tune on, as for a call.

        Returns
        -------
        dict
            The winner's compile-time parameters, e.g. ``{"BLOCK": 128}``. The whole winner,
            with its jit options, is ``tune(*args).winner``.

        Raises
        ------
        TuningError
            Every variant failed for this key.
        """
        return self.tune(*args, stream=stream).best

    def __getitem__(self, config: Any) -> Any:
        raise TypeError(
            f"{self.name} is a tuned kernel: each variant's grid and block come from its launch "
            f"function, so call it as {self.name}(*args) (and {self.name}(*args, stream=s)); "
            "move the [grid, block] you would write into "
            f"launch=lambda {', '.join(self._parameters)}, *, BLOCK: (grid, block)"
        )

    def forall(self, *args: Any, **kwargs: Any) -> Any:
        """numba's ``kernel.forall(n)``: not for tuned kernels; the error says what to write."""
        raise TypeError(
            f"{self.name} is a tuned kernel: instead of {self.name}.forall(n)(...), give it "
            "launch=lambda ..., *, BLOCK: (nt.cdiv(n, BLOCK), BLOCK) and call "
            f"{self.name}(*args)"
        )

    def __repr__(self) -> str:
        return f"<numbatune.TunedKernel {self.name} with {len(self._variants)} variants>"


def _check_parameter_names(
    variants: Sequence[Variant], parameters: Sequence[str], name: str
) -> None:
    """Refuse a variant parameter named like an argument of the kernel: the launch function
    would be given both."""
    clash = sorted({p for v in variants for p in v.params} & set(parameters))
    if clash:
        raise ValueError(
            f"autotune({name}): variant parameters {clash} have the names of arguments of the "
            f"kernel ({', '.join(parameters)}); the launch function gets both, so rename the "
            "parameters (and the globals the kernel reads)"
        )


def _valid_params(
    valid: Callable[..., bool] | None, variants: Sequence[Variant], name: str
) -> list[dict[str, Any]]:
    """Validate ``valid=``; the parameters it takes, by variant index."""
    if valid is None:
        return []
    if not callable(valid):
        raise TypeError(
            f"autotune({name}): valid must be a function (*args, **params) -> bool saying "
            f"whether a variant may run on the arguments, got {valid!r}"
        )
    return list(launch_params(valid, variants).values())


def _checked_read_only(names: Any, parameters: Sequence[str], name: str) -> frozenset[str]:
    """Validate ``read_only=``: names of the kernel's arguments."""
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"autotune({name}): read_only must be a list of argument names, got {names!r}"
        )
    unknown = sorted(set(names) - set(parameters))
    if unknown:
        raise ValueError(
            f"autotune({name}): read_only names {unknown}, which are not arguments of the "
            f"kernel; its arguments are {list(parameters)}"
        )
    return frozenset(names)


def _can_be(use: str, value: Any, view: ArrayView | None) -> bool:
    """Whether ``value`` (read as ``view``) can be an argument the kernel uses as ``use``
    says."""
    if view is not None:
        return True
    return use == "indexed" and isinstance(value, tuple)


def _known(state: _DeviceState, key: Hashable, name: str) -> Winner | None:
    """The winner the table holds for ``key``, or None; a clear error for unhashable keys."""
    try:
        return state.cache.winners.get(key) or state.cache.winners.get(canonical_key(key))
    except TypeError:
        keys.check_hashable(key, name)
        raise


def _prepare_workers(compiler: Compiler, variants: Sequence[Variant], function_id: str) -> None:
    """Start the compile workers' fork server for a kernel just defined, if it is likely to be
    tuned in this process: the cache directory has nothing of it, and this is the user's
    process (not a ``multiprocessing`` child nor a numbatune worker, which import the user's
    modules again)."""
    if processes.in_worker() or multiprocessing.parent_process() is not None:
        return
    directory = settings.cache_dir
    if directory is None or not stored_anywhere(directory, function_id):
        compiler.prepare(variants)


def _search_options(
    search: str | None, budget: Budget | int | str | None, kernel_name: str
) -> tuple[Strategy | None, Budget | None]:
    """``autotune(search=, budget=)`` checked (None: the settings decide)."""
    where = f"autotune({kernel_name})"
    return (
        None if search is None else as_strategy(search, where),
        None if budget is None else as_budget(budget, where),
    )


def _on_miss_option(on_miss: OnMiss | str | None, kernel_name: str) -> OnMiss | None:
    """``autotune(on_miss=)`` checked (None: the ``on_miss`` setting decides)."""
    if on_miss is None:
        return None
    try:
        return OnMiss(on_miss)
    except ValueError:
        choices = ", ".join(member.value for member in OnMiss)
        raise ValueError(
            f"autotune({kernel_name}): on_miss must be one of {choices} (or None for the "
            f"on_miss setting, NUMBATUNE_ON_MISS), got {on_miss!r}"
        ) from None


def _reuse(
    stored: TuneReport, plan: levels.Plan, check: checks.Check | None, searched: bool
) -> TuneReport | None:
    """A stored report as the answer, or None to tune again: in check mode, one tuned without
    checks is tuned again; otherwise as :func:`numbatune.tuning.levels.reuse` decides."""
    if check is not None and not stored.checked:
        return None
    return levels.reuse(stored, plan, searched)


class _Binder:
    """A tuned kernel's entry: ``entry(args, stream)`` is the fast path itself while one set of
    argument classes has one (its code checks the classes), else ``by_classes``, which looks the
    fast path up by the classes of the arguments, or calls ``general`` when there is none."""

    def __init__(self, arity: int, general: Callable[[tuple[Any, ...], Any], None]) -> None:
        self.paths: dict[tuple[type, ...], Callable[[tuple[Any, ...], Any], None]] = {}
        names = "".join(f"a{i}, " for i in range(arity))
        classes = "".join(f"type(a{i}), " for i in range(arity))
        code = "\n".join(
            [
                "def by_classes(args, stream):",
                f"    if len(args) != {arity}:",
                "        return _general(args, stream)",
                *([f"    {names}= args"] if arity else []),
                f"    path = _binder.paths.get(({classes}))",
                "    if path is None:",
                "        return _general(args, stream)",
                "    return path(args, stream)",
            ]
        )
        namespace = {"_binder": self, "_general": general}
        exec(compile(code, "<numbatune binder>", "exec"), namespace)
        self.by_classes: Callable[[tuple[Any, ...], Any], None] = namespace["by_classes"]
        self.entry = self.by_classes

    def point(self, paths: dict[tuple[type, ...], Callable[[tuple[Any, ...], Any], None]]) -> None:
        """Take the fast paths of a device (after one was added, or on another device)."""
        self.paths = paths
        only = list(paths.values())  # one read, while another thread may add a path
        self.entry = only[0] if len(only) == 1 else self.by_classes
