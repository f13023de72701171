"""Worker processes: child Pythons that run tasks, each with a time limit, replaced when they
die or pass it.

numbatune compiles variants (and, on request, runs untried ones) in worker processes. They are
started as a fresh Python running this module, with an environment of numbatune's choosing, not by
``multiprocessing``: a library must not re-import its user's ``__main__`` module in every
worker (spawn and forkserver do) nor fork a process that holds a CUDA context (a forked child
cannot use it). A task names a function by module and name and passes pickled arguments; the
worker answers with the pickled result or the error it raised. A worker that dies, or passes a
task's time limit (it is killed), fails that task with the reason, and the next task starts a
fresh worker. A task whose exception has ``end_worker`` set, or that returns a ``Done`` with
``ended`` set, ends its worker after the reply (a CUDA context it spoilt). Workers left idle
for a while exit. Tasks given as :class:`LazyTasks` are made as workers take them.

POSIX only: elsewhere :func:`available` is False and callers do the work themselves.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

_HEADER = struct.Struct("<Q")


def available() -> bool:
    """Whether worker processes can be used on this platform."""
    return os.name == "posix"


def environment(simulator: bool, paths: Sequence[str] = (), **variables: str) -> dict[str, str]:
    """This process's environment for its workers: numba's simulator on or off, modules
    imported from ``paths`` and then from where this process imports them, and ``variables``."""
    return {
        **os.environ,
        "NUMBA_ENABLE_CUDASIM": "1" if simulator else "0",
        "PYTHONPATH": os.pathsep.join([*paths, *(path for path in sys.path if path)]),
        **variables,
    }


@dataclass(frozen=True)
class Task:
    """A call of ``module.function(*args)`` in a worker."""

    module: str
    function: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Done:
    """A task's result. A task function may return one with ``ended`` set: the worker ends
    after this reply (the task spoilt it)."""

    value: Any
    ended: bool = False


@dataclass(frozen=True)
class Raised:
    """A task whose function raised: the exception's type name, message and traceback."""

    kind: str
    message: str
    details: str
    #: The worker ends after this reply (the task's error spoilt it).
    ended: bool = False

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class Lost:
    """A task whose worker died or passed the time limit (and was killed)."""

    reason: str

    def __str__(self) -> str:
        return self.reason


Outcome = Done | Raised | Lost


class LazyTasks(Sequence[Task]):
    """``count`` tasks, each made by ``make(index)`` only when a worker takes it, so that the
    first run while the others are being made. Tasks are made one at a time, whichever thread
    asks: making one may not be thread-safe (CPython's ``compile`` of an AST, which writing out
    ``static_range`` loops runs, is not). A task that cannot be made fails alone, as
    :class:`Raised`."""

    def __init__(self, count: int, make: Callable[[int], Task]) -> None:
        self._count, self._make = count, make
        self._making = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Task:  # type: ignore[override]
        if not 0 <= index < self._count:
            raise IndexError(index)
        with self._making:
            return self._make(index)


#: How long a new worker may take to start (import numba and numbatune) before it is stopped.
START_LIMIT_S = 120.0


class _Worker:
    """One child process, and the file its standard error goes to."""

    def __init__(self, environment: Mapping[str, str]) -> None:
        self._ready = False
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.process = subprocess.Popen(
            [sys.executable, "-c", _START],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(environment),
        )

    def run(self, task: Task, limit_s: float) -> Outcome:
        """Run ``task``; its time limit starts once the worker has started."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            if not self._ready:  # the worker says it has started before any task is timed
                _read_frame(self.process.stdout, time.monotonic() + START_LIMIT_S)
                self._ready = True
            _write_frame(self.process.stdin, pickle.dumps(task, protocol=5))
            reply = _read_frame(self.process.stdout, time.monotonic() + limit_s)
        except TimeoutError:
            self.stop()
            limit = limit_s if self._ready else START_LIMIT_S
            return Lost(f"the worker passed the time limit of {limit:g} s and was stopped")
        except (EOFError, OSError):
            return Lost(self._death())
        try:
            outcome = pickle.loads(reply)
        except Exception as error:  # e.g. a result of a class this process cannot import
            return Lost(f"the worker's answer could not be read ({type(error).__name__}: {error})")
        if not isinstance(outcome, Lost) and outcome.ended:
            self.process.wait()  # it ends by itself: never given another task
        return outcome

    def _death(self) -> str:
        code = self.process.wait()
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-8:]
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        return f"the worker process died ({how})" + ("".join(f"\n  {t}" for t in tail))

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        self._stderr.close()


class WorkerPool:
    """Up to ``size`` workers started with ``environment``; see the module's docstring."""

    def __init__(self, size: int, environment: Mapping[str, str], idle_s: float = 60.0) -> None:
        self.size = max(1, size)
        self._environment = dict(environment)
        self._idle_s = idle_s
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def run(
        self,
        tasks: Sequence[Task],
        limit_s: float,
        done: Callable[[int, Outcome], None] = lambda index, outcome: None,
    ) -> list[Outcome]:
        """Run ``tasks`` on up to ``size`` workers at once; their outcomes, in order.
        ``done(index, outcome)`` is called as each task finishes."""
        self._cancel_timer()
        outcomes: list[Outcome | None] = [None] * len(tasks)
        pending = queue.SimpleQueue()
        for index in range(len(tasks)):
            pending.put(index)

        def serve() -> None:
            worker = None
            while True:
                try:
                    index = pending.get_nowait()
                except queue.Empty:
                    break
                try:
                    task = tasks[index]
                except Exception as error:  # a LazyTasks task that could not be made
                    details = traceback.format_exc()
                    outcomes[index] = Raised(type(error).__name__, str(error), details)
                else:
                    worker = worker if worker is not None and worker.alive() else self._worker()
                    outcomes[index] = worker.run(task, limit_s)
                done(index, outcomes[index])
            if worker is not None and worker.alive():
                self._idle.put(worker)

        threads = [
            threading.Thread(target=serve, name="numbatune-worker", daemon=True)
            for _ in range(min(self.size, len(tasks)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._start_timer()
        return [outcome for outcome in outcomes if outcome is not None]

    def start(self, count: int) -> None:
        """Start up to ``count`` workers now (at most ``size`` in all), so that they are ready
        sooner when tasks come."""
        self._cancel_timer()
        with self._lock:
            for _ in range(min(count, self.size) - self._idle.qsize()):
                self._idle.put(_Worker(self._environment))
        self._start_timer()

    def _worker(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return _Worker(self._environment)

    def close(self) -> None:
        """Stop every idle worker."""
        while True:
            try:
                self._idle.get_nowait().stop()
            except queue.Empty:
                return

    def _start_timer(self) -> None:
        with self._lock:
            self._timer = threading.Timer(self._idle_s, self.close)
            self._timer.daemon = True
            self._timer.start()

    def _cancel_timer(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _read_exactly(stream: IO[bytes], count: int, deadline: float | None) -> bytes:
    chunks = []
    while count:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
                raise TimeoutError
        chunk = os.read(stream.fileno(), count)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes], deadline: float | None = None) -> bytes:
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size, deadline))
    return _read_exactly(stream, size, deadline)


#: An environment variable of a worker: how much lower its CPU priority is than its parent's
#: (``os.nice``), so that a parent sharing the machine with busy workers gets a core when it
#: needs one (to hand out tasks and take results).
NICE = "NUMBATUNE_WORKER_NICE"


#: What a worker runs: lower its priority first (importing numba is most of its start, and
#: the parent is busy then too), then run this module as ``numbatune.processes``, so that
#: replies name its classes.
_START = (
    f"import os; os.nice(int(os.environ.get({NICE!r}, '0'))); "
    "import runpy; runpy.run_module('numbatune.processes', run_name='__main__', alter_sys=True)"
)


def _serve() -> None:
    """The worker's loop: read a task, run it, answer; exit when the parent closes the pipe."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # what tasks print must not corrupt the replies
    _write_frame(replies, b"ready")
    while True:
        try:
            task = pickle.loads(_read_frame(requests))
        except EOFError:
            return
        try:
            module = __import__(task.module, fromlist=[task.function])
            value = getattr(module, task.function)(*task.args)
            outcome: Outcome = value if isinstance(value, Done) else Done(value)
        except BaseException as error:  # answered, not raised: the worker goes on
            ended = bool(getattr(error, "end_worker", False))  # the task spoilt this process
            outcome = Raised(type(error).__name__, str(error), traceback.format_exc(), ended)
        _write_frame(replies, pickle.dumps(outcome, protocol=5))
        if outcome.ended:
            return


if __name__ == "__main__":  # run as numbatune.processes, so that replies name its classes
    from numbatune.processes import _serve as serve

    serve()
