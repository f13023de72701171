"""What tuned kernels of the same code share in a process, and what they keep per device.

Tuned kernels with the same sharing key (:func:`numbatune.identity.sharing_key`: the same
function, by name, code, variants, launch function and options) share one
:class:`SharedState`: the compiled kernels, the kernel's checksum, and one :class:`DeviceState`
per device and cache directory (its tune cache, with the winner table, and its fast paths).
"""

from __future__ import annotations

import collections
import multiprocessing
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from numba import cuda

from numbatune import devices, identity, keys, processes
from numbatune.arrays import SIMULATOR
from numbatune.binder import Call
from numbatune.cache.tunecache import TuneCache, Winner, stored_anywhere
from numbatune.compile.compiler import Compiler
from numbatune.forking import ForkSafeLock
from numbatune.launch import fastpath
from numbatune.spec import KernelSpec


class DeviceState:
    """What a tuned kernel keeps per device (and cache directory)."""

    def __init__(self, cache: TuneCache) -> None:
        self.cache = cache
        #: Argument classes -> the newest fast path's ``call`` for those classes.
        self.paths: dict[tuple[type, ...], Call] = {}
        #: numba signature -> its fast path, or None where the fast launch has no plan.
        self.signatures: dict[tuple[Any, ...], fastpath.FastPath | None] = {}

    def known(self, key: Hashable, kernel_name: str) -> Winner | None:
        """The winner the table holds for ``key``, or None; a clear error for unhashable keys."""
        try:
            return self.cache.get(key)
        except TypeError:
            keys.check_hashable(key, kernel_name)
            raise


class SharedState:
    """What tuned kernels with the same sharing key share in a process (the module says)."""

    def __init__(self, spec: KernelSpec, function_id: str) -> None:
        self.compiler = Compiler(spec.template, function_id)
        self.devices: dict[tuple[Any, Path | None], DeviceState] = {}
        self.lock = ForkSafeLock(reentrant=True)
        self._spec, self._function_id = spec, function_id
        self._checksum: str | None = None

    def checksum(self) -> str:
        """The digest of the kernel, its variants, launch function and the versions that
        decide whether a stored result holds (computed once, on first use)."""
        if self._checksum is None:
            self._checksum = self._spec.template.checksum(self._spec.variants, self._spec.launch)
        return self._checksum

    def prepare_workers(self, cache_dir: Path | None) -> None:
        """Start the compile workers' fork server for a kernel just defined, if likely to be tuned
        in this process: ``cache_dir`` has nothing of it, and this is the user's process (not a
        ``multiprocessing`` child nor a numbatune worker, which import the user's modules again)."""
        if processes.in_worker() or multiprocessing.parent_process() is not None:
            return
        if cache_dir is None or not stored_anywhere(cache_dir, self._function_id):
            self.compiler.prepare(self._spec.variants)

    def on_current_device(self, cache_dir: Path | None) -> DeviceState:
        """The state on the current device with the cache directory ``cache_dir`` (a test that
        gives itself a cache of its own gets a state of its own), made on first use."""
        device = "simulator" if SIMULATOR else int(cuda.current_context().handle)
        place = (device, cache_dir)
        state = self.devices.get(place)
        if state is None:
            with self.lock:
                state = self.devices.get(place)
                if state is None:
                    state = self.devices[place] = DeviceState(self._new_cache(cache_dir))
        return state

    def _new_cache(self, cache_dir: Path | None) -> TuneCache:
        folder = None if cache_dir is None else cache_dir / devices.current_kind().partition
        variants, params = self._spec.variants, self._spec.launch_params
        return TuneCache(self._function_id, variants, params, folder, self.checksum)


#: Shared states by sharing key, the most recently made last; the oldest are dropped past
#: _SHARED_LIMIT (a factory making kernels with ever new closure values stays bounded).
_shared: collections.OrderedDict[str, SharedState] = collections.OrderedDict()
_shared_lock = ForkSafeLock()
_SHARED_LIMIT = 1024


def shared_state(spec: KernelSpec, function_id: str) -> SharedState:
    """The state a tuned kernel of ``spec`` shares with those of the same code and options."""
    template = spec.template
    # The function's name: a kernel of the same code in another module keeps its results (and
    # its compiled kernels) under its own name. The variants' texts have the code of the device
    # functions they give, which their labels only name.
    variants = (template.variant_text(v) for v in spec.variants)
    code = "\0".join([function_id, template.compiler.identity(), template.code_text(), *variants])
    options = spec.sharing_options()
    key = identity.sharing_key(
        code, template.jit_options, template.signatures, spec.variants, spec.launch, options
    )
    with _shared_lock:
        shared = _shared.get(key)
        if shared is None:
            shared = _shared[key] = SharedState(spec, function_id)
            if len(_shared) > _SHARED_LIMIT:
                _shared.popitem(last=False)
        _shared.move_to_end(key)
        return shared
