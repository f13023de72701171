"""Launching through the kernel compiler's own launch (numba's
``kernel[grid, block, stream, shared](*args)``: :mod:`numbatune.compilers`).

For what the fast path does not take (the simulator, argument kinds it has no plan for, debug
kernels), for tuning's launches on private clones and for ``run_variant``. numba orders torch
and CuPy arrays after their current stream by synchronising the host, as
``__cuda_array_interface__`` asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numbatune.arrays import is_array
from numbatune.compilers import compiler_for
from numbatune.streams.handles import numba_stream, raw_stream
from numbatune.streams.monitor import monitor

#: ``launch(args, (grid, block[, shared_bytes]), stream)``; ``stream`` None or any stream.
Launch = Callable[[tuple[Any, ...], tuple[Any, ...], Any], None]


def numba_launch(dispatcher: Any, name: str | None = None) -> Launch:
    """A launch of ``dispatcher`` through numba.

    With a ``name`` the launches are a tuned kernel's and the stream monitor sees them (for
    ordering across streams and profiles); without, they are tuning's, on private clones.
    """
    compiler = compiler_for(dispatcher)

    def launch(args: tuple[Any, ...], config: tuple[Any, ...], stream: Any) -> None:
        stream = numba_stream(stream, args)
        watched = None
        if name is not None:
            handle = raw_stream(stream)
            if handle != monitor.stream:
                arrays = tuple(a for a in args if is_array(a))
                watched = monitor.watch(handle, arrays, name, stream)
        compiler.launch(dispatcher, args, config, stream)
        if watched:
            monitor.after(watched)

    return launch
