"""Launching through numba's own ``kernel[grid, block, stream, shared](*args)``.

For what the fast path does not take (the simulator, argument kinds it has no plan for,
cooperative kernels) and for tuning's launches on private clones. numba orders torch and CuPy
arrays after their current stream by synchronising the host, as ``__cuda_array_interface__``
asks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from numbatune.arrays import SIMULATOR, is_array
from numbatune.streams.handles import numba_stream, raw_stream
from numbatune.streams.monitor import monitor

#: ``launch(args, (grid, block[, shared_bytes]), stream)``; ``stream`` None or any stream.
Launch = Callable[[tuple[Any, ...], tuple[Any, ...], Any], None]

# The simulator runs one kernel at a time in a process, and numba's simulated kernel keeps
# its grid on itself: launches from several threads configure and run it in turns.
_simulator_lock = threading.Lock()


def numba_launch(dispatcher: Any, name: str | None = None) -> Launch:
    """A launch of ``dispatcher`` through numba.

    With a ``name`` the launches are a tuned kernel's and the stream monitor sees them (for
    ordering across streams and profiles); without, they are tuning's, on private clones.
    """

    def launch(args: tuple[Any, ...], config: tuple[Any, ...], stream: Any) -> None:
        grid, block = config[0], config[1]
        shared = config[2] if len(config) > 2 else 0
        stream = numba_stream(stream, args)
        watched = None
        if name is not None:
            handle = raw_stream(stream)
            if handle != monitor.stream:
                arrays = tuple(a for a in args if is_array(a))
                watched = monitor.watch(handle, arrays, name, stream)
        if SIMULATOR:
            with _simulator_lock:
                dispatcher[grid, block, stream, shared](*args)
        else:
            dispatcher[grid, block, stream, shared](*args)
        if watched:
            monitor.after(watched)

    return launch
