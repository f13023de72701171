"""Which streams a tuned launch must wait for, from where each buffer was last used.

Modelled on cubecl-runtime's multi-stream layer. Each stream's launches fall into *epochs*: an
epoch ends when the stream's event is recorded (for another stream to wait for it), and the
next launch opens the next one. Each buffer (an allocation: a torch storage, a CuPy memory
block, a numba allocation) remembers the ``(stream, epoch)`` entry of its last use. A launch on
stream B that uses a buffer last used in an epoch of stream A that B has not yet waited for
makes B wait for A on the device (an event recorded on A, ``cuStreamWaitEvent`` on B); the host
never waits.

Inside a CUDA graph capture (torch.cuda.graph, CuPy's, cuda.core's graph builder), nothing is
recorded or waited for where the launch's stream is being captured, or the producer is while its
event would be recorded now (an event recorded before waits for nothing on its stream): captured
work runs only when the graph is replayed, ordered by the capture itself and by whoever replays
it, and an event cannot be waited for across a capture's edge. A use whose wait was skipped so
is not its buffer's last use: later uncaptured launches still wait for the work that runs. Only
a launch that needs an event asks whether a stream is being captured (``cuStreamIsCapturing``).

A launch whose buffers were all last used in its stream's open epoch changes nothing: on the
streams it may (the order's ``quick``), ``quick_use`` checks that without a lock and calls
``use`` only when the check fails.

The order is the C extension's ``Order`` (``numbatune/_order.c``, which documents its methods);
``tests/order_reference.py`` takes the same steps in Python, as the tests' oracle.
:mod:`numbatune.streams.monitor` keeps the rest.
"""

from __future__ import annotations

from typing import Any

from numbatune import _native

#: How many buffers an order remembers before it forgets them all (a barrier).
LIMIT = 1 << 16


def new_order(events: Any = None, limit: int = LIMIT) -> Any:
    """The C extension's ``Order`` over ``events``, forgetting its buffers past ``limit``."""
    return _native.Order(events, limit)
