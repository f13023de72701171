"""Trial runs: a variant's first run on this device, in a disposable worker process.

A variant that writes far out of bounds kills the CUDA context of the process that runs it
(``CUDA_ERROR_ILLEGAL_ADDRESS``: every later call fails), and one that loops forever hangs it.
Before a variant that has never run on this kind of device runs in the caller's process, it
runs once in a worker process with a CUDA context of its own, on copies of the arguments (copied
through the host once per tuning), with a time limit (``trial_timeout_s``). A variant that dies
there, hits a CUDA error or passes the limit is recorded as failed with the reason and never
runs in the caller's process; a worker whose context an error spoilt is replaced. A variant
that ran is remembered, in this process and in the kernel store on disk, and not tried again.

What is isolated: a variant's first run on this kind of device, at the first key it is tuned
for. What is not: its later runs (timing it, and launching it when it wins), at that key or
others, and compiling it (a compile error is the variant's error, and cannot spoil a context).
The ``isolate`` setting chooses: ``new`` (the default on a GPU) tries never-run variants,
``all`` tries every variant at every tuning, ``off`` tries none (the default under numba's
simulator, where no kernel can spoil a context).
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from numbatune import arrays, processes
from numbatune.arrays import SIMULATOR
from numbatune.config import settings

#: What the worker holds: the token of the arguments staged, device copies of them, and the
#: originals each trial starts from.
_staged: dict[str, Any] = {}


class NotStaged(Exception):
    """The worker has not been given the arguments this trial names (a fresh worker)."""


def stage(token: str, host_args: tuple[Any, ...]) -> None:
    """(In the worker) keep device copies of ``host_args`` for the trials that name ``token``."""
    from numba import cuda

    device = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in host_args)
    originals = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else None for a in host_args)
    _staged.clear()
    _staged.update(token=token, args=device, originals=originals)


def trial(token: str, kernel: bytes, config: tuple[Any, ...], cc: tuple[int, int]) -> None:
    """(In the worker) run ``kernel`` once on the staged arguments, restored first, and wait
    for it; a CUDA error ends the worker (its context may be spoilt)."""
    from numba import cuda

    if _staged.get("token") != token:
        raise NotStaged(token)
    args = _staged["args"]
    arrays.restorer(args, _staged["originals"])()
    grid, block, *shared = config
    try:
        if SIMULATOR:
            from numba.cuda import cloudpickle

            cuda.jit(cloudpickle.loads(kernel))[grid, block, 0, shared[0] if shared else 0](*args)
        else:
            from numbatune.compile.build import load

            stream = cuda.default_stream()  # numba's launch takes a stream object
            load(kernel, cc).launch(
                args, _dims(grid), _dims(block), stream, shared[0] if shared else 0
            )
        cuda.synchronize()
    except Exception as error:
        error.end_worker = True  # type: ignore[attr-defined]
        raise


def _dims(value: Any) -> tuple[int, int, int]:
    values = tuple(value) if isinstance(value, tuple | list) else (value,)
    return tuple(int(v) for v in (*values, 1, 1)[:3])  # type: ignore[return-value]


class Trials:
    """This process's trial worker: one worker process, kept across keys."""

    def __init__(self) -> None:
        environment = {
            **os.environ,
            "NUMBA_ENABLE_CUDASIM": "1" if SIMULATOR else "0",
            "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
        }
        self._pool = processes.WorkerPool(1, environment, idle_s=120.0)
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the worker now, while variants compile."""
        self._pool.start(1)

    def run(
        self, kernels: Sequence[tuple[bytes, tuple[Any, ...]]], args: tuple[Any, ...], cc: Any
    ) -> list[str | None]:
        """Run each ``(kernel, launch configuration)`` once on copies of ``args``; for each,
        None if it ran, else why it failed."""
        token = uuid.uuid4().hex
        host = tuple(_host_copy(a) for a in args)
        outcomes = []
        with self._lock:
            for kernel, config in kernels:
                task = processes.Task(__name__, "trial", (token, kernel, config, cc))
                outcome = self._pool.run([task], settings.trial_timeout_s)[0]
                if isinstance(outcome, processes.Raised) and outcome.kind == "NotStaged":
                    staging = processes.Task(__name__, "stage", (token, host))
                    staged = self._pool.run([staging], settings.trial_timeout_s)[0]
                    if not isinstance(staged, processes.Done):
                        outcomes.append(f"the trial worker could not take the arguments: {staged}")
                        continue
                    outcome = self._pool.run([task], settings.trial_timeout_s)[0]
                outcomes.append(None if isinstance(outcome, processes.Done) else _why(outcome))
        return outcomes


def _why(outcome: processes.Outcome) -> str:
    return f"its trial run in a separate process failed: {outcome}"


def _host_copy(value: Any) -> Any:
    """A host (NumPy) copy of a device array; other arguments as they are."""
    if not arrays.is_array(value):
        return value
    from numba import cuda

    view = value if hasattr(value, "copy_to_host") else cuda.as_cuda_array(value)
    host = view.copy_to_host()
    return np.asfortranarray(host) if arrays.read(value)[2] == "F" else host


_trials: Trials | None = None
_trials_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child starts its own trial worker."""
    global _trials, _trials_lock
    _trials, _trials_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def trials() -> Trials:
    """This process's trial worker (made on first use)."""
    global _trials
    with _trials_lock:
        if _trials is None:
            _trials = Trials()
        return _trials
