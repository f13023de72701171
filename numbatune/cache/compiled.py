"""Compiled kernels in an export file: read from the kernel store's folders, checked, and
written into another cache's.

An export carries each kernel as the kernel store (:mod:`numbatune.compile.store`) keeps it:
its compute capability's folder (``sm_90``), the function's id, its digest, the payload in
base64 and its SHA-256. Importing checks every kernel before writing any (a payload that does
not match its digest, a field out of place: refused, saying which) and writes each into the
same folder of the importing cache. A payload is a pickle: import only exports one trusts.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import re
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numbatune.cache.disk import KERNELS, Additions, Folder
from numbatune.identity import function_folder

#: The folder of one compute capability in the kernel store, as ``sm_90``.
_ARCH = re.compile(r"sm_[0-9]{2,3}")
#: A kernel's key in the kernel store: a digest, in hexadecimal.
_KEY = re.compile(r"[0-9a-f]{16,128}")
#: The kernel store's folder in a cache directory.
STORE = "kernels"


def kernels_folder(cache_dir: Path, cc: tuple[int, int]) -> Path:
    """Where compiled kernels for compute capability ``cc`` are kept under ``cache_dir``."""
    return cache_dir / STORE / f"sm_{cc[0]}{cc[1]}"


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel as the kernel store keeps it."""

    #: The folder of its compute capability, as ``sm_90``.
    arch: str
    #: The id of the tuned function it belongs to.
    function: str
    #: Its key in the function's store.
    key: str
    payload: bytes

    def folder(self, cache_dir: Path) -> Path:
        """The store folder it belongs in under ``cache_dir``."""
        return function_folder(cache_dir / STORE / self.arch, self.function)


class DamagedKernel(ValueError):
    """A kernel of an export file that is not what numbatune writes."""


def stored(
    cache_dir: Path, functions: Iterable[str], known: Container[tuple[str, str, str]] = ()
) -> list[Kernel]:
    """The kernels the store under ``cache_dir`` keeps for ``functions`` (ids), for every
    compute capability, but those whose (arch, function, key) is ``known`` or that are damaged."""
    arches = sorted(p.name for p in (cache_dir / STORE).glob("sm_*") if _ARCH.fullmatch(p.name))
    found = []
    for function in sorted(set(functions)):
        for arch in arches:
            folder = function_folder(cache_dir / STORE / arch, function)
            found += _stored_in(folder, arch, function, known)
    return found


def _stored_in(
    folder: Path, arch: str, function: str, known: Container[tuple[str, str, str]]
) -> list[Kernel]:
    if not (folder / "cache.db").is_file():
        return []
    with contextlib.closing(Folder(folder, function, KERNELS)) as disk:
        return [
            Kernel(arch, function, key, payload)
            for key in disk.stored_keys()
            if _KEY.fullmatch(key)
            and (arch, function, key) not in known
            and isinstance(payload := disk.get(key), bytes)
        ]


def encode(kernel: Kernel) -> dict[str, str]:
    """The form of ``kernel`` in an export file."""
    return {
        "arch": kernel.arch,
        "function": kernel.function,
        "key": kernel.key,
        "sha256": hashlib.sha256(kernel.payload).hexdigest(),
        "payload": base64.b64encode(kernel.payload).decode("ascii"),
    }


def decode(item: Any) -> Kernel:
    """The kernel an export file's ``item`` holds; :class:`DamagedKernel` says what is wrong."""
    if not isinstance(item, dict):
        raise DamagedKernel(f"a compiled kernel is a JSON object, got {type(item).__name__}")
    fields = ("arch", "function", "key", "sha256", "payload")
    for name in fields:
        if not isinstance(item.get(name), str):
            raise DamagedKernel(f"{name} is {item.get(name)!r}, expected text")
    if not _ARCH.fullmatch(item["arch"]):
        raise DamagedKernel(f"arch is {item['arch']!r}, expected sm_ and its digits, as sm_90")
    if not _KEY.fullmatch(item["key"]):
        raise DamagedKernel(f"key is {item['key']!r}, expected the kernel store's digest")
    try:
        payload = base64.b64decode(item["payload"], validate=True)
    except (binascii.Error, ValueError) as error:
        raise DamagedKernel(f"its payload is not base64 ({error})") from None
    if hashlib.sha256(payload).hexdigest() != item["sha256"]:
        raise DamagedKernel("its payload does not match its sha256 (cut short or changed)")
    return Kernel(item["arch"], item["function"], item["key"], payload)


def add(kernels: Iterable[Kernel], cache_dir: Path) -> Additions:
    """Write ``kernels`` into the kernel store under ``cache_dir``, each into its folder
    (atomically); a kernel stored already is kept."""
    added = Additions(lambda stored: isinstance(stored, bytes))  # a payload
    by_folder: dict[Path, list[Kernel]] = {}
    for kernel in kernels:
        by_folder.setdefault(kernel.folder(cache_dir), []).append(kernel)
    for folder, members in by_folder.items():
        with contextlib.closing(Folder(folder, members[0].function, KERNELS)) as disk:
            for kernel in members:
                added.add(disk, kernel.key, kernel.payload)
    return added
