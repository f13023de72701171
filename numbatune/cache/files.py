"""The disk tune cache as a whole: list, show, clear, and export to / import from a JSON file.

The cache keeps ``<cache_dir>/<device>/<function>/`` (see :mod:`numbatune.cache.tunecache`) and
compiled kernels in ``<cache_dir>/kernels/``. An export is a plain, versioned JSON file, so a
team can tune once and ship the results with its package::

    {"format": "numbatune-cache", "version": 1, "entries": [
        {"device": "NVIDIA_H100_80GB_HBM3-sm90-132sm", "function": "pkg.mod.kernel",
         "key": "(((1024,), 'float32', 'C'),)", "entry": {... the stored entry ...}}],
     "kernels": [
        {"arch": "sm_90", "function": "pkg.mod.kernel", "key": "3f0c...", "sha256": "...",
         "payload": "... base64 ..."}]}

``kernels`` (optional) carries the compiled kernels the kernel store keeps for the exported
functions (:mod:`numbatune.cache.compiled`): an importer launches the winners with no compile.

Importing validates the whole file first (a bad file changes nothing), skips entries of other
devices and writes the others one by one, atomically; kernels go to the folder of their compute
capability. Entries are stored under their key and the kernel's checksum, so an imported entry
never replaces a sound result of the same code (``already present``) nor collides with a stale
one. An entry that cannot be read is listed as damaged, left out of exports, and cleared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numbatune.cache import compiled
from numbatune.cache import entry as entries
from numbatune.cache.disk import Additions, Folder, Mode, in_words
from numbatune.devices import current_kind
from numbatune.errors import CacheFileError
from numbatune.identity import base_name, folder_name, function_folder

FILE_FORMAT = "numbatune-cache"
FILE_VERSION = 1
#: The readable part of a closure's folder name (:func:`numbatune.identity.function_id`).
_CLOSURE = re.compile(r"(.+)_closure_([0-9a-f]{8})")


@dataclass(frozen=True)
class Entry:
    """One stored result: the device and function it belongs to, its key, and what was stored
    (or, for a damaged entry, why it cannot be read)."""

    device: str
    function: str
    key: str
    stored: dict[str, Any] | None
    damaged: str | None = None


def _named(name: str, function: str | None) -> bool:
    """Whether ``name`` is the ``function`` asked for (all when None): full, or its last part."""
    base = base_name(name)
    return function is None or function in (name, base, base.rpartition(".")[2])


def _read(device: str, directory: Path, stored_under: str, text: Any) -> Entry:
    key = entries.key_of(stored_under)
    try:
        stored = entries.check(json.loads(text))
    except (ValueError, TypeError) as error:  # DamagedEntry, and JSON that is not JSON
        return Entry(device, directory.name, key, None, str(error))
    return Entry(device, stored.get("function", directory.name), key, stored)


def _walk(
    cache_dir: Path, function_id: str | None = None, wanted: Callable[[str], bool] | None = None
) -> Iterator[tuple[Path, str, Entry]]:
    """Each entry stored under ``cache_dir`` (of ``function_id``, under the keys ``wanted``
    accepts, where given: the others are not read): its folder, storage key, and the entry."""
    devices = sorted(p for p in cache_dir.iterdir() if p.is_dir()) if cache_dir.is_dir() else []
    for device in devices:
        for directory in sorted(p for p in device.iterdir() if (p / "cache.db").is_file()):
            if function_id is not None and directory.name != folder_name(function_id):
                continue
            with contextlib.closing(Folder(directory, directory.name)) as folder:
                for stored_under in folder.stored_keys():
                    if wanted is None or wanted(stored_under):
                        entry = _read(
                            device.name, directory, stored_under, folder.get(stored_under)
                        )
                        yield directory, stored_under, entry


def stored_entries(cache_dir: Path, function: str | None = None) -> list[Entry]:
    """Every stored result under ``cache_dir`` (of one function, by name or its last part);
    damaged entries are listed as such, under their folder's name."""
    return [
        entry
        for _, stored_under, entry in _walk(cache_dir)
        if not entries.is_journal(stored_under)  # an unfinished tuning: no result yet
        and _named(entry.function, function)
    ]


def entries_of(
    cache_dir: Path, function_id: str, wanted: Callable[[str], bool]
) -> list[tuple[str, Entry]]:
    """The stored results of ``function_id`` (every device's) under ``cache_dir`` whose storage
    keys ``wanted`` accepts, each with its storage key; only those are read."""
    return [
        (stored_under, entry)
        for _, stored_under, entry in _walk(cache_dir, function_id, wanted)
        if not entries.is_journal(stored_under)
    ]


def size_bytes(cache_dir: Path) -> int:
    """Bytes on disk under ``cache_dir``; a file or folder removed while they are counted
    (another process closing its cache deletes its log files) counts as none."""
    total = 0
    for folder, _, names in os.walk(cache_dir):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                found = os.stat(os.path.join(folder, name))
                total += found.st_size if stat.S_ISREG(found.st_mode) else 0
    return total


def _function_of(folder: str, known: dict[str, str]) -> str | None:
    """The function id whose entries or kernels ``folder`` (a name) holds, where it can be told:
    one of ``known`` (ids with stored results, by folder name), or the one the folder's readable
    part spells out whole (checked against its digest)."""
    if folder in known:
        return known[folder]
    readable = folder.rpartition("-")[0]
    closure = _CLOSURE.fullmatch(readable)
    spelled = [readable, *([f"{closure[1]} [closure {closure[2]}]"] if closure else [])]
    return next((name for name in spelled if folder_name(name) == folder), None)


def _folder_named(folder: str, function: str | None, known: dict[str, str]) -> bool:
    """Whether ``folder`` (of results or kernels) is the function's (all when None), as
    :func:`_named` matches results; one whose function cannot be told, only its full id's."""
    if function is None or folder == folder_name(function):
        return True
    name = _function_of(folder, known)
    return name is not None and _named(name, function)


def clear(cache_dir: Path, function: str | None = None) -> int:
    """Delete the stored results (of one function, by name or last part, damaged entries of
    its folders too) and the compiled kernels (all, or its); how many results were deleted."""
    found = list(_walk(cache_dir))
    known = {
        folder_name(entry.function): entry.function
        for _, _, entry in found
        if entry.stored is not None  # (a journal is no entry: it reads as damaged)
    }
    doomed: dict[Path, list[str]] = {}
    for directory, stored_under, entry in found:
        if _named(entry.function, function) or (
            entry.damaged is not None and _folder_named(directory.name, function, known)
        ):
            doomed.setdefault(directory, []).append(stored_under)
    deleted = sum(_delete(directory, keys) for directory, keys in doomed.items())
    for kernels in (cache_dir / compiled.STORE).glob("*/*") if cache_dir.is_dir() else ():
        if _folder_named(kernels.name, function, known):
            shutil.rmtree(kernels, ignore_errors=True)
    return deleted


def _delete(directory: Path, keys: list[str]) -> int:
    """Delete ``keys`` from ``directory``; how many of them, journals aside, are gone."""
    with contextlib.closing(Folder(directory, directory.name)) as folder:
        if folder.mode is not Mode.WRITABLE:
            return 0
        for key in keys:
            folder.delete(key)
        left = set(folder.stored_keys())
        return sum(key not in left and not entries.is_journal(key) for key in keys)


@dataclass(frozen=True)
class Written:
    """What :func:`write_export` wrote."""

    results: int
    kernels: int
    size_bytes: int


def export(
    cache_dir: Path, path: Path, function: str | None = None, kernels: bool = True
) -> tuple[Written, int]:
    """Write the stored results (of one function) to the JSON file ``path``, with their
    functions' compiled kernels unless ``kernels`` is False; what was written, and how many
    damaged results were left out. :class:`CacheFileError` where it cannot be written."""
    found = stored_entries(cache_dir, function)
    items = export_items(found)
    shipped = export_kernels(cache_dir, items) if kernels else []
    return write_export(path, items, shipped), sum(e.stored is None for e in found)


def export_items(found: list[Entry]) -> list[dict[str, Any]]:
    """The items of an export file for the entries ``found`` that are not damaged."""
    return [
        {"device": e.device, "function": e.function, "key": e.key, "entry": e.stored}
        for e in found
        if e.stored is not None
    ]


def export_kernels(
    cache_dir: Path, items: list[dict[str, Any]], known: Container[tuple[str, str, str]] = ()
) -> list[compiled.Kernel]:
    """The compiled kernels under ``cache_dir`` of the functions of export ``items``, but those
    whose (arch, function, key) is ``known``."""
    return compiled.stored(Path(cache_dir), (item["function"] for item in items), known)


def item_identity(item: dict[str, Any]) -> tuple[str, str, str, str]:
    """What tells export items (:func:`export_items`) apart."""
    return item["device"], item["function"], item["key"], item["entry"]["checksum"]


def write_export(
    path: Path, items: list[dict[str, Any]], kernels: Sequence[compiled.Kernel] = ()
) -> Written:
    """Write an export file of ``items`` (:func:`export_items`; the last of each
    :func:`item_identity` kept) and of compiled ``kernels`` (each arch, function and key
    once), whole or not at all (a temporary file beside it, renamed); :class:`CacheFileError`
    where it cannot be written."""
    unique = {item_identity(i): i for i in items}
    once = {(k.arch, k.function, k.key): k for k in kernels}
    document = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "entries": list(unique.values()),
        "kernels": [compiled.encode(kernel) for kernel in once.values()],
    }
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    text = json.dumps(document, indent=1)
    try:
        partial.write_text(text)
        os.replace(partial, path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise CacheFileError(f"cannot write {path}: {in_words(error)}") from None
    return Written(len(unique), len(once), len(text))


@dataclass
class ImportResult:
    """What :func:`import_file` did."""

    imported: int = 0
    #: Entries for another device than this one.
    other_device: int = 0
    #: Entries already in the cache (the same key and kernel checksum).
    already_present: int = 0
    #: Entries and kernels that could not be written (a read-only or full cache), and why.
    not_written: int = 0
    why_not_written: str | None = None
    #: Compiled kernels written into the kernel store (for any compute capability).
    kernels_imported: int = 0
    #: Compiled kernels the kernel store held already.
    kernels_present: int = 0


@dataclass(frozen=True)
class ExportFile:
    """What an export file holds: its items (:func:`export_items`) and compiled kernels."""

    items: list[dict[str, Any]]
    kernels: list[compiled.Kernel]


def read_export(path: Path) -> ExportFile:
    """The export file at ``path``; :class:`CacheFileError` when it cannot be read, or it or
    one of its entries or kernels is not in the exported format."""
    # (Not text, not JSON, a number of more digits than Python reads: ValueError; JSON nested
    # deeper than Python reads: RecursionError.)
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as error:
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
    return ExportFile(items, _kernels(path, document.get("kernels", [])))


def _kernels(path: Path, found: Any) -> list[compiled.Kernel]:
    """The compiled kernels of an export file's ``kernels`` section."""
    if not isinstance(found, list):
        raise CacheFileError(f"{path}: kernels is {type(found).__name__}, expected a list")
    kernels = []
    for index, item in enumerate(found):
        try:
            kernels.append(compiled.decode(item))
        except compiled.DamagedKernel as error:
            what = item.get("function") if isinstance(item, dict) else None
            of = f" ({item.get('arch')}, {what})" if isinstance(what, str) else ""
            damaged = f"{path}: compiled kernel #{index}{of} is damaged: {error}"
            raise CacheFileError(damaged) from None
    return kernels


def import_file(path: Path, cache_dir: Path, device: str | None = None) -> ImportResult:
    """Add the entries of an export file for this device (:func:`import_items`) and all its
    compiled kernels to the cache under ``cache_dir``; :class:`CacheFileError`, having written
    nothing, when the file is not in the exported format (:func:`read_export`)."""
    shipped = read_export(path)
    result = import_items(shipped.items, cache_dir, device)
    kernels = compiled.add(shipped.kernels, Path(cache_dir))
    return dataclasses.replace(
        result,
        kernels_imported=kernels.written,
        kernels_present=kernels.already_present,
        not_written=result.not_written + kernels.not_written,
        why_not_written=result.why_not_written or kernels.why_not_written,
    )


def import_items(
    items: list[dict[str, Any]], cache_dir: Path, device: str | None = None
) -> ImportResult:
    """Add the export items (:func:`read_export`) of this device (``device``: its partition
    name, the current device's by default) to the cache under ``cache_dir``."""
    device = device or current_kind().partition
    added, other_device = Additions(_sound), 0
    for item in items:
        if item["device"] != device:
            other_device += 1
            continue
        directory = function_folder(Path(cache_dir) / device, item["function"])
        with contextlib.closing(Folder(directory, item["function"])) as folder:
            stored_under = entries.storage_key(item["key"], item["entry"]["checksum"])
            added.add(folder, stored_under, json.dumps(item["entry"]))
    return ImportResult(added.written, other_device, added.already_present, added.not_written,
                        added.why_not_written)  # fmt: skip


def _sound(stored: Any) -> bool:
    """Whether ``stored``, an entry's text, can be read (else an import replaces it)."""
    try:
        entries.check(json.loads(stored))
    except (ValueError, TypeError):  # DamagedEntry, and JSON that is not JSON
        return False
    return True


def _valid(item: Any) -> bool:
    names = ("device", "function", "key")
    if not isinstance(item, dict) or not all(isinstance(item.get(n), str) for n in names):
        return False
    try:
        entries.check(item.get("entry"))
    except entries.DamagedEntry:
        return False
    return True


def cache_import(path: str | Path) -> ImportResult:
    """Import an exported cache file into the cache numbatune uses, for the current device.

    For a package that ships tuned results (``numbatune cache export``) and imports them at
    start-up. Entries for another kind of device are left out; entries already present are
    kept. The file's compiled kernels go to the kernel store, each in the folder of its compute
    capability: a process that launches them on such a device, with the same toolchain, loads
    them and compiles nothing.

    Parameters
    ----------
    path
        The exported file.

    Returns
    -------
    ImportResult
        Counts of the entries: ``imported``, ``other_device`` (for another device),
        ``already_present`` (the same key and kernel checksum) and ``not_written`` (a
        read-only or full cache; kernels too); of the compiled kernels: ``kernels_imported``
        and ``kernels_present`` (held already).

    Raises
    ------
    CacheFileError
        The disk cache is off (the ``cache_dir`` setting), or the file cannot be read or it or
        one of its entries or kernels is not numbatune's format (a kernel whose payload does
        not match its digest); nothing is written then.
    """
    from numbatune.config import settings

    if settings.cache_dir is None:
        raise CacheFileError("cache_import: the disk cache is off (cache_dir is None)")
    return import_file(Path(path), settings.cache_dir)
