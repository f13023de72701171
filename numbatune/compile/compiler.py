"""Compiling a tuned kernel's variants: once per distinct kernel, in parallel, kept on disk.

Variants of the same kernel code share one dispatcher and one compile. The kernel store
(:mod:`numbatune.compile.store`) is read first; what is left is built by the kernel compiler
(:meth:`~numbatune.compilers.base.Builds.build`) in worker processes (:mod:`numbatune.processes`,
``compile_workers`` of them, the largest kernels first) when there is more than one kernel,
else here, as is a kernel a worker cannot rebuild (its function does not pickle, or its module
does not import there). A compile error is that variant's error; a worker that dies or passes
``compile_timeout_s`` fails that kernel's variants and is replaced. Under the simulator nothing
is compiled.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numbatune import processes, unroll
from numbatune.arrays import SIMULATOR
from numbatune.compile.store import KernelStore
from numbatune.compilers import KernelCompiler
from numbatune.compilers.base import Built, LinkFailed
from numbatune.config import Snapshot, settings
from numbatune.forking import ForkSafeLock, PerProcess
from numbatune.template import KernelTemplate
from numbatune.tuning.results import Failed
from numbatune.values import stable_text
from numbatune.variants import Variant, grouped

logger = logging.getLogger("numbatune")

CodeKey = tuple[str, str]
#: A kernel to compile: the variants that share it, and the argument types to compile it for.
_Waiting = tuple[list[Variant], tuple[Any, ...]]

#: The compile worker pools by size (a forked child starts its own: the parent's are not its
#: to talk to).
_pools: PerProcess[processes.WorkerPool] = PerProcess()


def worker_environment() -> dict[str, str]:
    """The environment of compile workers: no GPU, numba outside its simulator, a lower CPU
    priority than this process (which hands out the kernels and loads them), and numba's
    errors without terminal colours (colouring the errors numba formats and discards while
    typing took 3.7% of eight softmax kernels' compile time on the development machine)."""
    return processes.environment(
        simulator=False,
        CUDA_VISIBLE_DEVICES="",
        NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING="1",
        **{processes.NICE: "10"},
    )


def warm_worker(compiler: KernelCompiler) -> None:
    """The fork server's task: :meth:`~numbatune.compilers.base.Builds.warm`."""
    compiler.builds.warm()


def worker_pool(size: int, compiler: KernelCompiler) -> processes.WorkerPool:
    """A pool of ``size`` compile workers, forked from a process that warmed ``compiler`` up."""
    warm = processes.Task(__name__, warm_worker.__name__, (compiler,))
    return processes.WorkerPool(size, worker_environment(), warm=warm)


def compile_pool(compiler: KernelCompiler, size: int) -> processes.WorkerPool | None:
    """This process's pool of ``size`` compile workers for ``compiler``'s kernels, or None
    where ``size`` (the ``compile_workers`` setting) or the platform allow none."""
    if size < 2 or not processes.available():
        return None
    return _pools.get(lambda: worker_pool(size, compiler), key=(size, compiler.name))


class RebuildError(Exception):
    """A worker could not rebuild a kernel's function (it is compiled in the parent instead)."""


#: A worker's errors that have the parent compile the kernel itself: the worker could not rebuild
#: its function, or read the task (argument types of a class of the user's script: a named tuple's).
_HERE = (RebuildError.__name__, processes.UnreadableTask.__name__)


def build_in_worker(
    compiler: KernelCompiler,
    function_bytes: bytes,
    options: dict[str, Any],
    argtypes: tuple[Any, ...],
    cc: tuple[int, int],
    max_registers: tuple[int | None, ...],
) -> list[Built | LinkFailed]:
    """The worker's task: the compiler's build of the function, its ``static_range`` loops
    written out here (in parallel, not one after another in the parent); a function that
    cannot be rebuilt or written out here raises :class:`RebuildError` (the parent then does
    both, and reports their errors), one that does not compile its own error."""
    try:
        function = unroll.written_out(compiler.builds.loads_function(function_bytes))
    except Exception as error:
        raise RebuildError(f"{type(error).__name__}: {error}") from None
    return compiler.builds.build(function, options, argtypes, cc, max_registers)


def build_task(
    template: KernelTemplate,
    kernels: Sequence[Sequence[Variant]],
    argtypes: tuple[Any, ...],
    cc: tuple[int, int],
) -> processes.Task:
    """The worker's task that builds ``kernels`` (each the variants sharing one kernel, all
    of one build key) for ``argtypes`` and ``cc``: one compile, a link each;
    :class:`RebuildError` where the function does not pickle."""
    first = kernels[0][0]
    try:  # written out in the worker: the parent is one, the workers are many
        specialised = template.specialised_function(first, write_out=False)
        function = template.compiler.builds.dumps_function(specialised)
    except Exception as error:
        raise RebuildError(f"{type(error).__name__}: {error}") from None
    options = template.build_options(first)
    caps = tuple(template.jit_options_of(members[0]).get("max_registers") for members in kernels)
    arguments = (template.compiler, function, options, argtypes, cc, caps)
    return processes.Task(__name__, build_in_worker.__name__, arguments)


@dataclass
class Tally:
    """A tuned kernel's kernels compiled and loaded from the store, and its trial runs' seconds."""

    compiles: int = 0
    loaded: int = 0
    trial_s: float = 0.0


@dataclass(frozen=True)
class _Settled:
    """The variants :meth:`Compiler.compile_all` has settled, told ``done`` and ``ready`` as
    kernels compile (in the pool's threads)."""

    results: dict[Variant, Any]
    done: Callable[[int], None]
    ready: Callable[[list[Variant], bool], None]
    #: The argument types that make a kernel ready (the first it is compiled for).
    first: tuple[Any, ...]

    def compiled(self, members: list[Variant], dispatcher: Any, argtypes: tuple[Any, ...]) -> None:
        """``members``' kernel is compiled for ``argtypes``."""
        if members[0] not in self.results:
            self.results.update(dict.fromkeys(members, dispatcher))
        if argtypes == self.first and not isinstance(self.results[members[0]], Failed):
            self.ready(members, True)
        self.done(len(self.results))

    def failed(self, members: list[Variant], failure: Failed) -> None:
        self.results.update(dict.fromkeys(members, failure))
        self.done(len(self.results))


class Compiler:
    """The compiled kernels of one tuned kernel's variants (shared by tuned kernels that are the
    same: :mod:`numbatune.identity`); a kernel declared with signatures is compiled for those,
    as numba would, whatever the arguments' types."""

    def __init__(self, template: KernelTemplate, function_id: str) -> None:
        self._template = template
        self._kernels = template.compiler
        self._function_id = function_id
        self._dispatchers: dict[CodeKey, Any] = {}
        self._stores: dict[tuple[Any, ...], KernelStore] = {}
        self._payloads: dict[tuple[CodeKey, Any], bytes] = {}
        #: The store keys of the kernels that could not be serialised (not tried again here).
        self._unserialisable: set[str] = set()
        self._lock = ForkSafeLock(reentrant=True)

    @property
    def kernel_compiler(self) -> KernelCompiler:
        """The compiler of its variants' kernels."""
        return self._kernels

    @property
    def overloaded(self) -> bool:
        """Whether the kernel was declared with several signatures: which one a call's
        arguments take is known only once every one is compiled."""
        return len(self._template.signatures) > 1

    def prepare(self, variants: Sequence[Variant]) -> None:
        """Start the fork server of the compile workers ``variants`` would need, long before
        any is asked for: it warms up while the caller makes its arguments."""
        if (found := self._pool_for(variants, settings.compile_workers)) is not None:
            found[0].prepare()

    def warm_up(self, variants: Sequence[Variant], workers: int) -> None:
        """Start the ``workers`` compile workers ``variants`` may need, so that they start
        while this process does its own part (cloning, planning, reading the store)."""
        if (found := self._pool_for(variants, workers)) is not None:
            pool, kernels = found
            pool.start(kernels)

    def _pool_for(
        self, variants: Sequence[Variant], workers: int
    ) -> tuple[processes.WorkerPool, int] | None:
        """The pool of ``workers`` compile workers and how many kernels ``variants`` compile to
        (of the first 256: enough to size a pool), where they would use one."""
        if SIMULATOR:
            return None
        kernels = len({self._template.code_key(variant) for variant in variants[:256]})
        pool = compile_pool(self._kernels, workers) if kernels > 1 else None
        return None if pool is None else (pool, kernels)

    def dispatcher(self, variant: Variant) -> Any:
        """The dispatcher of the variant's kernel, shared by variants of the same code (made
        once: writing its ``static_range`` loops out is slow)."""
        code_key = self._template.code_key(variant)
        with self._lock:
            if code_key not in self._dispatchers:
                function = self._template.specialised_function(variant)
                self._dispatchers[code_key] = self._template.specialise(variant, function)
            return self._dispatchers[code_key]

    def _add(self, dispatcher: Any, argtypes: tuple[Any, ...], kernel: Any = None) -> bool:
        """Add ``kernel`` for ``argtypes`` to ``dispatcher`` (compile one when None); False
        when it already has one (:meth:`numbatune.compilers.base.KernelCompiler.add`)."""
        with self._lock:
            if self._has(dispatcher, argtypes):
                return False
            self._kernels.add(dispatcher, argtypes, kernel, len(self._template.signatures))
            return True

    def _has(self, dispatcher: Any, argtypes: tuple[Any, ...]) -> bool:
        return self._kernels.compiled(dispatcher, argtypes) is not None

    def _signatures(self, dispatcher: Any, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The argument types to compile for: the declared signatures, else those of ``args``."""
        if self._template.signatures:
            return list(self._template.signatures)
        return [self._kernels.argument_types(dispatcher, args)]

    def compiled(
        self, variant: Variant, args: tuple[Any, ...], tally: Tally, cache_dir: Path | None
    ) -> Any:
        """The variant's dispatcher, compiled (or loaded from the kernel store of
        ``cache_dir``, and kept there) for ``args`` here; a compile error is raised."""
        dispatcher = self.dispatcher(variant)
        if SIMULATOR:
            return dispatcher
        for argtypes in self._signatures(dispatcher, args):
            if self._has(dispatcher, argtypes) or self._load(variant, argtypes, tally, cache_dir):
                continue
            if self._add(dispatcher, argtypes):
                tally.compiles += 1
            self._save(variant, argtypes, cache_dir, self._kernels.compiled(dispatcher, argtypes))
        return dispatcher

    def compile_all(
        self,
        variants: Sequence[Variant],
        args: tuple[Any, ...],
        done: Callable[[int], None],
        tally: Tally,
        ready: Callable[[list[Variant], bool], None],
        taken: Snapshot,
    ) -> dict[Variant, Any]:
        """Each variant's dispatcher compiled for ``args``, or :class:`Failed`; ``done(count)``
        as variants are settled, and ``ready(members, made)`` as the kernel ``members`` share
        is compiled for the first argument types (those trial runs take), while others may
        still compile; ``made``: by this call (not before, nor loaded from the store). The
        compile workers, their time limit and the cache directory are ``taken``'s."""
        results: dict[Variant, Any] = {}
        waiting: list[_Waiting] = []
        signatures: list[tuple[Any, ...]] | None = None  # the same for every variant
        for members in self._template.by_kernel(variants):
            try:
                if SIMULATOR:  # nothing to compile: each variant runs its own dispatcher
                    made = self._template.code_key(members[0]) not in self._dispatchers
                    results.update(dict.fromkeys(members, self.dispatcher(members[0])))
                    ready(members, made)
                    continue
                if signatures is None:
                    signatures = self._signatures(self.dispatcher(members[0]), args)
                # A kernel's code is written out only when it is loaded or compiled: in a
                # worker's task (below) as the worker takes it, not all before the first.
                missing = self._missing(members[0], signatures, tally, taken.cache_dir)
                if not missing:
                    results.update(dict.fromkeys(members, self.dispatcher(members[0])))
                    ready(members, False)
            except Exception as error:
                results.update(dict.fromkeys(members, Failed.of(error)))
                continue
            waiting += [(members, argtypes) for argtypes in missing]
        done(len(results))
        if waiting:
            assert signatures is not None
            settled = _Settled(results, done, ready, signatures[0])
            self._compile_waiting(waiting, args, settled, tally, taken)
        return results

    def _missing(
        self,
        variant: Variant,
        signatures: Sequence[tuple[Any, ...]],
        tally: Tally,
        cache_dir: Path | None,
    ) -> list[tuple[Any, ...]]:
        """The ``signatures`` the variant's kernel has not compiled and the store does not
        hold. Those compiled already are kept in the current store if it lacks them (compiled
        under another cache directory, or none), so that an export of this tuning has them."""
        existing = self._dispatchers.get(self._template.code_key(variant))
        missing = []
        for argtypes in signatures:
            if existing is not None and self._has(existing, argtypes):
                self._keep(variant, existing, argtypes, cache_dir)
            elif not self._load(variant, argtypes, tally, cache_dir):
                missing.append(argtypes)
        return missing

    def _compile_waiting(
        self,
        waiting: list[_Waiting],
        args: tuple[Any, ...],
        settled: _Settled,
        tally: Tally,
        taken: Snapshot,
    ) -> None:
        pool = compile_pool(self._kernels, taken.compile_workers) if len(waiting) > 1 else None
        here = waiting
        if pool is not None:
            here = self._compile_in_workers(pool, self._builds(waiting), settled, tally, taken)
        for members, argtypes in here:  # compiled() makes every signature at once
            if isinstance(settled.results.get(members[0]), Failed):
                continue
            try:
                dispatcher = self.compiled(members[0], args, tally, taken.cache_dir)
            except Exception as error:
                settled.failed(members, Failed.of(error))
            else:
                settled.compiled(members, dispatcher, argtypes)

    def _builds(self, waiting: list[_Waiting]) -> list[list[_Waiting]]:
        """``waiting`` grouped into what one worker builds (the kernels of one build key and
        signature), the largest first, so that the last to finish is not a long one."""
        build_key = self._template.build_key
        builds = grouped(waiting, lambda kernel: (build_key(kernel[0][0]), kernel[1]))
        size = self._template.written_out_size
        return sorted(builds.values(), key=lambda kernels: -size(kernels[0][0][0]))

    def _compile_in_workers(
        self,
        pool: processes.WorkerPool,
        builds: list[list[_Waiting]],
        settled: _Settled,
        tally: Tally,
        taken: Snapshot,
    ) -> list[_Waiting]:
        """Compile ``builds`` in ``pool``, each within the tuning's compile time limit
        (``taken``); returns what to compile here instead."""
        from numba import cuda

        device = cuda.get_current_device()
        cc = tuple(device.compute_capability)
        here: list[_Waiting] = []
        seconds: list[float] = []  # each build's
        started, compiled_before = time.perf_counter(), tally.compiles

        def task(index: int) -> processes.Task:  # made when a worker takes it
            kernels = builds[index]
            return build_task(self._template, [members for members, _ in kernels],
                              kernels[0][1], cc)  # fmt: skip

        def finished(index: int, outcome: processes.TaskOutcome) -> None:
            kernels = builds[index]
            if isinstance(outcome, processes.Done):
                for (members, argtypes), built in zip(kernels, outcome.value, strict=True):
                    if isinstance(built, LinkFailed):
                        settled.failed(members, Failed(built.error))
                        continue
                    with cuda.gpus[device.id]:  # loaded now, while other kernels compile
                        dispatcher = self._take(members[0], argtypes, built, cc, tally,
                                                taken.cache_dir)  # fmt: skip
                    settled.compiled(members, dispatcher, argtypes)
                # The build's time: its kernels' compile is one, their links run together.
                times = [b.seconds for b in outcome.value if isinstance(b, Built)]
                seconds.append(max(times, default=0.0))
            elif isinstance(outcome, processes.Raised) and outcome.kind in _HERE:
                logger.debug("%s: compiled in this process: %s", self._function_id, outcome)
                here.extend(kernels)
            else:
                for members, _ in kernels:
                    settled.failed(members, Failed(str(outcome)))

        tasks = processes.LazyTasks(len(builds), task)
        pool.run(tasks, taken.compile_timeout_s, finished)
        logger.info(
            "numbatune: %s: %d kernels compiled (%d builds) in %d worker processes in %.2f s "
            "(%.2f s of building in all, the longest %.2f s)",
            self._function_id,
            tally.compiles - compiled_before,
            len(seconds),
            min(pool.size, len(builds)),
            time.perf_counter() - started,
            sum(seconds),
            max(seconds, default=0.0),
        )
        return here

    def _take(
        self,
        variant: Variant,
        argtypes: tuple[Any, ...],
        built: Built,
        cc: tuple[int, int],
        tally: Tally,
        cache_dir: Path | None,
    ) -> Any:
        """The variant's dispatcher with the kernel a worker built for ``argtypes`` loaded (and
        kept in the store of ``cache_dir``, and for a trial run)."""
        dispatcher = self.dispatcher(variant)
        kernel = self._kernels.load(built.payload, cc)
        kernel.bind()
        if self._add(dispatcher, argtypes, kernel):
            tally.compiles += 1
        self._save(variant, argtypes, cache_dir, payload=built.payload)
        with self._lock:
            self._payloads.setdefault((self._template.code_key(variant), argtypes), built.payload)
        return dispatcher

    def payload(self, variant: Variant, args: tuple[Any, ...]) -> bytes:
        """The variant's kernel for (the first signature of) ``args`` as a trial worker runs it
        (:meth:`~numbatune.compilers.base.KernelCompiler.trial_payload`)."""
        dispatcher = self.dispatcher(variant)
        argtypes = () if SIMULATOR else self._signatures(dispatcher, args)[0]
        key = (self._template.code_key(variant), argtypes)
        with self._lock:
            if key not in self._payloads:
                self._payloads[key] = self._kernels.trial_payload(dispatcher, argtypes)
            return self._payloads[key]

    def kernel_key(self, variant: Variant, args: tuple[Any, ...]) -> str:
        """The kernel store's key of the variant's kernel for (the first signature of)
        ``args`` on the current device (under the simulator: its code key as text)."""
        if SIMULATOR:
            return stable_text(self._template.code_key(variant))
        argtypes = self._signatures(self.dispatcher(variant), args)[0]
        return self._key(variant, argtypes)

    def kernel_store(self, cache_dir: Path | None) -> KernelStore | None:
        """The kernel store of the current device in ``cache_dir``; None where kernels are not
        kept (no cache directory, the simulator)."""
        if SIMULATOR or cache_dir is None:
            return None
        return self._store(cache_dir)

    # -- the kernel store of the current device -----------------------------------------------

    def _store(self, cache_dir: Path) -> KernelStore:
        cc = _current_cc()
        with self._lock:
            if (cache_dir, cc) not in self._stores:
                store = KernelStore(cache_dir, cc, self._function_id, self._kernels)
                self._stores[cache_dir, cc] = store
            return self._stores[cache_dir, cc]

    def _key(self, variant: Variant, argtypes: tuple[Any, ...]) -> str:
        tools = _toolchain(self._kernels)
        return store_key(self._template, variant, argtypes, _current_cc(), tools)

    def _load(
        self, variant: Variant, argtypes: tuple[Any, ...], tally: Tally, cache_dir: Path | None
    ) -> bool:
        """Add the kernel for ``argtypes`` stored in ``cache_dir`` to the variant's dispatcher,
        if one is stored."""
        if cache_dir is None:
            return False
        kernel = self._store(cache_dir).load(self._key(variant, argtypes))
        if kernel is None:
            return False
        if self._add(self.dispatcher(variant), argtypes, kernel):
            tally.loaded += 1
        return True

    def _keep(
        self, variant: Variant, dispatcher: Any, argtypes: tuple[Any, ...], cache_dir: Path | None
    ) -> None:
        """Save ``dispatcher``'s kernel for ``argtypes`` in ``cache_dir``'s store, unless it holds
        it or cannot be written (read-only): it is not serialised for nothing at every tuning."""
        if cache_dir is None:
            return
        store = self._store(cache_dir)
        if store.problem is None and not store.holds(self._key(variant, argtypes)):
            self._save(variant, argtypes, cache_dir, self._kernels.compiled(dispatcher, argtypes))

    def _save(
        self,
        variant: Variant,
        argtypes: tuple[Any, ...],
        cache_dir: Path | None,
        kernel: Any = None,
        payload: bytes | None = None,
    ) -> None:
        """Keep the variant's kernel for ``argtypes`` in the store of ``cache_dir``: the
        ``payload`` a worker built, else ``kernel`` serialised."""
        if cache_dir is None:
            return
        key = self._key(variant, argtypes)
        payload = payload or self._serialised(key, kernel)
        if payload is not None:
            self._store(cache_dir).save(key, payload)

    def _serialised(self, key: str, kernel: Any) -> bytes | None:
        """The kernel of store key ``key`` as the store keeps it, or None where it cannot be
        serialised: tried once in this process (it would fail again at every tuning)."""
        if key in self._unserialisable:
            return None
        try:
            return self._kernels.serialise(kernel)
        except Exception as error:  # numba serialises no kernel that links extra files
            logger.debug("%s: not kept on disk: %s", self._function_id, error)
            self._unserialisable.add(key)
            return None


def store_key(
    template: KernelTemplate,
    variant: Variant,
    argtypes: tuple[Any, ...],
    cc: tuple[int, int],
    tools: tuple[str, ...],
) -> str:
    """The kernel store's key of ``variant``'s kernel for ``argtypes``: a digest of what decides
    its code (the kernel's code and the values it reads, the variant, the argument types, the
    compute capability, the compiler's ``tools`` and payload format)."""
    code = "\0".join([template.code_text(), stable_text(template.code_key(variant))])
    payload = f"payload {template.compiler.payload_version}"
    parts = [code, repr(argtypes), f"sm_{cc[0]}{cc[1]}", *tools, payload]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def _current_cc() -> tuple[int, int]:
    from numba import cuda

    return tuple(cuda.get_current_device().compute_capability)


@functools.cache
def _toolchain(compiler: KernelCompiler) -> tuple[str, ...]:
    return compiler.builds.toolchain()
