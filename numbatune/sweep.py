"""Tuning recorded keys ahead of time, spread over GPUs: ``numbatune sweep``.

A sweep takes records (:mod:`numbatune.record`), imports each recorded kernel's module by its
name, finds the tuned kernel among the module's globals by its function id, rebuilds the
arguments and tunes the key. The records are split, kernel by kernel, into one share per worker
(:func:`split`): a worker process per GPU of this machine, or a Ray actor per GPU of the cluster
(:class:`Sweeper`). Each worker tunes into a cache directory of its own, in a temporary folder;
their results, and those of an earlier export at the output, are written into one export file
(checked before any tuning, written whole or not at all). Each key's result and outcome are kept
as it is tuned, so a worker that dies loses none (:func:`_kept_share`). docs/howto/sweeps.md
tells users what a sweep does.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import importlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numbatune import processes
from numbatune.arrays import SIMULATOR
from numbatune.cache import entry as entries
from numbatune.cache import files
from numbatune.cache.disk import write_problem
from numbatune.config import configure
from numbatune.dispatch import TunedKernel
from numbatune.errors import CacheFileError, RayNotInstalled
from numbatune.record import Record, Unreadable, rebuild_all
from numbatune.tuning.results import Source
from numbatune.values import TextEnum, key_text

#: Seconds one worker's share may take before the worker is stopped.
WORKER_LIMIT_S = 24 * 3600.0


class Engine(TextEnum):
    """What spread a sweep's records over workers."""

    LOCAL = "local"  # worker processes on this machine
    RAY = "ray"  # actors of a Ray cluster


class Status(TextEnum):
    """What a sweep did with one record."""

    TUNED = "tuned"
    #: Its key was stored already (an earlier record of the same worker tuned it).
    STORED = "stored"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class SweepOutcome:
    """One record's outcome: the winner's label, or why it failed or was skipped; ``key`` is
    the record's, or for a record that names none, the key tuned (where one was)."""

    function: str
    key: str | None
    status: Status
    detail: str


@dataclass(frozen=True)
class SweepResult:
    """What a sweep did: each record's outcome, and the export it wrote."""

    outcomes: tuple[SweepOutcome, ...]
    #: What the export file holds.
    written: files.Written
    workers: int
    engine: Engine
    seconds: float

    @property
    def complete(self) -> bool:
        """Whether every record was tuned (or found stored)."""
        return all(o.status in (Status.TUNED, Status.STORED) for o in self.outcomes)


def sweep(
    records: Sequence[Record],
    output: Path,
    modules: Sequence[str] = (),
    paths: Sequence[str] = (),
    ray_address: str | None = None,
    use_ray: bool = False,
    workers: int | None = None,
    unreadable: Sequence[Unreadable] = (),
    kernels: bool = True,
) -> SweepResult:
    """Tune every record's key and write one export file to ``output``, with the winners'
    compiled kernels (every kernel the workers compiled for the tuned functions, and those of
    the earlier export) unless ``kernels`` is False.

    ``modules`` are imported in each worker before the records' own; ``paths`` are put first on
    its ``sys.path``. With ``use_ray`` (or a ``ray_address``: ``auto`` or ``HOST:PORT``) the
    records are spread over Ray actors, one per GPU of the cluster (at most ``workers``;
    ``workers`` actors on CPUs where it has none); without, over one worker process per GPU of
    this machine (at most ``workers``; ``workers`` of them under the simulator, 1 by
    default). ``unreadable``: the record's lines that are not records, one outcome each.

    Raises, before tuning anything, :class:`~numbatune.errors.CacheFileError` where ``output``
    cannot be written (or is a file that is not an export; also where writing it fails), and
    :class:`~numbatune.errors.RayNotInstalled` where Ray is asked for and not installed.
    """
    started = time.perf_counter()
    found = _earlier(Path(output))
    earlier = found.items
    paths = [str(Path(p).resolve()) for p in paths] or [os.getcwd()]
    if use_ray or ray_address is not None:
        engine = Engine.RAY
        shares = _on_ray(records, modules, paths, ray_address, workers, earlier)
    else:
        engine, shares = Engine.LOCAL, _on_this_machine(records, modules, paths, workers, earlier)
    outcomes = (
        *(SweepOutcome(f"line {u.line}", None, Status.SKIPPED, u.why) for u in unreadable),
        *(o for share in shares for o in share["outcomes"]),
    )
    items = [*earlier, *(item for share in shares for item in share["items"])]
    compiled = [*found.kernels, *(k for share in shares for k in share["kernels"])]
    written = files.write_export(output, items, compiled if kernels else ())
    return SweepResult(outcomes, written, len(shares), engine, time.perf_counter() - started)


def _earlier(output: Path) -> files.ExportFile:
    """The earlier export at ``output`` (empty if none), having checked it can be written."""
    if output.is_dir():
        raise CacheFileError(f"{output} is a folder: give the name of the export file to write")
    if not output.parent.is_dir():
        raise CacheFileError(f"the folder {output.parent} does not exist: make it, or give an "
                             "export file in another folder")  # fmt: skip
    problem = write_problem(output.parent)
    if problem is not None:
        raise CacheFileError(f"cannot write {output}: {problem}")
    if not output.exists():
        return files.ExportFile([], [])
    try:
        return files.read_export(output)
    except CacheFileError as error:
        raise CacheFileError(f"{error}: the sweep would replace it; give another file") from None


def split(records: Sequence[Record], count: int) -> list[list[Record]]:
    """``records`` in ``count`` shares of near-equal size, each kernel's keys together where
    the sizes allow (a worker compiles a kernel's variants once for all its keys)."""
    ordered = sorted(records, key=lambda r: (r.function, r.key or ""))
    count = max(1, min(count, len(ordered)))
    size, extra = divmod(len(ordered), count)  # the first ``extra`` shares take one more
    starts = [index * size + min(index, extra) for index in range(count + 1)]
    return [ordered[start:end] for start, end in itertools.pairwise(starts)]


def _on_this_machine(
    records: Sequence[Record],
    modules: Sequence[str],
    paths: Sequence[str],
    workers: int | None,
    earlier: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    gpus = _visible_gpus()
    shares = split(records, _share_count(workers, len(gpus)))
    with tempfile.TemporaryDirectory(prefix="numbatune-sweep-") as folder:

        def run(index: int) -> dict[str, Any]:
            device = {"CUDA_VISIBLE_DEVICES": gpus[index % len(gpus)]} if gpus else {}
            pool = processes.WorkerPool(1, processes.environment(SIMULATOR, paths, **device))
            cache_dir = Path(folder) / f"worker-{index}"
            arguments = (shares[index], tuple(modules), tuple(paths), str(cache_dir), earlier)
            task = processes.Task(__name__, "tune_records", arguments)
            with contextlib.closing(pool):
                outcome = pool.run([task], WORKER_LIMIT_S)[0]
            if isinstance(outcome, processes.Done):
                return outcome.value
            return _kept_share(shares[index], cache_dir, earlier, f"its worker failed: {outcome}")

        with concurrent.futures.ThreadPoolExecutor(len(shares)) as threads:
            return list(threads.map(run, range(len(shares))))


def _results(cache_dir: Path) -> dict[str, Any]:
    """A worker's results: its cache directory's export items and their compiled kernels."""
    items = files.export_items(files.stored_entries(cache_dir))
    return {"items": items, "kernels": files.export_kernels(cache_dir, items)}


def _kept_share(
    share: Sequence[Record],
    cache_dir: Path,
    earlier: list[dict[str, Any]],
    why: str,
    done: int = 0,
) -> dict[str, Any]:
    """The share of a worker that failed (``why``) but for its first ``done`` records: the
    outcomes of those it finished after them as it noted them (:func:`_finished`), and the keys
    it had tuned as its ``cache_dir`` holds them (:func:`_results`); the others failed."""
    finished, kept = _finished(cache_dir)[done:], _results(cache_dir)
    before = {(item["function"], item["key"]) for item in earlier}
    winners = {
        (item["function"], item["key"]): item["entry"]["results"][item["entry"]["best_index"]]
        for item in kept["items"]
    }

    def outcome(record: Record) -> SweepOutcome:
        winner = winners.get((record.function, record.key))
        if winner is None:
            return SweepOutcome(record.function, record.key, Status.FAILED, why)
        status = Status.STORED if (record.function, record.key) in before else Status.TUNED
        return SweepOutcome(record.function, record.key, status, winner["variant"])

    outcomes = [*finished, *(outcome(record) for record in share[done + len(finished) :])]
    return {"outcomes": outcomes, **kept}


#: The file of a worker's cache directory that takes each record's outcome as it is tuned.
_FINISHED = "sweep-outcomes.jsonl"


def _tune_noted(record: Record, cache_dir: Path) -> SweepOutcome:
    """Tune ``record``'s key and append its outcome to the worker's file of outcomes: a worker
    that dies later is known to have finished it, whether or not the record names its key."""
    outcome = _tune_one(record)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / _FINISHED, "a") as file:
        file.write(json.dumps({**dataclasses.asdict(outcome), "status": outcome.status.value}))
        file.write("\n")
    return outcome


def _finished(cache_dir: Path) -> list[SweepOutcome]:
    """The outcomes a worker noted (:func:`_tune_noted`), in order, up to a line cut short."""
    try:
        lines = (cache_dir / _FINISHED).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            item = json.loads(line)
            found.append(SweepOutcome(**{**item, "status": Status(item["status"])}))
        except (ValueError, KeyError, TypeError):
            break
    return found


def _share_count(workers: int | None, gpus: int) -> int:
    """How many workers tune at once: one per GPU at most (two on one GPU would time each
    other's kernels, and a Ray actor waiting for a GPU that no other actor frees waits for
    ever); ``workers`` (default 1) where there are no GPUs."""
    return min(workers or gpus, gpus) if gpus else workers or 1


def _visible_gpus() -> list[str]:
    """The GPUs this machine shows this process, as ``CUDA_VISIBLE_DEVICES`` names them."""
    if SIMULATOR:
        return []
    from numba import cuda

    named = [n for n in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if n.strip()]
    count = len(cuda.gpus)
    return named[:count] if named else [str(i) for i in range(count)]


def _on_ray(
    records: Sequence[Record],
    modules: Sequence[str],
    paths: Sequence[str],
    address: str | None,
    workers: int | None,
    earlier: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise RayNotInstalled(
            "numbatune sweep --ray needs Ray, which is not installed: pip install 'numbatune[ray]'"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        shares = split(records, _share_count(workers, gpus))
        actor = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1)(Sweeper)
        with tempfile.TemporaryDirectory(prefix="numbatune-sweep-") as folder:
            cache_dirs = [str(Path(folder) / f"worker-{index}") for index in range(len(shares))]
            actors = [actor.remote(tuple(modules), tuple(paths), earlier, d) for d in cache_dirs]
            deadline = time.perf_counter() + WORKER_LIMIT_S
            return _gathered(ray, actors, shares, deadline, cache_dirs, earlier)
    finally:
        if started_here:
            ray.shutdown()


def _gathered(
    ray: Any,
    actors: Sequence[Any],
    shares: Sequence[Sequence[Record]],
    deadline: float,
    cache_dirs: Sequence[str],
    earlier: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Each Ray actor's results for its share, record by record (:meth:`Sweeper.tune`), side
    by side; an actor gets its next record once its last's results are here (Ray loses the
    reply of a call whose actor exits before sending it). From its first failed call (it died,
    raised or ran past ``deadline``: stopped), its records are :func:`_kept_share`'s."""
    gathered: list[dict[str, list[Any]]] = [
        {"outcomes": [], "items": [], "kernels": []} for _ in actors
    ]
    done = [0] * len(actors)  # each actor's records whose results are here
    calls: dict[Any, int] = {}  # the call in flight, by actor

    def hand_next(index: int) -> None:
        if done[index] < len(shares[index]):
            calls[actors[index].tune.remote(shares[index][done[index]])] = index
            return
        with contextlib.suppress(Exception):  # (a folder of its own is left behind, no more)
            ray.get(actors[index].close.remote(), timeout=60)

    def stop(index: int, error: BaseException | str) -> None:
        actor = actors[index]
        with contextlib.suppress(Exception):  # (one that lives removes a folder of its own)
            ray.get(actor.close.remote(), timeout=10)
        ray.kill(actor)
        why = f"its Ray actor failed: {error}"
        kept = _kept_share(shares[index], Path(cache_dirs[index]), earlier, why, done[index])
        for part, values in kept.items():
            gathered[index][part] += values

    for index in range(len(actors)):
        hand_next(index)
    while calls:
        ready, _ = ray.wait(list(calls), num_returns=1,
                            timeout=max(0.0, deadline - time.perf_counter()))  # fmt: skip
        if not ready:
            for index in list(calls.values()):
                stop(index, f"it ran past {WORKER_LIMIT_S:.0f} s")
            break
        index = calls.pop(ready[0])
        try:
            results = ray.get(ready[0])
        except Exception as error:  # an actor that died or raised
            stop(index, error)
            continue
        for part, values in results.items():
            gathered[index][part] += values
        done[index] += 1
        hand_next(index)
    return gathered


class Sweeper:
    """A Ray actor that tunes records one by one (:meth:`tune`) into a cache directory of its
    own: ``cache_dir``, in the sweep's temporary folder, where that is on the actor's machine,
    else a temporary folder of the actor's, removed by :meth:`close` (an actor that dies
    leaves it behind)."""

    def __init__(
        self,
        modules: Sequence[str],
        paths: Sequence[str],
        earlier: list[dict[str, Any]],
        cache_dir: str,
    ) -> None:
        here = Path(cache_dir).parent.is_dir()
        self._own = None if here else Path(tempfile.mkdtemp(prefix="numbatune-sweep-"))
        self._folder = self._own or Path(cache_dir)
        try:
            _prepare(modules, paths, str(self._folder), earlier)
        except BaseException:
            self.close()
            raise
        #: The entries handed back (or in the earlier export), by what tells them apart.
        self._sent = {files.item_identity(item): item["entry"] for item in earlier}
        #: The storage keys read from the folder so far.
        self._read: set[str] = set()
        self._sent_kernels: set[tuple[str, str, str]] = set()

    def tune(self, record: Record) -> dict[str, Any]:
        """Tune ``record``'s key: its :class:`SweepOutcome`, and the export items and compiled
        kernels of its function not handed back before (an entry tuned again, again). Only the
        entries stored since the last call, or under the key tuned, are read."""
        outcome = _tune_noted(record, self._folder)

        def wanted(stored_under: str) -> bool:
            return stored_under not in self._read or entries.key_of(stored_under) == outcome.key

        found = files.entries_of(self._folder, record.function, wanted)
        self._read.update(stored_under for stored_under, _ in found)
        items = [
            item
            for item in files.export_items([entry for _, entry in found])
            if self._sent.get(files.item_identity(item)) != item["entry"]
        ]
        self._sent.update((files.item_identity(item), item["entry"]) for item in items)
        kernels = files.export_kernels(self._folder, items, known=self._sent_kernels)
        self._sent_kernels.update((k.arch, k.function, k.key) for k in kernels)
        return {"outcomes": [outcome], "items": items, "kernels": kernels}

    def close(self) -> None:
        """Remove the actor's own temporary folder, if it made one."""
        if self._own is not None:
            shutil.rmtree(self._own, ignore_errors=True)


def _prepare(
    modules: Sequence[str], paths: Sequence[str], cache_dir: str, earlier: list[dict[str, Any]]
) -> None:
    """(In a worker) tune into ``cache_dir``, which first takes the ``earlier`` export items,
    with ``paths`` first on ``sys.path`` and ``modules`` imported."""
    sys.path[:0] = [p for p in paths if p not in sys.path]
    configure(cache_dir=Path(cache_dir))
    files.import_items(earlier, Path(cache_dir))
    for name in modules:
        importlib.import_module(name)


def tune_records(
    records: Sequence[Record],
    modules: Sequence[str],
    paths: Sequence[str],
    cache_dir: str,
    earlier: list[dict[str, Any]],
) -> dict[str, Any]:
    """(In a worker) tune each record's key into ``cache_dir``: each record's outcome, and the
    directory's results (:func:`_results`)."""
    _prepare(modules, paths, cache_dir, earlier)
    outcomes = [_tune_noted(record, Path(cache_dir)) for record in records]
    return {"outcomes": outcomes, **_results(Path(cache_dir))}


def _tune_one(record: Record) -> SweepOutcome:
    def outcome(status: Status, detail: str) -> SweepOutcome:
        return SweepOutcome(record.function, record.key, status, detail)

    if record.module == "__main__":
        return outcome(Status.SKIPPED, "its kernel is defined in a script run as __main__; "
                       "define it in a module to sweep it")  # fmt: skip
    try:
        module = importlib.import_module(record.module)
    except Exception as error:
        return outcome(Status.SKIPPED, f"cannot import {record.module}: {error}")
    kernels = [
        value
        for value in vars(module).values()
        if isinstance(value, TunedKernel) and value.function_id == record.function
    ]
    if not kernels:
        return outcome(Status.SKIPPED, f"no tuned kernel {record.function} among the globals "
                       f"of {record.module}")  # fmt: skip
    try:
        report = kernels[0].tune(*rebuild_all(record.arguments))
    except Exception as error:
        return outcome(Status.FAILED, f"{type(error).__name__}: {error}")
    found = key_text(report.key)
    if record.key is not None and found != record.key:
        return outcome(Status.FAILED, f"the rebuilt arguments give key {found}, the record "
                       f"says {record.key}")  # fmt: skip
    status = Status.TUNED if report.source is Source.BENCHMARK else Status.STORED
    return SweepOutcome(record.function, found, status, report.winner.label)
