"""Tuning in a background thread (``on_miss="background"``: the setting, or a kernel's option).

A call whose key has no stored result launches a variant chosen without measuring
(:mod:`numbatune.resolver`) and hands clones of its arguments, made on its stream, to a thread
that tunes the key on a stream of its own; its winner then replaces the served variant (a
tuning that fails leaves it, with a warning). Its times are noisier than a tuning's alone: the
program runs on the device meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from numbatune import devices
from numbatune.forking import ForkSafeLock, PerProcess

logger = logging.getLogger("numbatune")


#: The threads tuning in the background in this process, under ``_lock``; a forked child
#: starts with none (its parent's threads do not run in it) and a free lock.
_running: PerProcess[set[threading.Thread]] = PerProcess()
_lock = ForkSafeLock()


def start(kernel: Any, clones: tuple[Any, ...], name: str) -> None:
    """Tune ``kernel`` (a tuned kernel) for ``clones`` in a background thread."""
    device = devices.current_index()
    thread = threading.Thread(
        target=_tune, args=(kernel, clones, device, name), name=f"numbatune-{name}", daemon=True
    )
    with _lock:
        _running.get(set).add(thread)
    thread.start()


def _tune(kernel: Any, clones: tuple[Any, ...], device: int, name: str) -> None:
    from numba import cuda

    try:
        with cuda.gpus[device]:
            cuda.synchronize()  # the clones' copies, queued on the caller's stream
            kernel.tune(*clones, force=True, stream=cuda.stream())
    except Exception as error:
        logger.warning(
            "numbatune: %s: tuning in the background failed (%s: %s); the variant served stays",
            name,
            type(error).__name__,
            error,
        )
    finally:
        with _lock:
            _running.get(set).discard(threading.current_thread())


def wait_for_background_tuning(timeout_s: float | None = None) -> bool:
    """Wait for the tunings started in the background (``on_miss="background"``) to end.

    Parameters
    ----------
    timeout_s
        The most seconds to wait, or None to wait until they end.

    Returns
    -------
    bool
        True if they all ended, False if ``timeout_s`` passed first.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        with _lock:
            running = list(_running.get(set))
        if not running:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        running[0].join(left)
