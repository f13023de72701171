"""A progress line on stderr for a tuning that takes over a second, on an interactive terminal
only (logs go through the ``numbatune`` logger as always).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_DELAY_S = 1.0


class Progress:
    """``step(done, what)`` as tuning goes; ``close()`` when it is over (clears the line)."""

    def __init__(self, name: str, total: int, out: TextIO | None = None) -> None:
        self._out = out or sys.stderr
        self._name = name
        self._total = total
        self._started = time.perf_counter()
        self._shown = False
        self._live = bool(getattr(self._out, "isatty", lambda: False)())

    def step(self, done: int, what: str) -> None:
        """``done`` of the variants have been through ``what`` (e.g. ``compiled``)."""
        if not self._live or time.perf_counter() - self._started < _DELAY_S:
            return
        width = 20
        filled = width * done // max(self._total, 1)
        bar = "#" * filled + "." * (width - filled)
        self._out.write(f"\rnumbatune: tuning {self._name} [{bar}] {done}/{self._total} {what}")
        self._out.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._out.write("\r\033[K")
            self._out.flush()
