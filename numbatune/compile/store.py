"""Compiled kernels on disk, beside the tuning results.

``<cache_dir>/kernels/sm_90/<function>/``, a diskcache per function, keyed by a digest of what
decides a kernel's code (:func:`numbatune.compile.build.store_key`: the kernel's code and the
values it reads, the variant's parameters and jit options, the argument types, the compute
capability and the toolchain versions). A process whose key is stored launches its winner from
here with no numba compile. An entry that does not load is discarded with a warning and built
again, never used.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

import diskcache

from numbatune.compile import build
from numbatune.identity import folder_name

logger = logging.getLogger("numbatune")

_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)


def kernels_folder(cache_dir: Path, cc: tuple[int, int]) -> Path:
    """Where compiled kernels for compute capability ``cc`` are kept under ``cache_dir``."""
    return cache_dir / "kernels" / f"sm_{cc[0]}{cc[1]}"


class KernelStore:
    """The compiled kernels of one function for one compute capability."""

    def __init__(self, cache_dir: Path | None, cc: tuple[int, int], function_id: str) -> None:
        self._folder = (
            None if cache_dir is None else kernels_folder(cache_dir, cc) / folder_name(function_id)
        )
        self._cc = cc
        self._name = function_id
        self._disk: diskcache.Cache | None = None
        self._lock = threading.Lock()

    def _open(self) -> diskcache.Cache | None:
        with self._lock:
            if self._disk is None and self._folder is not None:
                try:
                    self._disk = diskcache.Cache(str(self._folder))
                except _DISK_ERRORS as error:
                    logger.warning("numbatune: %s: no kernel store (%s)", self._name, error)
                    self._folder = None
            return self._disk

    def load(self, key: str) -> Any | None:
        """The kernel stored under ``key``, or None (a damaged entry is discarded)."""
        disk = self._open()
        if disk is None:
            return None
        try:
            payload = disk.get(key)
        except _DISK_ERRORS as error:
            logger.warning("numbatune: %s: cannot read the kernel store (%s)", self._name, error)
            return None
        if payload is None:
            return None
        try:
            if not isinstance(payload, bytes):
                raise ValueError(f"a {type(payload).__name__} where a kernel was expected")
            return build.load(payload, self._cc)
        except ValueError as error:
            logger.warning(
                "numbatune: %s: discarded a compiled kernel that does not load (%s); "
                "compiling it again",
                self._name,
                error,
            )
            self.discard(key)
            return None

    def save(self, key: str, payload: bytes) -> None:
        disk = self._open()
        if disk is None:
            return
        try:
            disk.set(key, payload)
        except _DISK_ERRORS as error:
            logger.warning("numbatune: %s: cannot write the kernel store (%s)", self._name, error)

    def ran(self, key: str) -> bool:
        """Whether what ``key`` names ran on this kind of device (see :meth:`mark_ran`)."""
        disk = self._open()
        try:
            return disk is not None and disk.get(f"ran {key}") is not None
        except _DISK_ERRORS:
            return False

    def mark_ran(self, key: str) -> None:
        """Remember that what ``key`` names ran (a variant's trial run, on a kind of device)."""
        disk = self._open()
        if disk is not None:
            try:
                disk.set(f"ran {key}", True)
            except _DISK_ERRORS as error:
                logger.warning(
                    "numbatune: %s: cannot write the kernel store (%s)", self._name, error
                )

    def discard(self, key: str) -> None:
        disk = self._open()
        if disk is not None:
            try:
                disk.delete(key)
            except _DISK_ERRORS as error:
                logger.warning(
                    "numbatune: %s: cannot clean the kernel store (%s)", self._name, error
                )
