"""Worker processes: child Pythons that run tasks, each with a time limit, replaced when they
die or pass it.

Workers are started as a fresh Python running this module, not by ``multiprocessing``: a
library must not re-import its user's ``__main__`` in every worker (spawn and forkserver do) nor
fork a process that holds a CUDA context. A :class:`Task` names a function by module and name,
with pickled arguments; the worker answers with its outcome (:data:`TaskOutcome`). A task that
fails (its worker died, passed the time limit, or could not take it) fails alone; the next
starts a fresh worker. Idle workers exit after a while.

A pool given a ``warm`` task forks its workers from a fresh Python that ran it
(:class:`_ForkServer`, which never holds a CUDA context): each starts with numba imported and
its tables filled, those objects frozen (``gc.freeze``); where the server cannot fork one, the
worker starts fresh. POSIX only: elsewhere :func:`available` is False.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

_HEADER = struct.Struct("<Q")


def available() -> bool:
    """Whether worker processes can be used on this platform."""
    return os.name == "posix"


_in_worker = False


def in_worker() -> bool:
    """Whether this process is a worker (or fork server) of a pool."""
    return _in_worker


def environment(simulator: bool, paths: Sequence[str] = (), **variables: str) -> dict[str, str]:
    """The environment for workers: this process's, numba's simulator on or off, modules
    imported from ``paths`` first, and ``variables``."""
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
    """A task's result; a task function may return one with ``ended`` set: the worker ends
    after this reply."""

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


TaskOutcome = Done | Raised | Lost


class LazyTasks(Sequence[Task]):
    """``count`` tasks, each made by ``make(index)`` as a worker takes it, so that the first run
    while the others are made; one at a time, whichever thread asks (CPython's ``compile`` of an
    AST, which writing out ``static_range`` loops runs, is not thread-safe). A task that cannot
    be made fails alone, as :class:`Raised`."""

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


class _Forked:
    """A worker forked by a :class:`_ForkServer`, with the part of ``subprocess.Popen``'s
    interface :class:`_Worker` uses; the server writes its pid, then its exit status, to a pipe."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], news: IO[bytes]) -> None:
        self.stdin, self.stdout, self._news = stdin, stdout, news
        self._pid: int | None = None
        self.returncode: int | None = None

    def _read_news(self) -> None:
        try:
            (value,) = _NEWS.unpack(_read_exactly(self._news, _NEWS.size, None))
        except EOFError:  # the server is gone: the status is unknown
            self.returncode = -9
            return
        if self._pid is None:
            self._pid = value
        else:
            self.returncode = value

    def poll(self) -> int | None:
        while self.returncode is None and select.select([self._news], [], [], 0)[0]:
            self._read_news()
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._read_news()
        for stream in (self.stdin, self.stdout, self._news):
            with contextlib.suppress(OSError):
                stream.close()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is not None:
            return
        if self._pid is None:  # not forked yet (the server is warming): once forked, it finds
            self.returncode = -9  # its pipes closed and ends
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)


class _ForkServer:
    """A process that ran a pool's ``warm`` task, and forks a worker for each request (through
    a socket, with the worker's pipes attached: :class:`_Forked`)."""

    def __init__(self, environment: Mapping[str, str], warm: Task) -> None:
        self._socket, theirs = socket.socketpair()
        self._lock = threading.Lock()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _START, "fork-server", str(theirs.fileno())],
                stdin=subprocess.PIPE,  # never written: the server ends when it closes
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                env=dict(environment),
                pass_fds=[theirs.fileno()],
            )
        _write_frame(self._socket.makefile("wb", buffering=0), pickle.dumps(warm, protocol=5))

    def fork(self, stderr: IO[bytes]) -> _Forked | None:
        """A new worker, or None when the server cannot make one."""
        tasks_read, tasks_write = os.pipe()
        replies_read, replies_write = os.pipe()
        news_read, news_write = os.pipe()
        theirs = [tasks_read, replies_write, stderr.fileno(), news_write]
        try:
            with self._lock:
                socket.send_fds(self._socket, [b"f"], theirs)
        except OSError:
            for fd in (tasks_write, replies_read, news_read):
                os.close(fd)
            return None
        finally:
            for fd in (tasks_read, replies_write, news_write):
                os.close(fd)
        return _Forked(
            os.fdopen(tasks_write, "wb"),
            os.fdopen(replies_read, "rb"),
            os.fdopen(news_read, "rb", buffering=0),
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self._socket.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        self._stderr.close()


#: What a fork server writes to a worker's news pipe: its pid, then its exit status.
_NEWS = struct.Struct("<q")


class _Worker:
    """One child process, and the file its standard error goes to."""

    def __init__(self, environment: Mapping[str, str], server: _ForkServer | None) -> None:
        self._ready = False
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        forked = server.fork(self._stderr) if server is not None else None
        self.process: subprocess.Popen[bytes] | _Forked = forked or subprocess.Popen(
            [sys.executable, "-c", _START],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(environment),
        )

    def run(self, task: Task, limit_s: float) -> TaskOutcome:
        """Run ``task``, timed from the worker's start; what pickling ``task`` raises is raised."""
        assert self.process.stdin is not None and self.process.stdout is not None
        payload = pickle.dumps(task, protocol=5)
        try:
            if not self._ready:  # the worker says it has started before any task is timed
                _read_frame(self.process.stdout, time.monotonic() + START_LIMIT_S)
                self._ready = True
            _write_frame(self.process.stdin, payload)
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
    """Up to ``size`` workers started with ``environment`` (forked from a process that ran
    ``warm``, where given)."""

    def __init__(
        self,
        size: int,
        environment: Mapping[str, str],
        idle_s: float = 60.0,
        warm: Task | None = None,
    ) -> None:
        self.size = max(1, size)
        self._environment = dict(environment)
        self._idle_s, self._warm = idle_s, warm
        self._server: _ForkServer | None = None
        self._server_lock = threading.Lock()
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._starting = threading.Lock()
        self._timer: threading.Timer | None = None
        self._running = 0  # work under way (_busy): the idle timer waits for the last to end

    def run(
        self,
        tasks: Sequence[Task],
        limit_s: float,
        done: Callable[[int, TaskOutcome], None] = lambda index, outcome: None,
    ) -> list[TaskOutcome]:
        """Run ``tasks`` on up to ``size`` workers at once; their outcomes, in order. Each is
        handed to ``done(index, outcome)`` as it finishes; the first error it raises is raised
        here once every task has run."""
        with self._busy():
            return self._run(tasks, limit_s, done)

    def _run(
        self, tasks: Sequence[Task], limit_s: float, done: Callable[[int, TaskOutcome], None]
    ) -> list[TaskOutcome]:
        outcomes: dict[int, TaskOutcome] = {}
        errors: list[BaseException] = []  # done's, raised once every task has its outcome
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
                    worker = worker if worker is not None and worker.alive() else self._worker()
                    outcome = worker.run(task, limit_s)
                except Exception as error:  # a LazyTasks task that could not be made, a task
                    # that could not be pickled, or a worker that could not be started: the
                    # task fails alone, and the next one tries again
                    outcome = Raised(type(error).__name__, str(error), traceback.format_exc())
                outcomes[index] = outcome
                try:
                    done(index, outcome)
                except BaseException as error:  # (SystemExit too: the caller's to raise)
                    errors.append(error)
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
        if errors:
            raise errors[0]
        return [outcomes[index] for index in range(len(tasks))]

    def start(self, count: int) -> None:
        """Start up to ``count`` workers now (at most ``size`` in all), ready for tasks."""
        with self._busy(), self._starting:
            for _ in range(min(count, self.size) - self._idle.qsize()):
                self._idle.put(self._new_worker())

    def _worker(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._new_worker()

    def prepare(self) -> None:
        """Start the fork server now (a pool with a ``warm`` task), to warm up before workers
        are asked for."""
        if self._warm is not None:
            with self._busy():
                self._ready_server()

    def _new_worker(self) -> _Worker:
        return _Worker(self._environment, None if self._warm is None else self._ready_server())

    def _ready_server(self) -> _ForkServer:
        """The fork server, started anew if there is none or it died."""
        assert self._warm is not None
        with self._server_lock:
            if self._server is None or not self._server.alive():
                self._server = _ForkServer(self._environment, self._warm)
            return self._server

    def close(self) -> None:
        """Stop every idle worker, and the fork server."""
        while True:
            try:
                self._idle.get_nowait().stop()
            except queue.Empty:
                break
        with self._server_lock:
            if self._server is not None:
                self._server.stop()
                self._server = None

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        """While work is under way the idle timer waits; the last to end starts it: the pool
        closes ``idle_s`` later."""
        with self._lock:
            self._running += 1
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    self._timer = threading.Timer(self._idle_s, self.close)
                    self._timer.daemon = True
                    self._timer.start()


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
#: (``os.nice``), so that a parent among busy workers gets a core to hand out tasks.
NICE = "NUMBATUNE_WORKER_NICE"


#: What a worker runs: lower its priority first (importing numba is most of its start, and
#: the parent is busy then too), then run this module as ``numbatune.processes``, so that
#: replies name its classes.
_START = (
    f"import os; os.nice(int(os.environ.get({NICE!r}, '0'))); "
    "import runpy; runpy.run_module('numbatune.processes', run_name='__main__', alter_sys=True)"
)


def _fork_server(fd: int) -> None:
    """A fork server's loop: run the warm task, then fork a worker for each request, reporting
    its pid and exit status; exit when the parent is gone."""
    global _in_worker
    _in_worker = True
    requests = socket.socket(fileno=fd)
    warm = pickle.loads(_read_frame(requests.makefile("rb", buffering=0)))
    try:
        getattr(__import__(warm.module, fromlist=[warm.function]), warm.function)(*warm.args)
    except Exception:  # workers then do it themselves
        traceback.print_exc()
    # What the server holds now is never traversed by its workers' garbage collections (nor
    # copied into them by it): numba's compile makes collections often, and traversing numba's
    # state took 0.39-0.47 of 2.9 s of three sgemm builds on the development machine.
    gc.collect()
    gc.freeze()
    news: dict[int, int] = {}  # a live worker's pid, and the pipe its status goes to
    while True:
        ready = select.select([requests, sys.stdin], [], [], 0.05)[0]
        for pid, status in _reaped(news):
            _tell(news.pop(pid), status)
        if sys.stdin in ready:
            return  # the parent is gone
        if requests not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(requests, 1, 4)
        if not message:
            return
        tasks, replies, stderr, tell = fds
        sys.stdout.flush()  # (a child would write what the warm task printed)
        pid = os.fork()
        if pid == 0:
            requests.close()
            for other in news.values():
                os.close(other)
            os.close(tell)
            for target, source in enumerate((tasks, replies, stderr)):
                os.dup2(source, target)
                os.close(source)
            try:  # and never back into the server's loop
                _serve()
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        for used in (tasks, replies, stderr):
            os.close(used)
        news[pid] = tell
        _tell(tell, pid, close=False)


def _reaped(news: Mapping[int, int]) -> list[tuple[int, int]]:
    """The workers among ``news`` that have ended, and their exit statuses (as Popen's)."""
    waited = [os.waitpid(pid, os.WNOHANG) for pid in news]  # (0, 0) for one still running
    return [(pid, os.waitstatus_to_exitcode(status)) for pid, status in waited if pid]


def _tell(fd: int, value: int, close: bool = True) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, _NEWS.pack(value))
    if close:
        os.close(fd)


def _serve() -> None:
    """The worker's loop: read a task, run it, answer; exit when the parent closes the pipe."""
    global _in_worker
    _in_worker = True
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # what tasks print must not corrupt the replies
    _write_frame(replies, b"ready")
    while True:
        try:
            frame = _read_frame(requests)
        except EOFError:
            return
        try:
            task = _task(frame)
            module = __import__(task.module, fromlist=[task.function])
            value = getattr(module, task.function)(*task.args)
            outcome: TaskOutcome = value if isinstance(value, Done) else Done(value)
        except BaseException as error:  # answered, not raised: the worker goes on
            ended = bool(getattr(error, "end_worker", False))  # the task spoilt this process
            outcome = Raised(type(error).__name__, str(error), traceback.format_exc(), ended)
        _write_frame(replies, pickle.dumps(outcome, protocol=5))
        if outcome.ended:
            return


class UnreadableTask(Exception):
    """A task a worker cannot unpickle (a class of the parent's ``__main__``): the parent may
    run it itself."""


def _task(frame: bytes) -> Task:
    try:
        return pickle.loads(frame)
    except Exception as error:
        raise UnreadableTask(f"{type(error).__name__}: {error}") from None


if __name__ == "__main__":  # run as numbatune.processes, so that replies name its classes
    from numbatune import processes

    if sys.argv[1:2] == ["fork-server"]:
        processes._fork_server(int(sys.argv[2]))
    else:
        processes._serve()
