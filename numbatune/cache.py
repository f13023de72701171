"""The tune cache: results per key in memory and on disk, one tuning job per key.

Memory holds finished reports and, while a key is being tuned, a pending entry that other
threads wait on (cubecl's ``Pending``). On a memory miss the disk is consulted: a stored entry
counts only if its checksum matches the current variants' checksum, else the key is tuned again
and the entry replaced. The disk cache lives in ``<cache_dir>/<device>/<function>/``; a
corrupted or unreadable one is set aside with a warning, never trusted.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import diskcache
import numpy as np

from numbatune.checks import Mismatch
from numbatune.tuner import TuneReport, TuningError, VariantResult
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")

FORMAT = 1  # version of the stored entries; entries of another format are tuned again

_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)


def canonical_key(key: Any) -> Any:
    """The key with NumPy scalars made Python numbers, so its text is stable across runs."""
    if isinstance(key, tuple | list):
        return tuple(canonical_key(part) for part in key)
    if isinstance(key, np.generic):
        return key.item()
    return key


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "_"


def function_folder(device_folder: Path, function_id: str) -> Path:
    """The folder, under a device's folder of the tune cache, that holds one function's entries."""
    return device_folder / _safe_name(function_id)


def device_partition() -> str:
    """The current device's name, compute capability and multiprocessor count, as a folder name."""
    from numba import cuda

    from numbatune.arrays import SIMULATOR

    if SIMULATOR:
        return "simulator"
    device = cuda.get_current_device()
    name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
    major, minor = device.compute_capability
    return _safe_name(f"{name}-sm{major}{minor}-{device.MULTIPROCESSOR_COUNT}sm")


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.report: TuneReport | None = None
        self.error: BaseException | None = None


class TuneCache:
    """Reports of one tuned function, keyed by tuning key."""

    def __init__(
        self,
        function_id: str,
        checksum: str,
        variants: Sequence[Variant],
        directory: Path | None,
    ) -> None:
        self.function_id = function_id
        self.checksum = checksum
        self._variants_by_label = {v.label: v for v in variants}
        self._directory = directory
        self._disk: diskcache.Cache | None = None
        self._memory: dict[Hashable, TuneReport | _Pending] = {}
        self._lock = threading.Lock()

    def lookup(
        self,
        key: Hashable,
        tune: Callable[[], TuneReport],
        force: bool = False,
        reuse: Callable[[TuneReport], TuneReport | None] | None = None,
    ) -> TuneReport:
        """The report for ``key``: from memory, else disk, else by calling ``tune`` (once).

        Threads asking for a key that another thread is tuning wait for its result. With
        ``force`` the key is tuned again even when a result is known. ``reuse`` turns a report
        read from disk into the answer, or None when it does not serve (tried too few variants
        for the level: numbatune.levels.reuse).
        """
        with self._lock:
            entry = self._memory.get(key)
            if isinstance(entry, TuneReport) and not force:
                return entry.with_source("memory")
            owner = not isinstance(entry, _Pending)
            if owner:
                entry = self._memory[key] = _Pending()
        assert isinstance(entry, _Pending)
        if not owner:
            entry.done.wait()
            if entry.error is not None:
                raise TuningError(str(entry.error)) from entry.error
            assert entry.report is not None
            return entry.report.with_source("memory")
        try:
            report = None if force else self._load(key)
            if report is not None and reuse is not None:
                report = reuse(report)
            if report is None:
                report = tune()
                if report.source == "benchmark":
                    self._store(key, report)
        except BaseException as error:
            with self._lock:
                del self._memory[key]
            entry.error = error
            entry.done.set()
            raise
        with self._lock:
            self._memory[key] = report
        entry.report = report
        entry.done.set()
        return report

    # -- disk -------------------------------------------------------------------------------

    def _open(self) -> diskcache.Cache | None:
        if self._disk is not None or self._directory is None:
            return self._disk
        path = function_folder(self._directory, self.function_id)
        try:
            self._disk = diskcache.Cache(str(path))
        except _DISK_ERRORS as error:
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            logger.warning(
                "numbatune: the tune cache at %s cannot be read (%s); moved it to %s and "
                "starting a fresh one",
                path,
                error,
                aside,
            )
            try:
                shutil.move(str(path), str(aside))
                self._disk = diskcache.Cache(str(path))
            except _DISK_ERRORS as second:
                logger.warning("numbatune: no disk cache for %s (%s)", self.function_id, second)
                self._directory = None
        return self._disk

    def _load(self, key: Hashable) -> TuneReport | None:
        disk = self._open()
        if disk is None:
            return None
        text_key = repr(canonical_key(key))
        try:
            stored = disk.get(text_key)
            if stored is None:
                return None
            entry = json.loads(stored)
            if entry.get("format") != FORMAT or entry.get("checksum") != self.checksum:
                logger.info(
                    "numbatune: %s: stored result for %s is stale; tuning again",
                    self.function_id,
                    text_key,
                )
                return None
            results = [
                VariantResult(
                    self._variants_by_label[r["variant"]],
                    r["median_s"],
                    r["spread_s"],
                    r["runs"],
                    r["error"],
                    Mismatch(**r["mismatch"]) if r.get("mismatch") else None,
                )
                for r in entry["results"]
            ]
            best = int(entry["best_index"])
            return TuneReport(key, best, "disk", results, bool(entry.get("checked")))
        except _DISK_ERRORS as error:
            logger.warning(
                "numbatune: %s: cannot read the tune cache (%s)", self.function_id, error
            )
        except (ValueError, KeyError, TypeError, IndexError) as error:
            logger.warning(
                "numbatune: %s: corrupted tune cache entry for %s (%s); tuning again",
                self.function_id,
                text_key,
                error,
            )
        return None

    def _store(self, key: Hashable, report: TuneReport) -> None:
        disk = self._open()
        if disk is None:
            return
        entry = {
            "format": FORMAT,
            "checksum": self.checksum,
            "function": self.function_id,
            "key": repr(canonical_key(key)),
            "best_index": report.best_index,
            "checked": report.checked,
            "results": [
                {
                    "variant": r.variant.label,
                    "params": {k: repr(v) for k, v in r.variant.params.items()},
                    "jit": {k: repr(v) for k, v in r.variant.jit.items()},
                    "median_s": r.median_s,
                    "spread_s": r.spread_s,
                    "runs": r.runs,
                    "error": r.error,
                    "mismatch": dataclasses.asdict(r.mismatch) if r.mismatch else None,
                }
                for r in report.results
            ],
        }
        try:
            disk.set(repr(canonical_key(key)), json.dumps(entry))
        except _DISK_ERRORS as error:
            logger.warning(
                "numbatune: %s: cannot write the tune cache (%s)", self.function_id, error
            )
