"""The tune cache of one tuned kernel on one kind of device: winners in memory, reports on disk.

The cache is passive: it answers and keeps, and never tunes; the resolver
(:mod:`numbatune.resolver`) walks it. Memory holds the winner table, the one table the hot
path reads (key -> :class:`Winner`: :meth:`TuneCache.get`, :meth:`TuneCache.publish`), and,
while a key is being found, the :class:`Claim` on it that other threads wait on (cubecl's
``Pending``). On disk (:meth:`TuneCache.load`, :meth:`TuneCache.store`) a stored entry counts
only if its checksum matches the kernel's (entries are stored under their key and checksum),
else the key is tuned again. The disk cache lives in ``<cache_dir>/<device>/<function>/``
(:mod:`numbatune.cache.disk` says what happens when it is read-only, corrupt or full); a
damaged entry is discarded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from numbatune import keys
from numbatune.cache import entry as entries
from numbatune.cache import ranks
from numbatune.cache.disk import Folder
from numbatune.cache.journal import DiskJournal
from numbatune.config import Timing
from numbatune.devices import current_kind
from numbatune.errors import TuningError
from numbatune.forking import renew_in_child
from numbatune.identity import folder_name, function_folder
from numbatune.tuning.checks import Check
from numbatune.tuning.job import Journal, NoJournal
from numbatune.tuning.results import Source, TuneReport
from numbatune.values import canonical_key, key_text
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")


def stored_anywhere(cache_dir: Path, function_id: str) -> bool:
    """Whether some device's folder under ``cache_dir`` has one of the function's entries."""
    try:
        devices = [folder for folder in cache_dir.iterdir() if folder.is_dir()]
    except OSError:  # no cache yet, or none readable
        return False
    return any(function_folder(device, function_id).is_dir() for device in devices)


@dataclass(frozen=True)
class Winner:
    """A key's answer, as the hot path reads it (``params``: what the launch function takes)."""

    index: int
    variant: Variant
    params: dict[str, Any]
    report: TuneReport


class WinnerTable(dict[Hashable, Winner]):
    """The winner table: canonical key -> winner, and how many winners were published into it
    (:meth:`TuneCache.publish`, its only writer, counts each after storing it). A fast path
    keeps the winner of its last key for as long as that count stays the same."""

    __slots__ = ("published",)

    def __init__(self) -> None:
        super().__init__()
        self.published = 0


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Winner | None = None
        self.error: BaseException | None = None


@dataclass(frozen=True)
class Claim:
    """The claim on finding one key's winner, taken once per key however many threads ask:
    the thread that ``holds`` it finds the answer and publishes it (or abandons the claim);
    the others :meth:`wait` for that answer."""

    #: The key, canonical.
    key: Hashable
    held: bool
    _pending: _Pending

    def wait(self) -> Winner:
        """The winner the holder published; a :class:`TuningError` if it failed."""
        self._pending.done.wait()
        if self._pending.error is not None:
            raise TuningError(str(self._pending.error)) from self._pending.error
        assert self._pending.answer is not None
        return self._pending.answer


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
        self._launch_params, self._directory = launch_params, directory
        self._checksum_of = checksum
        self._checksum: str | None = None
        self._disk: Folder | None = None
        #: The winner table: canonical key -> winner.
        self.winners = WinnerTable()
        self._pending: dict[Hashable, _Pending] = {}
        self._lock = threading.Lock()
        renew_in_child(self)

    def after_fork_in_child(self) -> None:
        """In a forked child: forget the keys other threads of the parent were tuning (they
        will never finish here), and the locks they may have held."""
        self._pending = {}
        self._lock = threading.Lock()

    @property
    def checksum(self) -> str:
        """The kernel's checksum, computed on first use."""
        if self._checksum is None:
            self._checksum = self._checksum_of()
        return self._checksum

    def winner_of(self, report: TuneReport) -> Winner:
        """The winner ``report`` names."""
        variant = report.winner
        return Winner(report.best_index, variant, self._launch_params[variant], report)

    def get(self, key: Hashable) -> Winner | None:
        """The winner the table holds for ``key`` (looked up as given first: a call's key is
        most often canonical already), or None; a TypeError for an unhashable key."""
        return self.winners.get(key) or self.winners.get(canonical_key(key))

    def claim(self, key: Hashable, force: bool = False) -> Winner | Claim:
        """The winner for ``key`` (canonical) where the table holds one (unless ``force``: it
        then serves other calls until a new one is published), else the claim on finding it:
        held by this thread, or by one that finds it already."""
        with self._lock:
            known = self.winners.get(key)
            if known is not None and not force:
                return known
            pending = self._pending.get(key)
            held = pending is None
            if held:
                pending = self._pending[key] = _Pending()
        assert pending is not None
        return Claim(key, held, pending)

    def publish(self, claim: Claim, winner: Winner) -> None:
        """Put ``winner`` in the table under the held ``claim``'s key; its waiters take it."""
        with self._lock:
            self.winners[claim.key] = winner
            self.winners.published += 1  # (after the store: see WinnerTable)
            del self._pending[claim.key]
        claim._pending.answer = winner
        claim._pending.done.set()

    def abandon(self, claim: Claim, error: BaseException) -> None:
        """Release the held ``claim`` without a winner: the threads waiting on it raise
        ``error``; the known winner, if any, stays."""
        with self._lock:
            del self._pending[claim.key]
        claim._pending.error = error
        claim._pending.done.set()

    # -- disk -------------------------------------------------------------------------------

    def exclusive(self, key: Hashable, timeout_s: float) -> contextlib.AbstractContextManager:
        """The lock of ``key`` among processes that share this cache directory, taken now (to
        be held in a ``with``), so that they tune it once; past ``timeout_s`` (the
        ``lock_timeout_s`` setting), or where the lock cannot be taken, none."""
        if self._directory is None:
            return contextlib.nullcontext()
        digest = hashlib.sha256(key_text(key).encode()).hexdigest()[:16]
        path = self._directory / "locks" / f"{folder_name(self.function_id)}-{digest}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return filelock.FileLock(str(path) + ".lock", timeout=timeout_s).acquire()
        except filelock.Timeout:
            logger.warning(
                "numbatune: %s: another process has tuned %s for %g s; tuning it here too",
                self.function_id, key_text(key), timeout_s,
            )  # fmt: skip
        except OSError as error:  # a read-only cache: no lock to take
            logger.debug("numbatune: %s: no lock for %s (%s)", self.function_id, key, error)
        return contextlib.nullcontext()

    def offer(self, key: Hashable, local: TuneReport | None) -> ranks.Offer:
        """What this rank brings to the tuning of ``key`` by the job's ranks
        (:mod:`numbatune.cache.ranks`): its stored report ``local``, if any."""
        entry = None if local is None else self.encoded(key, local)
        return ranks.Offer(key_text(key), current_kind().partition, self.checksum, entry)

    def encoded(self, key: Hashable, report: TuneReport) -> dict[str, Any]:
        """``report`` as the entry stored for ``key``."""
        return entries.encode(report, self.checksum, self.function_id, key_text(key))

    @property
    def order(self) -> dict[str, int]:
        """Each variant label's place among the kernel's variants."""
        return {variant.label: index for index, variant in enumerate(self._variants)}

    def adopt(
        self, key: Hashable, agreed: dict[str, Any], offer: ranks.Offer, local: TuneReport | None
    ) -> TuneReport:
        """The report of the entry the ranks ``agreed`` on for ``key``: ``local`` where it is
        this rank's own ``offer``, else the entry read (its source: ranks)."""
        if local is not None and agreed == offer.entry:
            return local
        report = entries.decode(agreed, key, self._by_label, self.checksum)
        assert report is not None  # the same checksum
        return dataclasses.replace(report, source=Source.RANKS)

    def winners_near(self, key: Hashable, count: int = 4) -> list[Variant]:
        """The winners of up to ``count`` other keys of this kernel, in memory or on disk
        (this checksum's), nearest key first (:func:`numbatune.keys.distance`)."""
        text = key_text(key)
        found = {key_text(other): winner.variant for other, winner in list(self.winners.items())}
        disk = self._open()
        for stored in disk.stored_keys() if disk is not None else ():
            other = entries.key_of(stored)
            if other in found or stored != entries.storage_key(other, self.checksum):
                continue
            try:
                entry = entries.check(json.loads(disk.get(stored)))  # type: ignore[union-attr]
            except (ValueError, TypeError):
                continue  # damaged: its own lookup discards it
            best = self._by_label.get(entry["results"][entry["best_index"]]["variant"])
            if best is not None:
                found[other] = best
        found.pop(text, None)
        nearest = sorted(found, key=lambda other: keys.distance(text, other))
        return list(dict.fromkeys(found[other] for other in nearest))[:count]

    def journal(self, key: Hashable, fresh: bool, check: Check | None, timing: Timing) -> Journal:
        """Where ``key``'s tuning keeps its outcomes as they are measured (nothing without a
        cache directory); ``fresh``: first forget an unfinished one's; ``check`` and
        ``timing``: how the tuning checks and times its variants (:class:`DiskJournal`)."""
        disk = self._open()
        if disk is None:
            return NoJournal()
        text = key_text(canonical_key(key))
        journal = DiskJournal(disk, text, self.checksum, self._by_label, check, timing)
        if fresh:
            journal.discard()
        return journal

    def _open(self) -> Folder | None:
        if self._disk is None and self._directory is not None:
            self._disk = Folder(
                function_folder(self._directory, self.function_id), self.function_id
            )
        return self._disk

    def load(self, key: Hashable) -> TuneReport | None:
        """The report stored on disk for ``key`` under this checksum, or None (none, stale, or
        damaged: then discarded)."""
        disk = self._open()
        if disk is None:
            return None
        text = key_text(key)
        stored = disk.get(entries.storage_key(text, self.checksum))
        if stored is None:
            stored_keys = (k for k in disk.stored_keys() if not entries.is_journal(k))
            if any(entries.key_of(k) == text for k in stored_keys):
                logger.info("numbatune: %s: stored result for %s is stale; tuning again",
                            self.function_id, text)  # fmt: skip
            return None
        try:
            return entries.decode(json.loads(stored), key, self._by_label, self.checksum)
        except (ValueError, TypeError) as error:  # DamagedEntry, and JSON that is not JSON
            logger.warning(
                "numbatune: %s: discarded a damaged tune cache entry for %s (%s); tuning again",
                self.function_id, text, error,
            )  # fmt: skip
            disk.delete(entries.storage_key(text, self.checksum))
            return None

    def store(self, key: Hashable, report: TuneReport) -> None:
        """Keep ``report`` on disk as ``key``'s entry, in place of its journal. Entries of the key
        for other checksums stay: another tuned kernel of the function, or another version still
        in use, may read them."""
        disk = self._open()
        if disk is None:
            return
        text = key_text(key)
        entry = self.encoded(key, report)
        if disk.set(entries.storage_key(text, self.checksum), json.dumps(entry)):
            disk.delete(entries.journal_key(text, self.checksum))
