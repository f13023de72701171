"""Screening: timing variants as they compile, to leave the clearly slower ones out early.

While a tuning's variants compile, in worker processes, those already compiled (and through
their trial run) are timed here, on a thread of their own: each batch of newcomers with the best
so far, by :func:`numbatune.tuning.bench.measure` for ``settings.early_stop_rounds`` rounds,
after which its early-stop rule drops the clearly slower (they keep that result, stopped early;
the measurement after compiling times only the others). docs/concepts/measuring.md says more.
A batch holds :data:`numbatune.tuning.bench.device_lock` while it is timed, so that trial runs
do not run between its kernels, and puts the arguments back before it lets go: whoever takes the
lock next (a trial worker copying them) finds them as the caller passed them.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Sequence
from typing import Any

from numbatune import devices
from numbatune.config import Snapshot, settings
from numbatune.streams.handles import synchronize
from numbatune.tuning import bench
from numbatune.tuning.job import Bound, Launcher
from numbatune.tuning.results import Timed
from numbatune.variants import Variant


class Screen:
    """Screening of one measurement's variants, on ``args`` (the tuning's clones, put back by
    ``restore``) on numba's ``stream``, while they compile, under the settings ``taken`` of the
    tuning (None: the settings now)."""

    def __init__(
        self, args: tuple[Any, ...], stream: Any, restore: bench.Run, taken: Snapshot | None = None
    ) -> None:
        self._args, self._stream, self._restore = args, stream, restore
        self._taken = taken or settings.snapshot()
        self._arrivals: queue.SimpleQueue[tuple[Variant, Launcher] | None] = queue.SimpleQueue()
        self._dropped: dict[Variant, Timed | Exception] = {}
        self._best: tuple[Variant, Launcher] | None = None
        self._error: BaseException | None = None
        self._abandoned = False
        self._thread = threading.Thread(
            target=self._serve, args=(devices.current_index(),), name="numbatune-screen",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def arrived(self, variant: Variant, launcher: Launcher) -> None:
        """``variant`` is compiled and may run (from any thread)."""
        self._arrivals.put((variant, launcher))

    def finish(self) -> dict[Variant, Timed | Exception]:
        """Screen what arrived and stop; those dropped, with their result or their run's error."""
        self._arrivals.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._dropped

    def abandon(self) -> None:
        """Stop once the batch being timed is done (the tuning failed or was interrupted)."""
        self._abandoned = True
        self._arrivals.put(None)
        self._thread.join()

    def screen(self, batch: Sequence[tuple[Variant, Launcher]]) -> None:
        """Time ``batch`` with the best so far, and drop those the early-stop rule stops."""
        launchers = dict(batch)
        if self._best is not None:
            launchers.setdefault(*self._best)
        runs = {v: Bound(launcher, self._args, self._stream) for v, launcher in launchers.items()}
        with bench.device_lock:
            rounds = self._taken.early_stop_rounds
            timings = bench.measure(
                runs, self._stream, self._args, self._restore, rounds=rounds, taken=self._taken
            )
            self._restore()
            synchronize(self._stream)
        kept: dict[Variant, float] = {}
        for variant, timing in timings.items():
            if isinstance(timing, Timed) and not timing.stopped_early:
                kept[variant] = timing.median_s
            else:
                self._dropped[variant] = timing
        if kept:
            best = min(kept, key=kept.__getitem__)
            self._best = (best, launchers[best])

    def _serve(self, device: int) -> None:
        from numba import cuda

        try:
            with cuda.gpus[device]:
                while True:
                    batch = [self._arrivals.get()]
                    with contextlib.suppress(queue.Empty):
                        while True:
                            batch.append(self._arrivals.get_nowait())
                    arrived = [item for item in batch if item is not None]
                    if arrived and not self._abandoned:
                        self.screen(arrived)
                    if len(arrived) < len(batch):
                        return
        except BaseException as error:  # raised in the tuning's thread by finish()
            self._error = error
