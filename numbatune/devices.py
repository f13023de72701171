"""The GPU numbatune works on: what tells one kind of device from another, and which one an
array lives on.

Tuning results and compiled kernels are kept per kind of device: its name, compute capability
and number of multiprocessors (two identical GPUs share them). Under numba's simulator the
device is ``simulator``. A kernel launches on numba's current device; in a process that sees
several GPUs, arrays on another one are refused with an error that names them
(:func:`array_device`), as numba would otherwise hand the kernel addresses of another GPU.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune.arraykinds import SIMULATOR, ArrayKind, kind_of


@dataclass(frozen=True)
class DeviceKind:
    """A kind of device: results tuned on one serve every device of the same kind."""

    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int

    @property
    def partition(self) -> str:
        """The folder name of this kind's tune cache: ``NVIDIA_H100_80GB_HBM3-sm90-132sm``."""
        if SIMULATOR:
            return "simulator"
        major, minor = self.compute_capability
        return safe_name(f"{self.name}-sm{major}{minor}-{self.multiprocessors}sm")


SIMULATED = DeviceKind("simulator", (0, 0), 0)


def device_name(device: object) -> str:
    """A numba device's name as text (numba gives bytes on some versions)."""
    name = getattr(device, "name", "")
    return name.decode() if isinstance(name, bytes) else str(name)


def current_kind() -> DeviceKind:
    """The kind of the device numba launches on in this thread."""
    if SIMULATOR:
        return SIMULATED
    device = cuda.get_current_device()
    return DeviceKind(
        device_name(device), tuple(device.compute_capability), int(device.MULTIPROCESSOR_COUNT)
    )


def safe_name(text: str) -> str:
    """``text`` as a folder name: runs of other characters than ``A-Za-z0-9_.-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "_"


def current_index() -> int:
    """The index (in ``numba.cuda.gpus``) of the device numba launches on in this thread."""
    if SIMULATOR:
        return 0
    return int(cuda.get_current_device().id)


@functools.cache
def several() -> bool:
    """Whether this process sees more than one GPU (never under the simulator)."""
    if SIMULATOR:
        return False
    return len(cuda.gpus) > 1


def array_device(array: Any, kind: ArrayKind | None = None) -> int | None:
    """The index of the GPU whose memory holds ``array``'s data, as its kind (found from its
    class unless given) reads it; None where every device can read it, where the library does
    not say, and under the simulator."""
    kind = kind or kind_of(type(array))
    if SIMULATOR or kind is None:
        return None
    return kind.device(array)
