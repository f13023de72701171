"""The disk tune cache as a whole: list, show, clear, and export to / import from a JSON file.

The cache keeps ``<cache_dir>/<device>/<function>/`` (see :mod:`numbatune.cache.tunecache`).
An export is a plain, versioned JSON file, so a team can tune once and ship the results with its
package::

    {"format": "numbatune-cache", "version": 1, "entries": [
        {"device": "NVIDIA_H100_80GB_HBM3-sm90-132sm", "function": "pkg.mod.kernel",
         "key": "(((1024,), 'float32', 'C'),)", "entry": {... the stored entry ...}}]}

Importing validates the file and each entry, skips entries of other devices and entries already
in the cache, and writes the others one by one (each write is atomic): a bad file changes
nothing, and nothing already there is replaced. An imported entry whose checksum no longer
matches the kernel (its source, variants or versions changed) is never used: the key is tuned
again on first use, as for any stale entry.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diskcache

from numbatune.cache import entry as entries
from numbatune.cache.tunecache import function_folder
from numbatune.devices import current_kind
from numbatune.errors import CacheFileError
from numbatune.identity import base_name

FILE_FORMAT = "numbatune-cache"
FILE_VERSION = 1


@dataclass(frozen=True)
class Entry:
    """One stored result: the device and function it belongs to, its key, and what was stored."""

    device: str
    function: str
    key: str
    stored: dict[str, Any]

    @property
    def best(self) -> str:
        """The winning variant's label."""
        return self.stored["results"][self.stored["best_index"]]["variant"]


def _function_directories(cache_dir: Path) -> Iterator[tuple[str, Path]]:
    if not cache_dir.is_dir():
        return
    for device in sorted(p for p in cache_dir.iterdir() if p.is_dir() and p.name != "native"):
        for function in sorted(p for p in device.iterdir() if (p / "cache.db").is_file()):
            yield device.name, function


def _named(name: str, function: str | None) -> bool:
    """Whether a function called ``name`` is the one asked for (all when None), by its full
    name or its last part."""
    base = base_name(name)
    return function is None or function in (name, base, base.rpartition(".")[2])


def stored_entries(cache_dir: Path, function: str | None = None) -> list[Entry]:
    """Every stored result under ``cache_dir`` (of one function, by name or its last part)."""
    found = []
    for device, directory in _function_directories(cache_dir):
        with diskcache.Cache(str(directory)) as disk:
            for key in disk.iterkeys():
                stored = json.loads(disk[key])
                name = stored.get("function", directory.name)
                if _named(name, function):
                    found.append(Entry(device, name, key, stored))
    return found


def size_bytes(cache_dir: Path) -> int:
    """Bytes on disk under ``cache_dir``."""
    if not cache_dir.is_dir():
        return 0
    return sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())


def clear(cache_dir: Path, function: str | None = None) -> int:
    """Delete the stored results (of one function); returns how many were deleted."""
    deleted = 0
    for _, directory in _function_directories(cache_dir):
        with diskcache.Cache(str(directory)) as disk:
            for key in list(disk.iterkeys()):
                name = json.loads(disk[key]).get("function", directory.name)
                if _named(name, function):
                    del disk[key]
                    deleted += 1
    return deleted


def export(cache_dir: Path, path: Path, function: str | None = None) -> int:
    """Write the stored results (of one function) to the JSON file ``path``; returns how many."""
    found = stored_entries(cache_dir, function)
    document = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "entries": [
            {"device": e.device, "function": e.function, "key": e.key, "entry": e.stored}
            for e in found
        ],
    }
    Path(path).write_text(json.dumps(document, indent=1))
    return len(found)


@dataclass
class ImportResult:
    """What :func:`import_file` did."""

    imported: int = 0
    #: Entries for another device than this one.
    other_device: int = 0
    #: Entries whose key is in the cache already (kept as it was).
    already_present: int = 0


def import_file(path: Path, cache_dir: Path, device: str | None = None) -> ImportResult:
    """Add the entries of an exported file for this device (``device``: its partition name,
    the current device's by default) to the cache under ``cache_dir``.

    Raises :class:`CacheFileError`, having written nothing, when the file or any entry is not in
    the exported format.
    """
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CacheFileError(f"cannot read the cache file {path}: {error}") from error
    if not isinstance(document, dict) or document.get("format") != FILE_FORMAT:
        raise CacheFileError(f"{path} is not a numbatune cache file (format {FILE_FORMAT!r})")
    if document.get("version") != FILE_VERSION:
        raise CacheFileError(
            f"{path} is version {document.get('version')!r} of the cache file; this numbatune "
            f"reads version {FILE_VERSION}"
        )
    items = document.get("entries")
    if not isinstance(items, list) or not all(_valid(item) for item in items):
        raise CacheFileError(f"{path}: an entry is not (device, function, key, entry)")
    device = device or current_kind().partition
    result = ImportResult()
    for item in items:
        if item["device"] != device:
            result.other_device += 1
            continue
        directory = function_folder(Path(cache_dir) / device, item["function"])
        with diskcache.Cache(str(directory)) as disk:
            if disk.add(item["key"], json.dumps(item["entry"])):
                result.imported += 1
            else:
                result.already_present += 1
    return result


def _valid(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if not all(isinstance(item.get(name), str) for name in ("device", "function", "key")):
        return False
    try:
        entries.check(item.get("entry"))
    except entries.DamagedEntry:
        return False
    return True


def cache_import(path: str | Path) -> ImportResult:
    """Import an exported cache file into the cache numbatune uses (``settings.cache_dir``) for
    the current device: for a package that ships tuned results and imports them at start-up."""
    from numbatune.config import settings

    if settings.cache_dir is None:
        raise CacheFileError("cache_import: the disk cache is off (cache_dir is None)")
    return import_file(Path(path), settings.cache_dir)
