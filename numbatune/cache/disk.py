"""One function's folder of the tune cache on disk, and what to do when the disk misbehaves.

A folder holds a diskcache database. Opening it can meet four situations, and each is named
for what it is:

- **writable**: read and write entries;
- **read-only** (a cache shipped with a package, or owned by another user): read its entries,
  write none; results tuned here stay in this process's memory;
- **corrupt** (SQLite says the file is not a database, or is malformed): moved aside to
  ``<folder>.corrupt-<time>`` and started afresh; the warning says where it went, or that it
  could not be moved and results stay in memory;
- **unavailable** (disk full, I/O errors, anything else): results stay in memory, with one
  warning; nothing is moved or deleted.

A write that fails because the disk is full or read-only warns once and leaves the entry in
memory; nothing else is lost.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache

logger = logging.getLogger("numbatune")

_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)
_CORRUPT = ("file is not a database", "malformed", "not a database")


class Mode(enum.Enum):
    """How a cache folder could be opened."""

    WRITABLE = "writable"
    READ_ONLY = "read-only"
    MEMORY = "memory only"


class _ReadOnly:
    """A diskcache database read through SQLite's read-only mode (small text values only,
    which is what numbatune stores)."""

    def __init__(self, folder: Path) -> None:
        self._connection = sqlite3.connect(f"file:{folder / 'cache.db'}?mode=ro", uri=True)
        self._connection.execute("SELECT count(*) FROM Cache").fetchone()

    def get(self, key: str) -> Any:
        row = self._connection.execute(
            "SELECT value FROM Cache WHERE key = ? AND raw = 1", (key,)
        ).fetchone()
        return None if row is None else row[0]

    def iterkeys(self) -> Iterator[str]:
        yield from (row[0] for row in self._connection.execute("SELECT key FROM Cache"))


def writable(folder: Path) -> bool:
    """Whether this process may write in ``folder``."""
    return os.access(folder, os.W_OK)


class Folder:
    """The entries of one cache folder, opened as :class:`Mode` allows."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self._name = name
        self.mode = Mode.MEMORY
        self._cache: Any = None
        self._warned = False
        self._open()

    def _open(self) -> None:
        folder = self.folder
        if folder.exists() and not writable(folder):
            self._open_read_only("it is not writable")
            return
        try:
            self._cache = diskcache.Cache(str(folder))
            self.mode = Mode.WRITABLE
        except sqlite3.DatabaseError as error:
            if any(text in str(error) for text in _CORRUPT):
                self._set_aside(error)
            elif "readonly" in str(error) or "read-only" in str(error):
                self._open_read_only(str(error))
            else:
                self._unavailable(error)
        except _DISK_ERRORS as error:
            self._unavailable(error)

    def _open_read_only(self, why: str) -> None:
        try:
            self._cache = _ReadOnly(self.folder)
            self.mode = Mode.READ_ONLY
            logger.info(
                "numbatune: %s: the tune cache at %s is read-only (%s): its results are used, "
                "new ones stay in memory",
                self._name,
                self.folder,
                why,
            )
        except _DISK_ERRORS as error:
            self._unavailable(error)

    def _set_aside(self, error: Exception) -> None:
        folder = self.folder
        aside = folder.with_name(f"{folder.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            shutil.move(str(folder), str(aside))
            self._cache = diskcache.Cache(str(folder))
            self.mode = Mode.WRITABLE
        except _DISK_ERRORS as second:
            logger.warning(
                "numbatune: %s: the tune cache at %s is corrupt (%s) and could not be moved "
                "aside (%s): results stay in memory",
                self._name, folder, error, second,
            )  # fmt: skip
            return
        logger.warning(
            "numbatune: %s: the tune cache at %s is corrupt (%s); moved it to %s and started "
            "a fresh one",
            self._name, folder, error, aside,
        )  # fmt: skip

    def _unavailable(self, error: Exception) -> None:
        self.mode = Mode.MEMORY
        self._cache = None
        self._warn(f"the tune cache at {self.folder} cannot be used ({error})")

    def _warn(self, what: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("numbatune: %s: %s: results stay in memory", self._name, what)

    def get(self, key: str) -> Any:
        """The value stored under ``key``, or None (also when the disk cannot be read)."""
        if self._cache is None:
            return None
        try:
            return self._cache.get(key)
        except _DISK_ERRORS as error:
            self._warn(f"cannot read the tune cache ({error})")
            return None

    def stored_keys(self) -> list[str]:
        """Every key stored (none when the disk cannot be read)."""
        if self._cache is None:
            return []
        try:
            return list(self._cache.iterkeys())
        except _DISK_ERRORS as error:
            self._warn(f"cannot read the tune cache ({error})")
            return []

    def set(self, key: str, value: str) -> bool:
        """Store ``value``; False (with one warning) where the folder cannot take it."""
        if self.mode is not Mode.WRITABLE:
            return False
        try:
            self._cache.set(key, value)
            return True
        except _DISK_ERRORS as error:
            self._warn(f"cannot write the tune cache ({error})")
            return False

    def add(self, key: str, value: str) -> bool:
        """Store ``value`` unless ``key`` is there; whether it was stored."""
        if self.mode is not Mode.WRITABLE:
            return False
        try:
            return bool(self._cache.add(key, value))
        except _DISK_ERRORS as error:
            self._warn(f"cannot write the tune cache ({error})")
            return False

    def delete(self, key: str) -> None:
        if self.mode is Mode.WRITABLE:
            try:
                self._cache.delete(key)
            except _DISK_ERRORS as error:
                self._warn(f"cannot write the tune cache ({error})")

    def close(self) -> None:
        if self._cache is not None and self.mode is Mode.WRITABLE:
            self._cache.close()
