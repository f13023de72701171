"""Launching a key's winner on a call's arguments.

Through the fast path of the arguments' signature on the current device, made on first use
(:func:`numbatune.launch.fastpath.build`) and kept in the device's
:class:`~numbatune.shared.DeviceState`, the binder pointed at it; else through the kernel
compiler's own launch (:mod:`numbatune.launch.numbalaunch`): under the simulator, with the
``fast_launch`` setting off, or for arguments the fast path has no plan for.
"""

from __future__ import annotations

from typing import Any

from numbatune import keys
from numbatune.arrays import SIMULATOR
from numbatune.binder import Binder, Call
from numbatune.cache.tunecache import Winner
from numbatune.compile.compiler import Tally
from numbatune.config import settings
from numbatune.launch import fastpath
from numbatune.launch.config import LaunchConfig, is_empty, launch_config
from numbatune.launch.numbalaunch import numba_launch
from numbatune.shared import DeviceState, SharedState
from numbatune.spec import KernelSpec
from numbatune.variants import Variant


class WinnerLauncher:
    """A tuned kernel's launches of its winners: ``spec`` its options, ``shared`` the state it
    shares with tuned kernels of the same code, ``tally`` its count of compiles and loads,
    ``binder`` its entry (pointed at each new fast path), ``general`` its general path (where a
    fast path hands the calls it does not take)."""

    def __init__(
        self, spec: KernelSpec, shared: SharedState, tally: Tally, binder: Binder, general: Call
    ) -> None:
        self._spec, self._name, self._shared = spec, spec.kernel_name, shared
        self._tally, self._binder, self._general = tally, binder, general
        key = spec.key_function
        self._hooks = fastpath.Hooks(
            self._name,
            spec.launch,
            None if key is keys.default_key else key,
            general,
            binder.by_classes,
            self._launch_through_compiler,
            spec.valid,
            spec.valid_params,
        )

    def compiled(self, variant: Variant, args: tuple[Any, ...]) -> Any:
        """The variant's kernel, compiled (or loaded) for the types of ``args``."""
        return self._shared.compiler.compiled(variant, args, self._tally, settings.cache_dir)

    def launch(
        self, state: DeviceState, winner: Winner, args: tuple[Any, ...], stream: Any
    ) -> None:
        """Launch ``winner`` through the fast path for the signature of ``args`` (made if
        needed), or through the compiler's launch where no fast path serves them."""
        prepared = self.prepare(state, winner, args)
        if prepared is not None:
            kernel, config, path = prepared
            if path is None or not path.launch_winner(args, winner, stream):
                numba_launch(kernel, self._name)(args, config, stream)

    def prepare(
        self, state: DeviceState, winner: Winner, args: tuple[Any, ...]
    ) -> tuple[Any, LaunchConfig, fastpath.FastPath | None] | None:
        """``winner``'s kernel compiled for ``args``, its launch configuration, and the fast
        path of their signature, made and taught it, where one serves them; launches nothing.
        None where the launch would be empty."""
        config = launch_config(self._spec.launch, args, winner.params, self._name)
        if is_empty(config):
            return None
        kernel = self.compiled(winner.variant, args)
        path = None
        if settings.fast_launch and not SIMULATOR:
            path = self._fast_path(state, kernel, args)
            if path is not None and not path.learn(winner.index, kernel, args):
                path = None
        return kernel, config, path

    def _fast_path(
        self, state: DeviceState, kernel: Any, args: tuple[Any, ...]
    ) -> fastpath.FastPath | None:
        """The fast path for the signature of ``args`` on this device, made on first use."""
        classes = tuple(map(type, args))
        signature = (*classes, *self._spec.template.compiler.argument_types(kernel, args))
        with self._shared.lock:
            if signature not in state.signatures:
                older = state.paths.get(classes, self._general)
                path = fastpath.build(kernel, args, state.cache.winners, self._hooks, older)
                state.signatures[signature] = path
                if path is not None:
                    state.paths[classes] = path.call
                    self._binder.point(state.paths)
            return state.signatures[signature]

    def _launch_through_compiler(
        self, args: tuple[Any, ...], winner: Winner, config: LaunchConfig, stream: Any
    ) -> None:
        numba_launch(self.compiled(winner.variant, args), self._name)(args, config, stream)
