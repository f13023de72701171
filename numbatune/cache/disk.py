"""One folder of the disk cache (a function's tuning results, or its compiled kernels), and what
to do when the disk misbehaves.

A folder holds a diskcache database, opened in one :class:`Mode`: **writable**; **read-only**
(a cache shipped in a container image, a read-only mount, a folder owned by another user, a
full disk: its entries read through SQLite's read-only mode, :class:`_ReadOnly`); or **memory
only**, where there is no database to read and none can be made. A **corrupt** one
(SQLite says it is not a database, or malformed) is moved aside to ``<folder>.corrupt-<time>``
and started afresh. What cannot be written stays in this process's memory, said once per cache
directory (its results and its compiled kernels alike).

While a process runs, its database can be damaged under it or replaced by another process:
before each write the file is checked (:meth:`Folder._damage`); one replaced or removed is
opened again, a damaged one set aside. A write that fails warns once; the entries stored before
are still read. Errors are said in words (:func:`in_words`), not as a bare errno.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diskcache

logger = logging.getLogger("numbatune")

DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)
_CORRUPT = ("file is not a database", "malformed", "not a database")
_READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}
_FULL = {errno.ENOSPC, errno.EDQUOT}
_DATABASE = "cache.db"
_SQLITE_MAGIC = b"SQLite format 3\x00"


class Mode(enum.Enum):
    """How a cache folder could be opened."""

    WRITABLE = "writable"
    READ_ONLY = "read-only"
    MEMORY = "memory only"


@dataclass(frozen=True)
class Holds:
    """What a folder holds, as its messages name the store ("tune cache") and its entries
    ("results"), and how deep under the cache directory it lies (``<device>/<function>``: 2)."""

    store: str
    entries: str
    depth: int


RESULTS = Holds("tune cache", "results", 2)
KERNELS = Holds("kernel store", "compiled kernels", 3)  # kernels/sm_90/<function>

#: What stays in memory while the cache directory cannot be written: every store's entries.
_EVERY_STORE = f"{RESULTS.entries} and {KERNELS.entries}"


def _file_in_the_way(path: Path) -> Path | None:
    """The first part of ``path`` that is a file, not a folder, if one is."""
    for part in (*reversed(path.parents), path):
        if part.exists() and not part.is_dir():
            return part
    return None


def in_words(error: BaseException, path: Path | None = None) -> str:
    """A disk ``error`` (met at ``path`` where it names none) in one line: what it means ("is
    a file", "is read-only", "the disk is full", "is damaged"), the error in parentheses, and
    the remedy (``[Errno 20]`` alone says neither)."""
    number, where = getattr(error, "errno", None), getattr(error, "filename", None)
    text, near = str(error), where or path
    in_the_way = None if near is None else _file_in_the_way(Path(near))
    if number in (errno.ENOTDIR, errno.EEXIST) and in_the_way is not None:
        return (
            f"{in_the_way} is a file, not a folder ({text}): give a folder as the cache "
            "directory (NUMBATUNE_CACHE_DIR, or --cache-dir)"
        )
    if number in _FULL or "disk is full" in text:
        return f"the disk is full ({text}): free some space on it"
    if number in _READ_ONLY or "readonly" in text or "read-only" in text:
        place = f"{where} is" if where else "it is"
        return (
            f"{place} read-only ({text}): make it writable, or give a cache directory this "
            "process can write (NUMBATUNE_CACHE_DIR, or --cache-dir)"
        )
    if any(words in text for words in _CORRUPT):
        return f"it is damaged ({text})"
    return text


def write_problem(directory: Path) -> str | None:
    """Why nothing can be written under the cache directory ``directory``, in words with what
    to do (:func:`in_words`), or None where it can be (made, if it does not exist yet)."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return in_words(
            NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
        )
    if not writable(existing):
        return in_words(PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(existing)))
    try:
        if existing == directory:  # a write tells what permission bits do not (a mount's)
            probe = directory / f".numbatune-probe-{os.getpid()}"
            try:
                probe.write_bytes(b"\0" * 4096)
            finally:  # (also where it fails part-way)
                probe.unlink(missing_ok=True)
        space = os.statvfs(existing)
    except OSError as error:
        return in_words(error)
    free = space.f_bavail * space.f_frsize
    if free < 1 << 20:
        return in_words(OSError(errno.ENOSPC, f"{free} bytes free", str(existing)))
    return None


class _ReadOnly:
    """A diskcache database read through SQLite's read-only mode.

    Without its shared-memory file (``-shm``), in a folder that cannot take one, SQLite reads a
    WAL database only as an immutable file, leaving out its log (``-wal``): a database without
    a log is read so; one with a log (a cache copied while in use) is copied with it into a
    temporary folder, where SQLite applies the log, and read from memory.
    """

    def __init__(self, folder: Path) -> None:
        self._disk = diskcache.Disk(str(folder))
        self._lock = threading.Lock()
        database = folder / _DATABASE
        try:
            self._connection = self._connect(f"{database.resolve().as_uri()}?mode=ro")
        except sqlite3.OperationalError:
            self._connection = self._without_shared_memory(database)

    @classmethod
    def _without_shared_memory(cls, database: Path) -> sqlite3.Connection:
        """A connection to ``database``'s entries and its log's, without its ``-shm``."""
        log = database.with_name(f"{database.name}-wal")
        if not log.is_file() or log.stat().st_size == 0:
            return cls._connect(f"{database.resolve().as_uri()}?mode=ro&immutable=1")
        with tempfile.TemporaryDirectory(prefix="numbatune-") as temporary:
            copy = Path(temporary) / _DATABASE
            shutil.copyfile(database, copy)
            shutil.copyfile(log, copy.with_name(log.name))
            memory = sqlite3.connect(":memory:", check_same_thread=False)
            with contextlib.closing(sqlite3.connect(copy)) as logged:  # applies the log
                logged.backup(memory)
        return cls._checked(memory)

    @classmethod
    def _connect(cls, uri: str) -> sqlite3.Connection:
        return cls._checked(sqlite3.connect(uri, uri=True, check_same_thread=False))

    @staticmethod
    def _checked(connection: sqlite3.Connection) -> sqlite3.Connection:
        """``connection``, once it reads the entries' table (else closed, and the error)."""
        try:
            connection.execute("SELECT count(*) FROM Cache").fetchone()
        except sqlite3.Error:
            connection.close()
            raise
        return connection

    def _row(self, columns: str, key: str) -> Any:
        """The ``columns`` of the live entry under ``key``, or None."""
        with self._lock:
            return self._connection.execute(
                f"SELECT {columns} FROM Cache WHERE key = ? AND raw = 1 "
                "AND (expire_time IS NULL OR expire_time > ?)",
                (key, time.time()),
            ).fetchone()

    def get(self, key: str) -> Any:
        row = self._row("mode, filename, value", key)
        return None if row is None else self._disk.fetch(*row, read=False)

    def __contains__(self, key: str) -> bool:
        return self._row("1", key) is not None

    def iterkeys(self) -> Iterator[str]:
        with self._lock:
            rows = self._connection.execute("SELECT key, raw FROM Cache ORDER BY key").fetchall()
        yield from (self._disk.get(key, raw) for key, raw in rows)

    def close(self) -> None:
        self._connection.close()


#: A read-only descriptor of each database file this process checks, by (device, inode): never
#: closed, since closing any descriptor of a file drops the locks SQLite holds on it here.
_watching: dict[tuple[int, int], int] = {}


def _watched(database: Path, stat: os.stat_result) -> int:
    """The descriptor :data:`_watching` keeps for ``database``."""
    descriptor = _watching.get((stat.st_dev, stat.st_ino))
    if descriptor is None:  # (a file that replaced it since ``stat``: seen at the next check)
        descriptor = os.open(database, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        opened = os.fstat(descriptor)
        _watching[opened.st_dev, opened.st_ino] = descriptor
    return descriptor


def _whole(database: Path) -> bool:
    """Whether SQLite finds ``database`` whole (``PRAGMA quick_check``; a connection of this
    process's SQLite keeps the locks of its other connections)."""
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=60)
        ) as connection:
            return connection.execute("PRAGMA quick_check").fetchone() == ("ok",)
    except sqlite3.DatabaseError:
        return False


def writable(folder: Path) -> bool:
    """Whether this process may write in ``folder``."""
    return os.access(folder, os.W_OK)


def _aside_name(folder: Path) -> Path:
    """A free name beside ``folder`` for it, damaged: ``<folder>.corrupt-<time>``."""
    stem = f"{folder.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
    aside, number = folder.with_name(stem), 1
    while aside.exists():
        aside, number = folder.with_name(f"{stem}-{number}"), number + 1
    return aside


def _corrupt(error: BaseException) -> bool:
    return isinstance(error, sqlite3.DatabaseError) and any(t in str(error) for t in _CORRUPT)


#: The cache folders (and what about them) already said, so that each is said once.
_said: set[tuple[Path, str]] = set()


class Folder:
    """The entries of the diskcache database in ``folder``, opened as :class:`Mode` allows;
    ``name`` (its function) and ``holds`` are for messages."""

    def __init__(self, folder: Path, name: str, holds: Holds = RESULTS) -> None:
        self.folder, self._name, self._holds = folder, name, holds
        parents = folder.parents  # its cache directory: its stores are warned of its state once
        self._cache_dir = parents[holds.depth - 1] if len(parents) >= holds.depth else folder
        self.mode = Mode.MEMORY
        #: Why entries cannot be written here, in words (None while they can).
        self.problem: str | None = None
        self._cache: Any = None
        self._identity: tuple[int, int] | None = None
        self._writing = threading.RLock()
        self._open()

    # -- opening ------------------------------------------------------------------------------

    def _open(self) -> None:
        if self.folder.exists() and not writable(self.folder):
            self._open_read_only(PermissionError(errno.EACCES, "not writable by this process"))
            return
        try:
            self._cache = diskcache.Cache(str(self.folder))
        except DISK_ERRORS as error:
            if _corrupt(error):
                self._set_aside(f"is corrupt ({error})")
            else:
                self._open_read_only(error)
            return
        self._now_writable()

    def _now_writable(self) -> None:
        self.mode, self.problem = Mode.WRITABLE, None
        self._identity = self._identity_on_disk()

    def _identity_on_disk(self) -> tuple[int, int] | None:
        try:
            stat = (self.folder / _DATABASE).stat()
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def _open_read_only(self, error: BaseException) -> None:
        """Read what is there, writing nothing (``error``: why it cannot be written)."""
        self.mode, self._cache, self.problem = Mode.MEMORY, None, in_words(error, self.folder)
        if not (self.folder / _DATABASE).is_file():
            self._say_of_cache("open", f"cannot be used: {self.problem}")
            return
        try:
            self._cache = _ReadOnly(self.folder)
        except DISK_ERRORS as second:
            what = f"the {self._holds.store} at {self.folder}"
            self._say("open", f"{what} cannot be read ({in_words(second)}) nor written")
            return
        self.mode = Mode.READ_ONLY
        self._say_of_cache("open", f"cannot be written: {self.problem}; what it holds is used")

    def _set_aside(self, why: str) -> None:
        """Move the damaged folder aside and start a fresh one (``why``: what is wrong)."""
        self.close()
        self.mode, self._cache = Mode.MEMORY, None
        folder = self.folder
        what = f"the {self._holds.store} at {folder}"
        aside = _aside_name(folder)
        try:
            shutil.move(str(folder), str(aside))
        except DISK_ERRORS as second:
            self.problem = f"{what} {why} and could not be moved aside ({second})"
            self._say("open", self.problem)
            return
        try:
            self._cache = diskcache.Cache(str(folder))
        except DISK_ERRORS as second:
            self.problem = (
                f"{what} {why}; moved it to {aside}, but a fresh one could not be started "
                f"({in_words(second, folder)})"
            )
            self._say("open", self.problem)
            return
        self._now_writable()
        logger.warning(
            "numbatune: %s: %s %s; moved it to %s and started a fresh one",
            self._name, what, why, aside,
        )  # fmt: skip

    def _say(self, about: str, what: str) -> None:
        """Warn once per folder and ``about`` (a problem of this folder alone)."""
        self._warn_once((self.folder, about), what, self._holds.entries)

    def _say_of_cache(self, about: str, what: str) -> None:
        """Warn once per cache directory and ``about`` (a problem every store in it meets)."""
        text = f"the {RESULTS.store} at {self._cache_dir} {what}"
        self._warn_once((self._cache_dir, about), text, _EVERY_STORE)

    def _warn_once(self, told: tuple[Path, str], what: str, entries: str) -> None:
        if told not in _said:
            _said.add(told)
            logger.warning("numbatune: %s: %s: new %s stay in memory", self._name, what, entries)

    # -- while it is open ---------------------------------------------------------------------

    def _damage(self) -> str | None:
        """What is wrong with the database file opened, or None while it is whole; one another
        process replaced or removed is opened again. Its header is read through the descriptor
        :data:`_watching` keeps: closing another would drop SQLite's POSIX locks on it here, and
        another process closing the database would then delete the log this one writes to."""
        database = self.folder / _DATABASE
        try:
            stat = database.stat()
        except FileNotFoundError:
            stat = None
        except OSError as error:
            return in_words(error)
        if stat is None or (stat.st_dev, stat.st_ino) != self._identity:
            self.close()
            self._open()
            return None
        try:
            header = os.pread(_watched(database, stat), 100, 0)
        except OSError as error:
            return in_words(error)
        if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
            return f"it is not a database any more ({len(header)} bytes of a header)"
        page_size = int.from_bytes(header[16:18], "big")
        pages = int.from_bytes(header[28:32], "big")
        counted = pages and header[24:28] == header[92:96]
        expected = (65536 if page_size == 1 else page_size) * pages
        # (Shorter than its header says also while another process checkpoints its log: SQLite
        # writes the first page before those that grow the file. Its own check decides.)
        if counted and stat.st_size < expected and not _whole(database):
            return f"it was cut short ({stat.st_size} of {expected} bytes)"
        return None

    def _write(self, action: Callable[[Any], Any]) -> Any:
        """``action(cache)``, checking first that the file is whole; False where it cannot be
        done (said once)."""
        with self._writing:
            if self.mode is Mode.WRITABLE:
                damage = self._damage()
                if damage is not None:
                    self._set_aside(f"was damaged while in use ({damage})")
            if self.mode is not Mode.WRITABLE:
                return False
            try:
                return action(self._cache)
            except DISK_ERRORS as error:
                if not _corrupt(error):
                    self.problem = in_words(error, self.folder)
                    self._say_of_cache("write", f"cannot be written: {self.problem}")
                    return False
                self._set_aside(f"was damaged while in use ({error})")
            return self.mode is Mode.WRITABLE and action(self._cache)

    def _read(self, action: Callable[[Any], Any], otherwise: Any) -> Any:
        """``action(cache)``, or ``otherwise`` where nothing is open or readable (said once)."""
        cache = self._cache  # (another thread may set a damaged database aside meanwhile)
        if cache is None:
            return otherwise
        try:
            return action(cache)
        except DISK_ERRORS as error:
            self._say("read", f"cannot read the {self._holds.store} ({in_words(error)})")
            return otherwise

    def get(self, key: str) -> Any:
        """The value stored under ``key``, or None (also when the disk cannot be read)."""
        return self._read(lambda cache: cache.get(key), None)

    def holds(self, key: str) -> bool:
        """Whether a value is stored under ``key`` in the folder as it is now (a database that
        another process replaced or removed is opened again first); False where unreadable."""
        with self._writing:
            if self.mode is Mode.WRITABLE and self._identity_on_disk() != self._identity:
                self.close()
                self._open()
        return bool(self._read(lambda cache: key in cache, False))

    def stored_keys(self) -> list[str]:
        """Every key stored (none when the disk cannot be read)."""
        return self._read(lambda cache: list(cache.iterkeys()), [])

    def set(self, key: str, value: Any) -> bool:
        """Store ``value``; False (with one warning) where the folder cannot take it."""
        return bool(self._write(lambda cache: cache.set(key, value)))

    def add(self, key: str, value: Any) -> bool:
        """Store ``value`` unless ``key`` is there; whether it was stored."""
        return bool(self._write(lambda cache: cache.add(key, value)))

    def delete(self, key: str) -> None:
        """Forget ``key`` (nothing where the folder cannot be written)."""
        self._write(lambda cache: cache.delete(key))

    def close(self) -> None:
        """Close the database (the folder may be opened again)."""
        if self._cache is not None:
            try:
                self._cache.close()
            except DISK_ERRORS as error:  # a damaged database: nothing left to keep
                logger.debug("numbatune: %s: closing %s: %s", self._name, self.folder, error)


@dataclass
class Additions:
    """Entries added to folders one by one (:meth:`add`), each unless its key holds a value
    that is ``sound`` there (one that is not, damaged, is replaced)."""

    sound: Callable[[Any], bool]
    written: int = 0
    #: Entries whose key the folder held already (kept as they were).
    already_present: int = 0
    #: Entries that could not be written (a read-only or full cache), and why (in words).
    not_written: int = 0
    why_not_written: str | None = None

    def add(self, folder: Folder, key: str, value: Any) -> None:
        """Add ``value`` under ``key`` to ``folder`` as the class says, and count it."""
        stored = folder.get(key)
        if stored is not None and self.sound(stored):
            self.already_present += 1
            return
        store = folder.add if stored is None else folder.set
        if store(key, value):
            self.written += 1
        else:
            self.not_written += 1
            self.why_not_written = folder.problem or self.why_not_written
