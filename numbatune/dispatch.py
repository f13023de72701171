"""The tuned kernel `autotune` returns: the thin call path.

A call enters through its binder (:mod:`numbatune.binder`), whose fast path computes the key,
finds the winner and launches it: the whole hot path. Anything else comes to the general path
here, which checks the arguments, finds the winner in the device's winner table or asks the
resolver (:mod:`numbatune.resolver`), and launches it. The options live in a
:class:`~numbatune.spec.KernelSpec`, a device's state in :mod:`numbatune.shared`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from numbatune import background, identity
from numbatune.arrays import Arguments
from numbatune.binder import Binder, Called
from numbatune.cache.tunecache import Winner
from numbatune.call_arguments import ArgumentCheck
from numbatune.compile.compiler import Tally
from numbatune.config import settings
from numbatune.eager import run_as_written
from numbatune.errors import CaptureError, LaunchFunctionError
from numbatune.launch.config import is_empty, launch_config
from numbatune.resolver import SERVED, Resolver
from numbatune.shared import DeviceState, shared_state
from numbatune.spec import KernelSpec
from numbatune.streams.monitor import captured
from numbatune.trials import trying
from numbatune.tuning.results import Lookup, Origin, TuneReport
from numbatune.variants import Variant
from numbatune.winners import WinnerLauncher


def _nothing_to_do(spec: KernelSpec, args: tuple[Any, ...]) -> bool:
    """Whether the kernel as written launches an empty grid on ``args`` (a malformed launch
    configuration is left to tuning, where only that variant fails)."""
    try:
        return is_empty(spec.launch_config(args, spec.reference_variant))
    except (ValueError, LaunchFunctionError):
        return False


class TunedKernel(Called):
    """A kernel with several compile-time variants that launches the fastest for each key.

    Made by `autotune`. A call, ``kernel(*args, stream=None)``, launches the fastest variant
    for these arguments, tuning first if the key is new (`tune` and `best` tune without
    launching). It takes:

    - ``*args``: the kernel's arguments: numba device arrays, CuPy arrays, torch tensors on
      the GPU (anything with ``__cuda_array_interface__`` or DLPack's ``__dlpack__``) and
      scalars. Host NumPy arrays are refused.
    - ``stream``: a numba, torch, CuPy or cuda.core stream, or a raw ``CUstream`` handle.
      None: the current stream of torch or CuPy when the arguments are theirs (as Triton
      does), else numba's default stream. Arrays of torch or CuPy used on another stream make
      the launch wait on the device for their current stream, as their
      ``__cuda_array_interface__`` asks.

    and raises ``TypeError`` (the wrong number of arguments, an unknown keyword, or an
    argument of the wrong kind: a host array, a scalar where the kernel indexes an array,
    named in the message), ``ValueError`` (an array on another GPU than the current one),
    `TuningError` (every variant failed for this key; the message names each and its error),
    `TuningKeyError` (the key of the call could not be computed, or cannot be a cache key, or
    has no stored result under ``on_miss="error"``),
    `LaunchFunctionError` (the launch function raised) or `StreamError` (``stream`` cannot
    take launches: destroyed, or of another context). The call itself is the C extension's
    (:data:`numbatune.binder.Called`): no Python frame lies between it and the fast path.

    Attributes
    ----------
    name : str
        The name in messages and logs (``autotune(name=...)``, or the kernel function's).
    """

    def __init__(self, spec: KernelSpec) -> None:
        """Made by `autotune`, from ``spec``: the kernel and its options, checked."""
        self._spec = spec
        self.name = spec.kernel_name
        self._template = spec.template
        self._parameters = spec.parameters
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
        self._winners = WinnerLauncher(spec, self._shared, self._tally, self._binder,
                                       self._dispatch)  # fmt: skip
        self._shared.prepare_workers(settings.cache_dir)
        run_entries_as_written()

    def _dispatch(self, args: tuple[Any, ...], stream: Any) -> None:
        """The general path, for calls no fast path takes (one that leaves out parameters with
        defaults goes again, completed, through the binder's entry)."""
        full = self._arguments.completed(args)
        if len(full) > len(args):
            return self._binder.entry(full, stream)
        arguments = self._arguments.read(args)
        state = self._device_state()
        spec = self._spec
        key = spec.key_of(arguments)
        winner = state.known(key, self.name)
        if winner is None:
            if _nothing_to_do(spec, args):
                return  # nothing to tune either (empty inputs, say)
            self._outside_capture(key, stream, args)
            winner, _ = self._answer(state, key, arguments, stream, force=False, serve=True)
        self._winners.launch(state, spec.runnable_winner(winner, args), args, stream)

    def _outside_capture(self, key: Hashable, stream: Any, args: tuple[Any, ...]) -> None:
        """Raise `CaptureError` where ``stream`` is being captured into a CUDA graph: tuning
        ``key`` there would invalidate the capture."""
        if captured(stream, args):
            raise CaptureError(
                f"{self.name}: key {key!r} would be tuned while its stream is being captured "
                f"into a CUDA graph, where tuning cannot run; call {self.name}.warmup(...) "
                "with arguments of this key before the capture"
            )

    def _device_state(self) -> DeviceState:
        """This kernel's state on the current device and cache directory, the binder pointed
        at its paths."""
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
        """The winner for ``key`` and its report (:mod:`numbatune.resolver`; for a call,
        ``serve``, as ``on_miss`` says), for the call's checked ``arguments``; a key served under
        ``on_miss="background"`` is tuned on a thread."""
        unrestored = self._arguments.unrestored(arguments)
        miss = self._resolver.miss(key, arguments, stream, unrestored, force, serve)
        resolved = self._resolver.resolve(state.cache, miss)
        if resolved.tune_later:
            background.start(self, arguments.clone(miss.stream), self.name)
        return resolved.winner, resolved.report

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
        """`written_variant`, else the first: the variant a call launches where ``on_miss``
        finds nothing to go by, and where a search starts (check mode compares the variants
        with the kernel as written itself)."""
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

        For trying a few variants while developing (`numbatune.testing.covering_variants`), or
        a wider space searched. It tunes on its own, under this kernel's name in the disk cache
        (the differing variants make each tune again over the other's results).

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
        """Launch one given variant on ``args``, as if it had won (compiling it if needed),
        ordered after other streams' uses of the arrays as a call is.

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
        args = self._arguments.completed(args)
        self._arguments.read(args)
        if not self.is_valid(variant, *args):
            raise ValueError(f"{self.name}: {variant.label} is not valid for these arguments")
        if not is_empty(self._spec.launch_config(args, variant)):
            kernel = self._winners.compiled(variant, args)
            self._kernel_variants.launcher(variant, kernel, args, watched=True)(args, stream)

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
        CaptureError
            It would tune while ``stream`` is being captured into a CUDA graph.
        """
        args = self._arguments.completed(args)
        arguments = self._arguments.read(args)
        spec = self._spec
        state, key = self._device_state(), spec.key_of(arguments)
        known = state.known(key, self.name)
        served = known is not None and known.report.source in SERVED
        if known is None or force or served:
            self._outside_capture(key, stream, args)
        found, report = self._answer(state, key, arguments, stream, force=force or served)
        winner = spec.runnable_winner(found, args)
        if winner is not found:
            report = dataclasses.replace(report, best_index=winner.index)
        launch_config(spec.launch, args, winner.params, self.name)
        return report

    def lookup(self, *args: Any) -> Lookup:
        """Which variant a call with these arguments launches, and where that answer comes
        from, without tuning, launching, recording the key or waiting for another tuning.

        It asks what a call asks, in the same order: this process's winners, the disk cache (a
        result that serves the current level and check mode), then the ``on_miss`` policy.
        Where none answers, a call would tune (or raise, under ``on_miss="error"``) and the
        lookup says ``Origin.NONE``; `tune` tunes even a key ``on_miss`` serves.

        Parameters
        ----------
        *args
            The kernel's arguments, as for a call (only their key, and ``valid``, are read).

        Returns
        -------
        Lookup
            ``key``, ``origin`` (`Origin`: tuned, disk, ranks, single, nearest, as written,
            none), ``variant`` (None with no answer) and ``in_memory``.

        Raises
        ------
        TypeError
            The arguments are not what the kernel takes, as for a call.
        TuningKeyError
            The key could not be computed.
        """
        args = self._arguments.completed(args)
        arguments = self._arguments.read(args)
        spec = self._spec
        state, key = self._device_state(), spec.key_of(arguments)
        known = state.known(key, self.name)
        report = (
            known.report if known is not None else self._resolver.peek(state.cache, key, arguments)
        )
        if report is None:
            return Lookup(key, Origin.NONE)
        winner = spec.runnable_winner(state.cache.winner_of(report), args)
        return Lookup(key, Origin.of(report.source), winner.variant, known is not None)

    def warmup(self, *args: Any, stream: Any = None) -> TuneReport:
        """Tune (if needed) and compile for these arguments, and make the launch a call of
        theirs takes, without launching: a call with arguments of the same key and types is
        then a hit that only launches, as a CUDA graph capture needs (a call that would tune
        inside a capture raises `CaptureError`).

        Parameters
        ----------
        *args
            The kernel's arguments, as for a call. Tuning runs on copies of them.
        stream
            The stream to tune on, as for a call.

        Returns
        -------
        TuneReport
            The key's report, as `tune` returns it.

        Raises
        ------
        TuningError, TypeError, CaptureError
            As `tune` raises them.
        """
        args = self._arguments.completed(args)
        report = self.tune(*args, stream=stream)
        state = self._device_state()
        known = state.known(self._spec.key_of(self._arguments.read(args)), self.name)
        self._winners.prepare(state, self._spec.runnable_winner(known, args), args)
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
        """numba's ``kernel.forall(n)``: a TypeError that says what to write instead."""
        raise TypeError(
            f"{self.name} is a tuned kernel: instead of {self.name}.forall(n)(...), give it "
            "launch=lambda ..., *, BLOCK: (nt.cdiv(n, BLOCK), BLOCK) and call "
            f"{self.name}(*args)"
        )

    def __repr__(self) -> str:
        return f"<numbatune.TunedKernel {self.name} with {len(self._spec.variants)} variants>"


def run_entries_as_written() -> None:
    """Have torch.compile run a tuned kernel's general path and its methods that tune as
    written (:mod:`numbatune.eager`)."""
    run_as_written(TunedKernel._dispatch, TunedKernel.tune, TunedKernel.warmup,
                   TunedKernel.run_variant)  # fmt: skip
