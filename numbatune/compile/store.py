"""Compiled kernels on disk, beside the tuning results.

``<cache_dir>/kernels/sm_90/<function>/``, a diskcache per function, keyed by a digest of what
decides a kernel's code (:func:`numbatune.compile.compiler.store_key`). A process whose key is
stored launches its winner from here with no numba compile. An entry that does not load is
discarded with a warning and built again, never used. The folder is opened as
:mod:`numbatune.cache.disk` opens the tune cache's: a read-only store (shipped in an image) is
read, a damaged one set aside.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from numbatune.cache.compiled import kernels_folder
from numbatune.cache.disk import KERNELS, Folder
from numbatune.compilers import NUMBA_CUDA, KernelCompiler
from numbatune.identity import function_folder

logger = logging.getLogger("numbatune")


class KernelStore:
    """The compiled kernels of the tuned function ``function_id`` for the compute capability
    ``cc``, kept under ``cache_dir`` and loaded by ``compiler``."""

    def __init__(
        self,
        cache_dir: Path,
        cc: tuple[int, int],
        function_id: str,
        compiler: KernelCompiler = NUMBA_CUDA,
    ) -> None:
        self._folder = function_folder(kernels_folder(cache_dir, cc), function_id)
        self._cc, self._compiler, self._name = cc, compiler, function_id
        self._disk: Folder | None = None
        self._lock = threading.Lock()

    def _open(self) -> Folder:
        with self._lock:
            if self._disk is None:
                self._disk = Folder(self._folder, self._name, KERNELS)
            return self._disk

    @property
    def problem(self) -> str | None:
        """Why kernels cannot be kept here, in words, or None while they can."""
        return self._open().problem

    def load(self, key: str) -> Any | None:
        """The kernel stored under ``key``, or None (a damaged entry is discarded)."""
        payload = self._open().get(key)
        if payload is None:
            return None
        try:
            if not isinstance(payload, bytes):
                raise ValueError(f"a {type(payload).__name__} where a kernel was expected")
            return self._compiler.load(payload, self._cc)
        except ValueError as error:
            logger.warning(
                "numbatune: %s: discarded a compiled kernel that does not load (%s); "
                "compiling it again",
                self._name,
                error,
            )
            self.discard(key)
            return None

    def save(self, key: str, payload: bytes) -> bool:
        """Keep ``payload`` under ``key``; whether it was kept (see :attr:`problem`)."""
        return self._open().set(key, payload)

    def holds(self, key: str) -> bool:
        """Whether a kernel is stored under ``key`` (asked of the disk: another process may
        have cleared the store since this one wrote it)."""
        return self._open().holds(key)

    def ran(self, key: str) -> bool:
        """Whether what ``key`` names ran on this kind of device (see :meth:`mark_ran`)."""
        return self._open().get(f"ran {key}") is not None

    def mark_ran(self, key: str) -> None:
        """Remember that what ``key`` names ran (a variant's trial run, on a kind of device)."""
        self._open().set(f"ran {key}", True)

    def discard(self, key: str) -> None:
        """Forget the kernel stored under ``key``."""
        self._open().delete(key)
