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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba

from numbatune import processes
from numbatune.compile import build
from numbatune.compile.compiler import build_in_worker, store_key, worker_pool
from numbatune.compile.store import KernelStore
from numbatune.config import settings
from numbatune.dispatch import TunedKernel
from numbatune.variants import Variant


@dataclass(frozen=True)
class Compiled:
    """One variant compiled ahead of time: its resources, or why it failed."""

    kernel: str
    variant: str
    #: The numba types of the arguments it was compiled for.
    signature: str
    resources: build.Resources | None
    error: str | None
    #: Seconds its kernel took to compile (variants that share a kernel show the same).
    seconds: float
    #: The variant whose kernel it shares (same code), or None when it was compiled itself.
    shares: str | None = None


def precompile(
    cases: Iterable[tuple[TunedKernel, tuple[Any, ...]]],
    cc: tuple[int, int],
    cache_dir: Path,
    workers: int | None = None,
    done: Callable[[int, int], None] = lambda finished, total: None,
) -> list[Compiled]:
    """Compile every variant of each ``(tuned kernel, example arguments)`` for compute
    capability ``cc`` into ``cache_dir``'s kernel store; one :class:`Compiled` per variant.
    ``workers`` defaults to the ``compile_workers`` setting; ``done(finished, total)`` reports
    progress."""
    jobs: list[_Job] = []
    for tuned, args in cases:
        argtypes = tuple(numba.typeof(value) for value in args)
        kernels = tuned._template.by_kernel(tuned.variants)
        jobs += [_Job(tuned, argtypes, sharing) for sharing in kernels]
    pool = worker_pool(max(1, workers or settings.compile_workers))
    # Each kernel's code is written out (static_range) and pickled as a worker takes it, so
    # the first compile while the others are prepared.
    tasks = processes.LazyTasks(len(jobs), lambda index: jobs[index].task(cc))
    recorded: dict[int, Sequence[Compiled]] = {}

    def finished(index: int, outcome: processes.Outcome) -> None:
        # Kept as each kernel is done: a compile stopped part way keeps what it finished.
        recorded[index] = jobs[index].record(outcome, cc, cache_dir)
        done(len(recorded), len(tasks))

    try:
        pool.run(tasks, settings.compile_timeout_s, finished)
    finally:
        pool.close()
    return [compiled for index in range(len(jobs)) for compiled in recorded[index]]


class _Job:
    """One distinct kernel of a tuned kernel (compiled as its first variant), and the variants
    that share it."""

    def __init__(
        self, tuned: TunedKernel, argtypes: tuple[Any, ...], sharing: list[Variant]
    ) -> None:
        self.tuned, self.argtypes, self.sharing = tuned, argtypes, sharing
        self.variant = sharing[0]

    def task(self, cc: tuple[int, int]) -> processes.Task:
        template = self.tuned._template
        function = build.dumps_function(template.specialised_function(self.variant))
        options = template.jit_options_of(self.variant)
        arguments = (function, options, self.argtypes, cc)
        return processes.Task(build_in_worker.__module__, build_in_worker.__name__, arguments)

    def record(
        self, outcome: processes.Outcome, cc: tuple[int, int], cache_dir: Path
    ) -> Sequence[Compiled]:
        signature = ", ".join(str(t) for t in self.argtypes)
        name = self.tuned.function_id
        if isinstance(outcome, processes.Done):
            built = outcome.value
            key = store_key(self.tuned._template, self.variant, self.argtypes, cc, built.toolchain)
            KernelStore(cache_dir, cc, name).save(key, built.payload)
            resources, error, seconds = built.resources, None, built.seconds
        else:
            resources, error, seconds = None, str(outcome), 0.0
        return [
            Compiled(name, v.label, signature, resources, error, seconds,
                     None if v == self.variant else self.variant.label)
            for v in self.sharing
        ]  # fmt: skip
