"""The tune cache of one tuned kernel on one kind of device: winners in memory, reports on disk.

Memory holds the winner table, the one table the hot path reads (key -> :class:`Winner`), and,
while a key is being tuned, a pending entry that other threads wait on (cubecl's ``Pending``).
On a memory miss the disk is consulted: a stored entry counts only if its checksum matches the
kernel's, else the key is tuned again and the entry replaced. The disk cache lives in
``<cache_dir>/<device>/<function>/``; a corrupted or unreadable one is set aside with a warning,
never trusted, and a damaged entry is discarded.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diskcache

from numbatune.cache import entry as entries
from numbatune.errors import TuningError
from numbatune.identity import folder_name
from numbatune.tuning.results import Source, TuneReport
from numbatune.values import canonical_key, key_text
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")

_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)


def function_folder(device_folder: Path, function_id: str) -> Path:
    """The folder, under a device's folder of the tune cache, that holds one function's entries."""
    return device_folder / folder_name(function_id)


@dataclass(frozen=True)
class Winner:
    """A key's answer, as the hot path reads it."""

    #: The winning variant and its index among the kernel's variants.
    index: int
    variant: Variant
    #: The parameters the launch function takes.
    params: dict[str, Any]
    #: The report the winner came from.
    report: TuneReport


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Winner | None = None
        self.error: BaseException | None = None


#: ``reuse(stored)``: a report read from disk as the answer, or None to tune again.
Reuse = Callable[[TuneReport], TuneReport | None]


class TuneCache:
    """Reports of one tuned kernel on one kind of device, keyed by tuning key."""

    def __init__(
        self,
        function_id: str,
        variants: Sequence[Variant],
        launch_params: Mapping[Variant, dict[str, Any]],
        directory: Path | None,
        checksum: Callable[[], str],
    ) -> None:
        self.function_id = function_id
        self._variants = tuple(variants)
        self._by_label = {v.label: v for v in variants}
        self._launch_params = launch_params
        self._directory = directory
        self._checksum_of = checksum
        self._checksum: str | None = None
        self._disk: diskcache.Cache | None = None
        #: The winner table: canonical key -> winner.
        self.winners: dict[Hashable, Winner] = {}
        self._pending: dict[Hashable, _Pending] = {}
        self._lock = threading.Lock()

    @property
    def checksum(self) -> str:
        """The kernel's checksum, computed on first use."""
        if self._checksum is None:
            self._checksum = self._checksum_of()
        return self._checksum

    def winner_of(self, report: TuneReport) -> Winner:
        """The winner ``report`` names."""
        variant = report.best_variant
        return Winner(report.best_index, variant, self._launch_params[variant], report)

    def lookup(
        self,
        key: Hashable,
        tune: Callable[[], TuneReport],
        force: bool = False,
        reuse: Reuse | None = None,
    ) -> tuple[Winner, TuneReport]:
        """The winner for ``key`` and the report it came from: from memory, else disk, else
        by calling ``tune`` (once, however many threads ask).

        With ``force`` the key is tuned again even when a result is known; the known winner
        serves other calls until the new one is ready, and stays if tuning fails. ``reuse``
        turns a report read from disk into the answer, or None when it does not serve.
        """
        key = canonical_key(key)
        with self._lock:
            known = self.winners.get(key)
            if known is not None and not force:
                return known, dataclasses.replace(known.report, source=Source.MEMORY)
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = _Pending()
        assert pending is not None
        if not owner:
            pending.done.wait()
            if pending.error is not None:
                raise TuningError(str(pending.error)) from pending.error
            assert pending.answer is not None
            return pending.answer, dataclasses.replace(pending.answer.report, source=Source.MEMORY)
        try:
            report = None if force else self._load(key)
            if report is not None and reuse is not None:
                report = reuse(report)
            if report is None:
                report = tune()
                if report.source is Source.BENCHMARK:
                    self._store(key, report)
            winner = self.winner_of(report)
        except BaseException as error:
            with self._lock:
                del self._pending[key]
            pending.error = error
            pending.done.set()
            raise
        with self._lock:
            self.winners[key] = winner
            del self._pending[key]
        pending.answer = winner
        pending.done.set()
        return winner, report

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
        text = key_text(key)
        try:
            stored = disk.get(text)
            if stored is None:
                return None
            report = entries.decode(json.loads(stored), key, self._by_label, self.checksum)
        except _DISK_ERRORS as error:
            logger.warning(
                "numbatune: %s: cannot read the tune cache (%s)", self.function_id, error
            )
            return None
        except (ValueError, TypeError) as error:  # DamagedEntry, and JSON that is not JSON
            logger.warning(
                "numbatune: %s: discarded a damaged tune cache entry for %s (%s); tuning again",
                self.function_id,
                text,
                error,
            )
            return None
        if report is None:
            logger.info(
                "numbatune: %s: stored result for %s is stale; tuning again", self.function_id, text
            )
        return report

    def _store(self, key: Hashable, report: TuneReport) -> None:
        disk = self._open()
        if disk is None:
            return
        text = key_text(key)
        entry = entries.encode(report, self.checksum, self.function_id, text)
        try:
            disk.set(text, json.dumps(entry))
        except _DISK_ERRORS as error:
            logger.warning(
                "numbatune: %s: cannot write the tune cache (%s)", self.function_id, error
            )
