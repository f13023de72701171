"""The ``@autotune`` decorator and the tuned kernel it returns: the thin call path.

A call enters through its binder (:mod:`numbatune.binder`): the fast path of its argument
classes, which computes the key, finds the winner in the winner table and launches it: that is
the whole hot path. Anything else goes to the general path here, which checks the arguments,
finds the winner in the device's winner table or asks the resolver (:mod:`numbatune.resolver`:
disk, the ranks, the miss policy or tuning, once however many threads ask), and launches it on
the caller's arguments. The options live in a :class:`~numbatune.spec.KernelSpec`; state that
belongs to a device (its winners, its fast paths, its disk partition) in
:mod:`numbatune.shared`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from numbatune import background, identity, keys
from numbatune._backend import require_a_backend
from numbatune.arrays import SIMULATOR, Arguments
from numbatune.binder import Binder
from numbatune.cache.tunecache import Winner
from numbatune.call_arguments import ArgumentCheck
from numbatune.compile.compiler import Tally
from numbatune.config import OnMiss, settings
from numbatune.launch import fastpath
from numbatune.launch.config import LaunchConfig, is_empty, launch_config
from numbatune.launch.numbalaunch import numba_launch
from numbatune.resolver import SERVED, Miss, Resolver
from numbatune.shared import DeviceState, shared_state
from numbatune.spec import OPTIONS, KernelSpec
from numbatune.strategies import Budget
from numbatune.streams.handles import numba_stream, raw_stream
from numbatune.streams.monitor import monitor
from numbatune.trials import trying
from numbatune.tuning import checks, levels
from numbatune.tuning.results import TuneReport
from numbatune.variants import Variant


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

    given = {option: value for option, value in locals().items() if option in OPTIONS}
    require_a_backend()

    def make(kernel: Any) -> TunedKernel:
        return TunedKernel(KernelSpec(**{**given, "kernel": kernel}))

    return make if kernel is None else make(kernel)


class TunedKernel:
    """A kernel with several compile-time variants that launches the fastest for each key.

    Made by `autotune`, from the kernel and its options. Call it like the kernel:
    ``kernel(*args)`` or ``kernel(*args, stream=s)``; `tune` and `best` tune without
    launching and say what was chosen.

    Attributes
    ----------
    name : str
        The name in messages and logs (``autotune(name=...)``, or the kernel function's).
    """

    def __init__(self, spec: KernelSpec) -> None:
        """Made by `autotune`.

        Parameters
        ----------
        spec
            The kernel and `autotune`'s options, checked (``numbatune.spec.KernelSpec``).
        """
        self._spec = spec
        self.name = spec.kernel_name
        self._template = spec.template
        self._parameters = spec.parameters
        self._key = spec.key_function
        self._arguments = ArgumentCheck(
            self.name, self._template.function, self._parameters, spec.read_only
        )
        self.__name__ = self.name
        self.__doc__ = self._template.function.__doc__
        self.function_id = identity.function_id(self._template.function)
        self._shared = shared_state(spec, self.function_id)
        self._compiler = self._shared.compiler
        self._tally = Tally()
        self._kernel_variants = trying.KernelVariants(
            self.name, self._compiler, self._tally, spec.launch, spec.launch_params
        )
        compile_and_try = functools.partial(trying.compile_and_try, self._kernel_variants)
        self._resolver = Resolver(spec, self.function_id, self._compiler, compile_and_try,
                                  self._tally)  # fmt: skip
        self._binder = Binder(len(self._parameters), self._dispatch)
        self._hooks = self._fast_path_hooks()
        self._shared.prepare_workers(settings.cache_dir)

    def _fast_path_hooks(self) -> fastpath.Hooks:
        """What this kernel's fast paths call back into it."""
        spec = self._spec
        return fastpath.Hooks(
            self.name,
            spec.launch,
            None if self._key is keys.default_key else self._key,
            self._dispatch,
            self._binder.by_classes,
            self._numba_launch,
            spec.valid,
            spec.valid_params,
        )

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
        arguments = self._arguments.read(args)
        state = self._device_state()
        key = self._key(args)
        winner = state.known(key, self.name)
        spec = self._spec
        if winner is None:
            if is_empty(spec.launch_config(args, spec.reference_variant)):
                return  # nothing to do, and nothing to tune (empty inputs, say)
            winner, _ = self._answer(state, key, arguments, stream, force=False, serve=True)
        if spec.valid is not None and not spec.is_valid(winner.variant, args):
            winner = spec.valid_winner(winner, args)
        self._launch_winner(state, winner, args, stream)

    def _launch_winner(
        self, state: DeviceState, winner: Winner, args: tuple[Any, ...], stream: Any
    ) -> None:
        """Launch ``winner`` through the fast path for the signature of ``args`` (made if
        needed), or through numba where no fast path serves them."""
        config = launch_config(self._spec.launch, args, winner.params, self.name)
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
        self, state: DeviceState, kernel: Any, args: tuple[Any, ...]
    ) -> fastpath.FastPath | None:
        """The fast path for the signature of ``args`` on this device, made on first use."""
        classes = tuple(map(type, args))
        signature = (*classes, *self._template.compiler.argument_types(kernel, args))
        with self._shared.lock:
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

    def _device_state(self) -> DeviceState:
        """This kernel's state on the current device and cache directory; the binder is
        pointed at its paths."""
        state = self._shared.on_current_device(settings.cache_dir)
        self._binder.point(state.paths)
        return state

    def _answer(
        self,
        state: DeviceState,
        key: Hashable,
        arguments: Arguments,
        stream: Any,
        force: bool,
        serve: bool = False,
    ) -> tuple[Winner, TuneReport]:
        """The winner for ``key`` (:mod:`numbatune.resolver`: from memory, disk or tuning, or,
        for a call, ``serve``, as the ``on_miss`` option or setting says), and the report
        behind it, for the call's ``arguments`` (read and checked by the caller). A key served
        under ``on_miss="background"`` is tuned on a thread."""
        keys.check_hashable(key, self.name)
        args = arguments.values
        stream = numba_stream(stream, args)
        # The clones tuning reads are copied on this stream: after the arrays' last tuned uses.
        handle = raw_stream(stream)
        if handle != monitor.stream:
            monitor.watch(handle, arguments.arrays, None, stream)
        miss = Miss(key, args, stream, self._arguments.unrestored(arguments), force, serve)
        resolved = self._resolver.resolve(state.cache, miss)
        if resolved.tune_later:
            background.start(self, arguments.clone(stream), self.name)
        return resolved.winner, resolved.report

    def _compiled(self, variant: Variant, args: tuple[Any, ...]) -> Any:
        """The variant's dispatcher, compiled (or loaded) for the types of ``args``."""
        return self._compiler.compiled(variant, args, self._tally)

    # -- introspection ----------------------------------------------------------------------

    def checksum(self) -> str:
        """The digest of the kernel, its variants, launch function and the versions that decide
        whether a stored result holds (computed once, on first use)."""
        return self._shared.checksum()

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
            "benchmarks": self._resolver.benchmarks,
        }

    @property
    def written_variant(self) -> Variant | None:
        """The variant equal to the kernel as written (its parameters have the values the
        kernel's module gives them), or None when no variant is."""
        return self._spec.written_variant

    @property
    def reference_variant(self) -> Variant:
        """The variant that check mode and `numbatune.testing.assert_variants_agree` compare
        the others with: `written_variant`, else the first."""
        return self._spec.reference_variant

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
        return self._spec.is_valid(variant, args)

    @property
    def variants(self) -> list[Variant]:
        """The variants, in the order given."""
        return list(self._spec.variants)

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
        changes = {**options, "variants": variants}
        return TunedKernel(self._spec.replaced(changes, f"{self.name}.with_variants"))

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
        if variant not in self._spec.index:
            raise ValueError(f"{self.name}: {variant!r} is not one of its variants")
        self._arguments.read(args)
        if not self.is_valid(variant, *args):
            raise ValueError(f"{self.name}: {variant.label} is not valid for these arguments")
        if not is_empty(self._spec.launch_config(args, variant)):
            self._kernel_variants.launcher(variant, self._compiled(variant, args), args)(
                args, stream
            )

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
        arguments = self._arguments.read(args)
        state, key = self._device_state(), self._key(args)
        known = state.known(key, self.name)
        served = known is not None and known.report.source in SERVED
        winner, report = self._answer(state, key, arguments, stream, force=force or served)
        spec = self._spec
        if spec.valid is not None and not spec.is_valid(winner.variant, args):
            winner = spec.valid_winner(winner, args)
            report = dataclasses.replace(report, best_index=winner.index)
        launch_config(spec.launch, args, winner.params, self.name)
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
        return f"<numbatune.TunedKernel {self.name} with {len(self._spec.variants)} variants>"
