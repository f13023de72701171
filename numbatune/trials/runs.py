"""Trial runs: a variant's first run on this device, in a disposable worker process.

A variant that writes far out of bounds kills the CUDA context of the process that runs it
(``CUDA_ERROR_ILLEGAL_ADDRESS``), and one that loops forever hangs it. So a variant that never
ran on this kind of device first runs once in a worker process with a CUDA context of its own,
on copies of the arguments, within ``trial_timeout_s``; one that fails there never runs in the
caller's process. docs/guarantees.md ("Your process") says what is isolated, how the arguments
reach the worker (by CUDA IPC: :func:`_shared_in_place`, else through one shared-memory file:
:func:`_shared_copies`) and what a lost task costs (:class:`_Progress`, :func:`_failed_alone`).
The ``isolate`` setting chooses what is tried: ``new`` (the default on a GPU) the variants that
never ran (:mod:`numbatune.trials.ledger`), ``all`` every variant, ``off`` none (the default
under numba's simulator, where no kernel can spoil a context).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import queue
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatune import arrays, devices, processes
from numbatune.arrays import SIMULATOR
from numbatune.compilers import KernelCompiler
from numbatune.forking import PerProcess
from numbatune.streams.handles import synchronize, wait_for
from numbatune.tuning import bench

#: What the worker holds: the token of the arguments staged, device copies of them, and the
#: originals each trial starts from.
_staged: dict[str, Any] = {}

#: Arrays in the shared file start at multiples of this many bytes.
_ALIGNMENT = 64


@dataclass(frozen=True)
class Target:
    """What a tuning's trial runs run on: the compiler of its kernels (which loads and launches
    them in the worker) and the device's compute capability (None under a simulator)."""

    compiler: KernelCompiler
    cc: tuple[int, int] | None


class NotStaged(Exception):
    """The worker has not been given the arguments this trial names (a fresh worker)."""


@dataclass(frozen=True)
class _Slot:
    """Where the host copy of one array argument lies in the shared file."""

    offset: int
    shape: tuple[int, ...]
    dtype: str
    order: str  # "C" or "F"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def view(self, buffer: Any) -> np.ndarray:
        return np.ndarray(self.shape, np.dtype(self.dtype), buffer, self.offset, order=self.order)


@dataclass(frozen=True)
class _OpenedByIpc:
    """An array argument the worker copies straight from the caller's device memory, opened
    by CUDA IPC (numba's ``IpcArrayHandle``)."""

    handle: Any


def warm() -> None:
    """(In the worker) import numba and make the CUDA context the trials will use."""
    from numba import cuda

    if not SIMULATOR:
        cuda.current_context()


def stage(token: str, path: str | None, layout: tuple[Any, ...]) -> None:
    """(In the worker) keep device copies of the arguments ``layout`` describes (for an array
    a :class:`_OpenedByIpc` handle, or a :class:`_Slot` in the file at ``path``; else the value)
    for the trials that name ``token``."""
    buffer: Any = b""
    if path is not None:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            buffer = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY) if size else b""
    device = tuple(_device_copy(entry, buffer) for entry in layout)
    originals = tuple(arrays.clone_value(v) if arrays.arrays_in(v) else None for v in device)
    _staged.clear()
    _staged.update(token=token, args=device, originals=originals)


def _device_copy(entry: Any, buffer: Any) -> Any:
    """The value a layout's ``entry`` describes, its arrays (in tuples too) on the device."""
    from numba import cuda

    if isinstance(entry, tuple):
        return tuple(_device_copy(item, buffer) for item in entry)
    if isinstance(entry, _Slot):
        return cuda.to_device(entry.view(buffer))
    if isinstance(entry, _OpenedByIpc):
        with entry.handle as opened:  # the caller's memory: copied, then let go
            copy = arrays.clone(opened)
            cuda.synchronize()
        return copy
    return entry


#: What the progress file holds: the index of the kernel running, and since when (time.time()).
_PROGRESS = struct.Struct("<qd")


class _Progress:
    """Which kernel of a trial task the worker is running, and since when: a small shared file
    the worker writes before each kernel, which this process reads when a task is lost."""

    def __init__(self, descriptor: int, path: str) -> None:
        self.descriptor, self.path = descriptor, path

    def reset(self) -> None:
        """Before a task: no kernel running."""
        os.pwrite(self.descriptor, _PROGRESS.pack(-1, 0.0), 0)

    def running(self) -> tuple[int, float] | None:
        """The index of the kernel the task was running, and since when; None if none."""
        index, since = _PROGRESS.unpack(os.pread(self.descriptor, _PROGRESS.size, 0))
        return None if index < 0 else (index, since)


#: The driver's errors for a launch it refused before running anything, which leave the
#: context as it was: CUDA_ERROR_INVALID_VALUE (a launch configuration out of range) and
#: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (too many registers for the block, say).
REFUSED_LAUNCHES = frozenset({1, 701})


def trial(
    token: str, kernels: Sequence[tuple[bytes, tuple[Any, ...]]], target: Target, progress: str
) -> list[str | None] | processes.Done:
    """(In the worker) run each ``(kernel, launch configuration)`` once on the staged
    arguments, restored first, and wait for it: None for each that ran, else why it failed.
    On a GPU, a kernel that raised an exception of its own (no driver error: a debug kernel's
    ``raise``) ran: the caller's process runs it too, and raises what it raises. After a
    launch the driver refused (:data:`REFUSED_LAUNCHES`) the next kernel runs; any other
    failure ends the list and the worker (its context may be spoilt). Before each kernel, its
    index and the time are written to the file at ``progress`` (:class:`_Progress`)."""
    if _staged.get("token") != token:
        raise NotStaged(token)
    reasons: list[str | None] = []
    with open(progress, "r+b", buffering=0) as noted:
        for index, (kernel, config) in enumerate(kernels):
            os.pwrite(noted.fileno(), _PROGRESS.pack(index, time.time()), 0)
            try:
                _run_once(kernel, config, target)
            except Exception as error:
                code = getattr(error, "code", None)
                if SIMULATOR or code is not None:  # (else the kernel's own: it ran)
                    reasons.append(f"{type(error).__name__}: {error}")
                    if code not in REFUSED_LAUNCHES:
                        return processes.Done(reasons, ended=True)
                    continue
            reasons.append(None)
    return reasons


def _run_once(kernel: bytes, config: tuple[Any, ...], target: Target) -> None:
    from numba import cuda

    args = _staged["args"]
    arrays.restorer(args, _staged["originals"])()
    target.compiler.run_trial(kernel, args, config, target.cc)
    cuda.synchronize()


class Trials:
    """This process's trial worker: one worker process, kept across keys."""

    def __init__(self) -> None:
        environment = processes.environment(simulator=SIMULATOR)
        self._pool = processes.WorkerPool(1, environment, idle_s=120.0)
        self._lock = threading.Lock()

    def start(self, timeout_s: float) -> None:
        """Start the worker, numba and a CUDA context in it, in a thread while variants compile
        (within ``timeout_s``; a session waits for it), unless the worker is in use."""
        if not self._lock.acquire(blocking=False):
            return

        def warm() -> None:
            try:
                self._pool.run([processes.Task(__name__, "warm", ())], timeout_s)
            finally:
                self._lock.release()

        threading.Thread(target=warm, name="numbatune-trial-worker", daemon=True).start()

    @contextlib.contextmanager
    def session(
        self, args: tuple[Any, ...], stream: Any, target: Target, timeout_s: float
    ) -> Iterator[Session]:
        """Trial runs on copies of ``args``, taken on numba's ``stream`` (where they are valid),
        each task within ``timeout_s``; the worker is this session's until it ends."""
        with self._lock, contextlib.ExitStack() as stack:

            def ways() -> Iterator[tuple[str | None, tuple[Any, ...]]]:
                wait_for(stream)  # the worker reads the arrays once they are written
                shared = _shared_in_place(args)
                if shared is not None:
                    yield None, shared
                yield stack.enter_context(_shared_copies(args, stream))

            progress = _Progress(*stack.enter_context(_shared_file(_PROGRESS.size)))
            yield Session(self._pool, uuid.uuid4().hex, target, timeout_s, ways(), progress)


class Session:
    """The arguments of one tuning, staged for trial runs (:meth:`Trials.session`) by the first
    of ``ways`` (each a shared file's path, or None, and a layout) that works."""

    def __init__(
        self,
        pool: processes.WorkerPool,
        token: str,
        target: Target,
        timeout_s: float,
        ways: Iterator[tuple[str | None, tuple[Any, ...]]],
        progress: _Progress,
    ) -> None:
        self.pool, self.token, self.target, self._ways = pool, token, target, ways
        #: The time limit of each task (the tuning's ``trial_timeout_s`` setting).
        self.timeout_s = timeout_s
        self._progress = progress
        #: The way being tried, taken at the first staging (inside a run: the device is held).
        self._way: tuple[str | None, tuple[Any, ...]] | None = None

    def run(self, kernels: Sequence[tuple[bytes, tuple[Any, ...]]]) -> list[str | None]:
        """Run each ``(kernel, configuration)`` once: None for each that ran, else why it failed."""
        reasons: list[str | None] = []
        batch = len(kernels)
        while len(reasons) < len(kernels):
            self._progress.reset()
            started = time.time()
            outcome = self._run(kernels[len(reasons) :][:batch])
            running = self._progress.running()
            if isinstance(outcome, processes.Done):
                reasons += [None if r is None else _why(r) for r in outcome.value]
            elif isinstance(outcome, _Unstaged):
                return reasons + [outcome.why] * (len(kernels) - len(reasons))
            elif running is not None and _failed_alone(running, started, self.timeout_s):
                reasons += [None] * running[0] + [_why(str(outcome))]  # the one running failed
                batch = len(kernels)
            elif running is not None:
                reasons += [None] * running[0]  # those before ran; the next alone, fully timed
                batch = 1
            elif batch > 1:
                batch = 1  # which variant failed is not known: one at a time until found
            else:
                reasons.append(_why(str(outcome)))
                batch = len(kernels)
        return reasons

    def _run(
        self, kernels: Sequence[tuple[bytes, tuple[Any, ...]]]
    ) -> processes.TaskOutcome | _Unstaged:
        """One trial task, the arguments staged first in a worker that does not hold them."""
        arguments = (self.token, kernels, self.target, self._progress.path)
        task = processes.Task(__name__, "trial", arguments)
        outcome = self.pool.run([task], self.timeout_s)[0]
        if isinstance(outcome, processes.Raised) and outcome.kind == "NotStaged":
            why = self._stage()
            if why is not None:
                return _Unstaged(_why(f"the trial worker could not take the arguments: {why}"))
            outcome = self.pool.run([task], self.timeout_s)[0]
        return outcome

    def _stage(self) -> processes.TaskOutcome | None:
        """Give the worker the arguments, by the next way where one fails; None when it has
        them, else why the last way failed."""
        if self._way is None:
            self._way = next(self._ways)
        while True:
            path, layout = self._way
            staging = processes.Task(__name__, "stage", (self.token, path, layout))
            staged = self.pool.run([staging], self.timeout_s)[0]
            if isinstance(staged, processes.Done):
                return None
            way = next(self._ways, None)
            if way is None:
                return staged
            self._way = way


def _failed_alone(running: tuple[int, float], started: float, limit: float) -> bool:
    """Whether the kernel ``running`` (its index in a lost task, and since when it ran) failed
    as it would alone: it died, or it was the task's first, or it passed the time ``limit``
    after the kernels before it had taken no more than a tenth of it, or a second. Else (they
    took more) it is tried again alone, with the whole limit."""
    index, since = running
    now = time.time()
    return now - started < limit or index == 0 or now - since >= limit - min(1.0, limit / 10)


@dataclass(frozen=True)
class _Unstaged:
    """The worker could not take the arguments: no trial can run."""

    why: str


class Pipeline:
    """Trial runs of kernels given one by one as they compile, run in a thread of this process
    while the others compile, each task within ``timeout_s`` and holding
    :data:`numbatune.tuning.bench.device_lock` (not while variants are timed);
    ``tried(name, why)`` is told of each as its trial ends (``why`` None: it ran)."""

    def __init__(
        self,
        args: tuple[Any, ...],
        stream: Any,
        target: Target,
        timeout_s: float,
        tried: Callable[[Hashable, str | None], None],
    ) -> None:
        self._tried = tried
        self._queue: queue.SimpleQueue[tuple[Hashable, bytes, tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._reasons: dict[Hashable, str | None] = {}
        self._error: BaseException | None = None
        served = (args, stream, target, timeout_s, devices.current_index())
        self._thread = threading.Thread(
            target=self._serve, args=served, name="numbatune-trials", daemon=True
        )
        self._thread.start()

    def add(self, name: Hashable, kernel: bytes, config: tuple[Any, ...]) -> None:
        """Try ``kernel`` (serialised) with launch configuration ``config``, known as ``name``."""
        self._queue.put((name, kernel, config))

    def finish(self) -> dict[Hashable, str | None]:
        """Wait for the trials: for each name given, None if it ran, else why it failed."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._reasons

    def _serve(
        self, args: tuple[Any, ...], stream: Any, target: Target, timeout_s: float, device: int
    ) -> None:
        from numba import cuda

        try:
            batch = [self._queue.get()]
            if batch[0] is None:  # nothing to try: the arguments are not copied
                return
            with cuda.gpus[device], trials().session(args, stream, target, timeout_s) as session:
                while True:
                    with contextlib.suppress(queue.Empty):
                        while True:
                            batch.append(self._queue.get_nowait())
                    given = [item for item in batch if item is not None]
                    with bench.device_lock:
                        reasons = session.run([(kernel, config) for _, kernel, config in given])
                    for (name, _, _), why in zip(given, reasons, strict=True):
                        self._reasons[name] = why
                        self._tried(name, why)
                    if batch[-1] is None:
                        return
                    batch = [self._queue.get()]
        except BaseException as error:  # raised in the caller's thread by finish()
            self._error = error


def _why(reason: str) -> str:
    return f"its trial run in a separate process failed: {reason}"


def _shared_in_place(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The layout by which the worker copies each array of ``args`` from this process's device
    memory (a :class:`_OpenedByIpc` for each), or None where one cannot be shared so."""
    if SIMULATOR:
        return None
    try:
        return tuple(arrays.with_arrays_as(arg, _opened_by_ipc, named=False) for arg in args)
    except Exception:  # numba's and the driver's many refusals
        return None


def _opened_by_ipc(array: Any) -> _OpenedByIpc:
    return _OpenedByIpc(arrays.device_view(array).get_ipc_handle())


@contextlib.contextmanager
def _shared_copies(args: tuple[Any, ...], stream: Any) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Host copies of the arrays among ``args``, taken on ``stream``, in one file a worker opens by
    path: the path, and for each argument its :class:`_Slot` or (not an array) the value itself."""
    slots: dict[int, tuple[_Slot, Any]] = {}  # by the array's id: its slot and device view
    size = 0
    for array in (a for arg in args for a in arrays.arrays_in(arg)):
        view = arrays.device_view(array)
        order = "F" if arrays.read(array)[2] == "F" else "C"  # type: ignore[index]
        slot = _Slot(size, tuple(view.shape), view.dtype.str, order)
        slots[id(array)] = slot, view
        size += -(-slot.size // _ALIGNMENT) * _ALIGNMENT
    # (on a GPU the worker launches by the kernel's types: named tuples go as plain tuples,
    # whose class, of the user's script, it may not import; the simulator runs the function)
    layout = tuple(arrays.with_arrays_as(arg, lambda array: slots[id(array)][0], SIMULATOR)
                   for arg in args)  # fmt: skip
    with _shared_file(size) as (descriptor, path):
        if size:
            wait_for(stream)  # the copies below then hold no other thread's launch up
            with mmap.mmap(descriptor, size) as buffer:
                for slot, view in slots.values():
                    _copy_to_host(view, slot.view(buffer), arrays.read(view)[2], stream)  # type: ignore[index]
        yield path, layout


@contextlib.contextmanager
def _shared_file(size: int) -> Iterator[tuple[int, str]]:
    """A file of ``size`` bytes in memory (a ``memfd`` where the system has them, else a
    temporary file): its descriptor and a path by which another process opens it."""
    anonymous = hasattr(os, "memfd_create")
    if anonymous:
        descriptor = os.memfd_create("numbatune-trial-arguments")
        path = f"/proc/{os.getpid()}/fd/{descriptor}"
    else:
        descriptor, path = tempfile.mkstemp(prefix="numbatune-trial-arguments-")
    try:
        os.ftruncate(descriptor, size)
        yield descriptor, path
    finally:
        os.close(descriptor)
        if not anonymous:
            os.unlink(path)


def _copy_to_host(view: Any, target: np.ndarray, layout: str, stream: Any) -> None:
    """Copy a device array into ``target`` on ``stream`` (not the legacy default stream, which
    would make every blocking stream wait), straight where both are laid out alike."""
    if view.size == 0:
        return
    host = view.copy_to_host(target if layout in ("C", "F") else None, stream=stream)
    synchronize(stream)
    if host is not target:
        target[...] = host


#: This process's trial worker (a forked child starts its own).
_trials: PerProcess[Trials] = PerProcess()


def trials() -> Trials:
    """This process's trial worker (made on first use)."""
    return _trials.get(Trials)
