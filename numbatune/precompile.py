"""Compiling ahead of time, with no GPU: every variant of given tuned kernels for a compute
capability, into a cache directory to ship.

``numbatune compile`` (and :func:`precompile`) compile in worker processes, as tuning does, and
keep each kernel in the kernel store of a cache directory (:mod:`numbatune.compile.store`), where
a process that tunes or launches the same kernel for the same argument types on a device of
that compute capability finds it and compiles nothing. It runs under numba's simulator too (a
CI runner, a Docker build): the workers compile for the compute capability given, not for a
device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numbatune import processes
from numbatune.compile.compiler import RebuildError, build_task, store_key, worker_pool
from numbatune.compile.store import KernelStore
from numbatune.compilers import NUMBA_CUDA
from numbatune.compilers.base import Built, LinkFailed, Resources, installed_version
from numbatune.config import settings
from numbatune.dispatch import TunedKernel
from numbatune.errors import CompilerNotFoundError
from numbatune.variants import Variant

#: The error numba-cuda raises where a CUDA compiler library is not installed.
_LIBRARY_NOT_FOUND = "DynamicLibNotFoundError"


@dataclass(frozen=True)
class Compiled:
    """One variant compiled ahead of time: its resources, or why it failed."""

    kernel: str
    variant: str
    #: The numba types of the arguments it was compiled for.
    signature: str
    resources: Resources | None
    error: str | None
    #: Seconds its kernel took to build: the compile (shared by the kernels of one build key)
    #: and its own link (variants that share a kernel show the same).
    seconds: float
    #: The variant whose kernel it shares (same code), or None when it was compiled itself.
    shares: str | None = None
    #: Whether its kernel was kept in the kernel store (a variant that failed: False).
    kept: bool = False
    #: Why it was not kept, where it was built (the store's problem, in words).
    not_kept: str | None = None


def precompile(
    cases: Iterable[tuple[TunedKernel, tuple[Any, ...]]],
    cc: tuple[int, int],
    cache_dir: Path,
    workers: int | None = None,
    done: Callable[[int, int], None] = lambda finished, total: None,
) -> list[Compiled]:
    """Compile every variant of each ``(tuned kernel, example arguments)`` for compute
    capability ``cc`` into ``cache_dir``'s kernel store; one :class:`Compiled` per variant,
    which says whether its kernel was kept (a read-only store, a full disk keep none or part).
    ``workers`` defaults to the ``compile_workers`` setting; ``done(finished, total)`` reports
    progress. Raises :class:`~numbatune.errors.CompilerNotFoundError` where a CUDA compiler
    library is not installed (once one compile found it missing, no other is started)."""
    jobs: list[_Job] = []
    for tuned, args in cases:
        argtypes = tuned._template.compiler.argument_types(None, args)
        builds = tuned._template.by_build(tuned.variants)
        jobs += [_Job(tuned, argtypes, kernels) for kernels in builds]
    stores: dict[str, KernelStore] = {}
    # The workers' fork server warms the first kernel's compiler (others build all the same).
    compiler = jobs[0].tuned._template.compiler if jobs else NUMBA_CUDA
    pool = worker_pool(max(1, workers or settings.compile_workers), compiler)
    missing: list[str] = []  # a compiler library not found, as a worker's error said

    def task(index: int) -> processes.Task:
        # Each kernel's code is written out (static_range) and pickled as a worker takes it, so
        # the first compile while the others are prepared.
        if missing:
            raise CompilerNotFoundError(missing[0])
        job = jobs[index]
        return build_task(job.tuned._template, job.kernels, job.argtypes, cc)

    tasks = processes.LazyTasks(len(jobs), task)
    recorded: dict[int, list[Compiled]] = {}

    def finished(index: int, outcome: processes.TaskOutcome) -> None:
        # Kept as each kernel is done: a compile stopped part way keeps what it finished.
        job = jobs[index]
        function_id, compiler = job.tuned.function_id, job.tuned._template.compiler
        store = stores.setdefault(function_id, KernelStore(cache_dir, cc, function_id, compiler))
        recorded[index] = job.record(outcome, cc, store)
        done(len(recorded), len(tasks))
        if isinstance(outcome, processes.Raised) and outcome.kind == _LIBRARY_NOT_FOUND:
            missing.append(_install_hint(outcome.message))

    with contextlib.closing(pool):
        pool.run(tasks, settings.compile_timeout_s, finished)
    if missing:
        raise CompilerNotFoundError(missing[0])
    return [compiled for index in range(len(jobs)) for compiled in recorded[index]]


def _install_hint(message: str) -> str:
    """What a missing compiler library's error means, and the extra that installs it: the one
    for the CUDA major version of the installed cuda-bindings."""
    major = installed_version("cuda-bindings").partition(".")[0]
    extra = "cu12" if major == "12" else "cu13"  # (the newest where none is installed)
    return (
        f"a CUDA compiler library is not installed ({message.partition(': ')[0]}); "
        f'pip install "numbatune[{extra}]" installs them'
    )


@dataclass(frozen=True)
class _Job:
    """The kernels of a tuned kernel that one worker builds (one build key: one compile, a
    link for each), each as the variants that share it (compiled as the first)."""

    tuned: TunedKernel
    argtypes: tuple[Any, ...]
    kernels: list[list[Variant]]

    def record(
        self, outcome: processes.TaskOutcome, cc: tuple[int, int], store: KernelStore
    ) -> list[Compiled]:
        """Its variants, each kernel as built (and kept in ``store``, if it can) or failed."""
        built = outcome.value if isinstance(outcome, processes.Done) else [None] * len(self.kernels)
        failure = str(outcome)
        if isinstance(outcome, processes.Raised) and outcome.kind == RebuildError.__name__:
            failure = outcome.message  # the function's own error, as the parent would raise it
        signature = ", ".join(str(t) for t in self.argtypes)
        found = []
        for sharing, kernel in zip(self.kernels, built, strict=True):
            first = sharing[0]
            if isinstance(kernel, Built):
                key = store_key(self.tuned._template, first, self.argtypes, cc, kernel.toolchain)
                kept = store.save(key, kernel.payload)
                resources, error, seconds = kernel.resources, None, kernel.seconds
            else:
                error = kernel.error if isinstance(kernel, LinkFailed) else failure
                resources, seconds, kept = None, 0.0, False
            not_kept = None if kept or error is not None else store.problem or "not kept"
            found += [
                Compiled(self.tuned.function_id, v.label, signature, resources, error, seconds,
                         None if v == first else first.label, kept, not_kept)
                for v in sharing
            ]  # fmt: skip
        return found
