"""What the suite's sections share: changing settings for a while, the careful "true" measurement
of every variant, the time spent inside numbatune's stopwatch, and the machine's description."""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from numba import cuda

import numbatune
from numbatune.arrays import SIMULATOR
from numbatune.tuning import bench as stopwatch
from numbatune.tuning.results import Timed

ROOT = Path(__file__).resolve().parents[1]

#: The careful measurement: five times the tuner's budget, at least 50 rounds of every variant,
#: no early stop, a longer warm-up. Same stopwatch rules (events, interleaving, L2 flush).
TRUE_SETTINGS = {
    "budget_s": 0.5,
    "min_runs": 50,
    "max_runs": 20000,
    "warmup_s": 0.1,
    "early_stop_ratio": math.inf,
}


@contextlib.contextmanager
def configured(**values: Any) -> Iterator[None]:
    """numbatune's settings changed to ``values`` inside the block, restored after it."""
    before = {name: getattr(numbatune.settings, name) for name in values}
    numbatune.configure(**values)
    try:
        yield
    finally:
        numbatune.configure(**before)


def true_times(
    tuned: numbatune.TunedKernel, args: tuple[Any, ...], only: Collection[int] | None = None
) -> list[float | None]:
    """Each variant's median time on ``args`` by the careful measurement (None: it failed, or
    it is not among the indices ``only``, where given)."""
    runs = {}
    for index, variant in enumerate(tuned.variants):
        if only is not None and index not in only:
            continue
        try:
            tuned.run_variant(variant, *args)  # compiles it
        except Exception:
            continue
        runs[index] = functools.partial(tuned.run_variant, variant, *args)
    with configured(**TRUE_SETTINGS):
        timings = stopwatch.measure(runs, 0, inputs=args)
    return [
        timing.median_s if isinstance(timing := timings.get(i), Timed) else None
        for i in range(len(tuned.variants))
    ]


def time_callables(calls: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Median time of each call (a function queueing work on the default stream), carefully."""
    with configured(**TRUE_SETTINGS):
        timings = stopwatch.measure(calls, 0)
    result = {}
    for name, timing in timings.items():
        if not isinstance(timing, Timed):
            raise RuntimeError(f"bench: timing {name} failed: {timing!r}") from timing
        result[name] = timing.median_s
    return result


class StopwatchClock:
    """Accumulates the wall time spent inside ``numbatune.tuning.bench.measure`` while active."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def active(self) -> Iterator[StopwatchClock]:
        original = stopwatch.measure

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        stopwatch.measure = timed
        try:
            yield self
        finally:
            stopwatch.measure = original


def run_module(
    module: str,
    arguments: list[str],
    environment: dict[str, str],
    timeout_s: float | None = None,
) -> Any:
    """Run ``python -m module *arguments`` in a fresh process from the repository root, with
    ``environment`` added to this one's; returns its last line of output, read as JSON.
    RuntimeError if it fails, subprocess.TimeoutExpired if it runs past ``timeout_s`` (it is
    stopped then, with the processes it started: its compile and trial workers)."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    with subprocess.Popen(
        [sys.executable, "-m", module, *arguments],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path, **environment},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, to stop with its workers
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    if process.returncode != 0:
        raise RuntimeError(f"bench: {module} {arguments} failed:\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def synchronize() -> None:
    """Wait for the device (nothing to wait for under the simulator)."""
    if not SIMULATOR:
        cuda.synchronize()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _driver_version() -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def environment() -> dict[str, Any]:
    """The device, driver, versions and date of this run."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "simulator": SIMULATOR,
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "versions": {
            "numbatune": numbatune.__version__,
            **{
                name: _version(name)
                for name in ("numba", "numba-cuda", "numpy", "torch", "triton", "cupy-cuda13x")
            },
        },
    }
    if not SIMULATOR:
        from numba.cuda.cudadrv import driver as cuda_driver

        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        info["device"] = {
            "name": name,
            "compute_capability": list(device.compute_capability),
            "multiprocessors": device.MULTIPROCESSOR_COUNT,
            "l2_bytes": device.L2_CACHE_SIZE,
        }
        info["driver"] = _driver_version()
        info["cuda_driver_api"] = list(cuda_driver.get_version())
    return info
