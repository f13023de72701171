"""Compiling a tuning's variants and trying each as it compiles (:func:`compile_and_try`).

Each kernel the ``isolate`` setting asks for runs once in the trial worker
(:mod:`numbatune.trials.runs`) as soon as it is compiled, while the others still compile; one
whose kernel numba cannot serialise for the worker (it reads a global device array) runs here
untried, as numba runs it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numbatune import devices
from numbatune.arrays import SIMULATOR
from numbatune.compile.compiler import Compiler, Tally
from numbatune.config import Isolate, Snapshot
from numbatune.launch.config import LaunchConfig, is_empty, launch_config, params_taken
from numbatune.launch.numbalaunch import numba_launch
from numbatune.trials import ledger, runs
from numbatune.tuning.job import Arrived, Launcher
from numbatune.tuning.results import Failed
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")


@dataclass(frozen=True)
class KernelVariants:
    """What compiling, trying and launching a tuned kernel's variants takes."""

    #: The tuned kernel's name, in messages.
    name: str
    compiler: Compiler
    #: The tuned kernel's count of compiles, loads and trial time.
    tally: Tally
    #: The launch function, and the parameters of each variant that it takes.
    launch: Callable[..., LaunchConfig]
    launch_params: Mapping[Variant, dict[str, Any]]

    def runnable_config(self, args: tuple[Any, ...], variant: Variant) -> LaunchConfig:
        """The launch configuration of ``variant`` for ``args``, for tuning to run; a ValueError
        for an empty grid (an empty launch has nothing to measure)."""
        params = params_taken(self.launch, variant, self.launch_params)
        config = launch_config(self.launch, args, params, self.name)
        if is_empty(config):
            raise ValueError(
                f"{self.name}: the launch function gives {variant.params} an empty grid "
                f"{config[0]} for these arguments: nothing to run"
            )
        return config

    def launcher(
        self, variant: Variant, kernel: Any, args: tuple[Any, ...], watched: bool = False
    ) -> Launcher:
        """A launch of the compiled ``kernel`` of ``variant`` through numba, configured for
        ``args``; ``watched``: on the caller's arrays, which the stream monitor orders after
        other streams' uses of them (not tuning's private clones)."""
        config = self.runnable_config(args, variant)
        launch = numba_launch(kernel, self.name if watched else None)
        return lambda args, stream: launch(args, config, stream)


def start_worker(taken: Snapshot) -> None:
    """Start the trial worker where the ``isolate`` setting of a tuning about to begin
    (``taken``) asks for trials, while its variants are prepared."""
    if taken.isolate is not Isolate.OFF:
        runs.trials().start(taken.trial_timeout_s)


def compile_and_try(
    kernel: KernelVariants,
    variants: Sequence[Variant],
    args: tuple[Any, ...],
    launch_args: tuple[Any, ...],
    stream: Any,
    done: Callable[[int], None],
    arrived: Arrived,
    taken: Snapshot,
) -> dict[Variant, Launcher | Failed]:
    """Each of ``variants`` of ``kernel`` compiled, tried (the tuning's ``isolate`` setting)
    and made a launcher, or why it failed (:class:`~numbatune.tuning.results.Failed`).

    ``args`` (the caller's, or clones of them) are valid on ``stream``; the launch function is
    called with the caller's ``launch_args`` (it may read what clones, numba arrays, do not
    have: a torch tensor's ``numel()``). ``done`` is told how many variants are settled, as
    they are; ``arrived`` of each variant, with its launcher, as soon as it may run (a kernel
    declared with one signature or none). ``isolate``, ``compile_workers`` and the time limits
    of compiles and trials are read from the tuning's settings ``taken``, never from the
    settings of the moment.
    """

    def may_run(variant: Variant) -> None:
        if kernel.compiler.overloaded:  # which overload args take: not known yet
            return
        with contextlib.suppress(Exception):  # it fails again below, as its error
            dispatcher = kernel.compiler.dispatcher(variant)
            arrived(variant, kernel.launcher(variant, dispatcher, launch_args))

    def launcher(variant: Variant, made: Any) -> Launcher | Failed:
        try:
            return made if isinstance(made, Failed) else kernel.launcher(variant, made, launch_args)
        except Exception as error:
            return Failed.of(error)

    trying = _Trying(kernel, args, launch_args, stream, may_run, taken)
    try:
        compiled = kernel.compiler.compile_all(
            variants, args, done, kernel.tally, trying.add, taken
        )
    finally:  # also when compiling is interrupted: the trial worker is freed
        failed = trying.finish()
    compiled.update({v: f for v, f in failed.items() if not isinstance(compiled.get(v), Failed)})
    return {variant: launcher(variant, made) for variant, made in compiled.items()}


class _Trying:
    """The trial runs of one tuning's variants, each tried as soon as it compiles."""

    def __init__(
        self,
        kernel: KernelVariants,
        args: tuple[Any, ...],
        launch_args: tuple[Any, ...],
        stream: Any,
        may_run: Callable[[Variant], None],
        taken: Snapshot,
    ) -> None:
        self._kernel, self._args, self._may_run = kernel, args, may_run
        self._launch_args = launch_args
        self._isolate = taken.isolate
        self._cache_dir = taken.cache_dir  # (whose kernel store says which variants ran)
        self._made: set[Variant] = set()
        self._failed: dict[Variant, Failed] = {}
        self._pipeline = None
        if self._isolate is not Isolate.OFF:
            cc = None if SIMULATOR else devices.current_kind().compute_capability
            target = runs.Target(kernel.compiler.kernel_compiler, cc)
            self._pipeline = runs.Pipeline(args, stream, target, taken.trial_timeout_s,
                                           self._tried)  # fmt: skip

    def add(self, members: Sequence[Variant], made: bool) -> None:
        """Try those of ``members`` (sharing a kernel, now compiled) that need it; if this tuning
        ``made`` their kernel, tell ``may_run`` of each as it may run (now, or after its trial)."""
        if made:
            self._made.update(members)
        compiler, name = self._kernel.compiler, self._kernel.name
        for variant in members:
            if self._pipeline is not None and (
                self._isolate is not Isolate.NEW
                or not ledger.has_run(compiler, variant, self._args, self._cache_dir)
            ):
                try:
                    config = self._kernel.runnable_config(self._launch_args, variant)
                except Exception as error:
                    self._failed[variant] = Failed.of(error)
                    continue
                try:
                    payload = compiler.payload(variant, self._args)
                except Exception as error:  # numba runs it: it runs here, untried
                    why = f"its kernel does not serialise ({error})"
                    logger.info(
                        "numbatune: %s: %s is not tried apart: %s", name, variant.label, why
                    )
                else:
                    self._pipeline.add(variant, payload, config)
                    continue
            if made:
                self._may_run(variant)

    def _tried(self, variant: Hashable, why: str | None) -> None:
        if why is None and variant in self._made:
            assert isinstance(variant, Variant)
            self._may_run(variant)

    def finish(self) -> dict[Variant, Failed]:
        """Wait for the trials (the tuning's trial time: the rest ran while variants compiled);
        the variants that failed theirs (or could not be given one)."""
        if self._pipeline is None:
            return {}
        waited = time.perf_counter()
        reasons = self._pipeline.finish()
        self._kernel.tally.trial_s += time.perf_counter() - waited
        for variant, why in reasons.items():
            if why is None:
                ledger.mark_run(self._kernel.compiler, variant, self._args, self._cache_dir)
            else:
                self._failed[variant] = Failed(why)
        return self._failed
