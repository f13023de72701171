"""The user's kernel as a template: specialised on each variant's constants, and checksummed.

numba freezes globals at compile time, so compiling the kernel's function again with the names a
variant binds rebound gives a kernel in which they are constants: ``cuda.shared.array(shape=TPB,
...)`` and ``range(TPB)`` specialise. The checksum decides whether a stored result still holds:
it covers everything that changes what the variants compute or how fast.
"""

from __future__ import annotations

import dis
import hashlib
import inspect
import itertools
import types
from collections.abc import Callable, Iterator, Sequence, Set
from importlib import metadata
from typing import Any

import numpy as np
from numba import cuda
from numba.core import types as numba_types

from numbatune import unroll
from numbatune._version import __version__
from numbatune.arrays import SIMULATOR
from numbatune.values import stable_text
from numbatune.variants import JIT_OPTIONS, SIMULATOR_JIT_OPTIONS, Variant

_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"}
_ATTRIBUTE_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}

#: numba settings that change the code it generates (numba.cuda.core.config names).
CODEGEN_SETTINGS = (
    "OPT",
    "BOUNDSCHECK",
    "DEBUGINFO_DEFAULT",
    "CUDA_DEBUGINFO_DEFAULT",
    "FORCE_CUDA_CC",
    "CUDA_DEFAULT_PTX_CC",
    "LOOP_VECTORIZE",
    "SLP_VECTORIZE",
    "ENABLE_CUDASIM",
)


def names_read(code: types.CodeType) -> set[str]:
    """Global and free-variable names a function's code (and the code nested in it) reads.

    Attribute names (``module.NAME``) are not counted: rebinding them would change nothing.
    """
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _LOADS}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= names_read(constant)
    return names


def _attributes_read(code: types.CodeType) -> set[tuple[str, str]]:
    """``(name, attribute)`` for each ``name.attribute`` the code reads, ``name`` a global or
    free variable (``mod.helper``, ``cuda.grid``)."""
    found = set()
    instructions = list(dis.get_instructions(code))
    for first, second in itertools.pairwise(instructions):
        if first.opname in _LOADS and second.opname in _ATTRIBUTE_LOADS:
            found.add((first.argval, second.argval))
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found |= _attributes_read(constant)
    return found


def source_of(function: Callable[..., Any]) -> str:
    """The source of ``function``, or its code's bytes and constants where none can be read."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        code = function.__code__
        return repr((code.co_code, code.co_consts, code.co_names))


def _values_read(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """The globals and closure variables ``function`` reads, and the attributes it reads of
    them, as ``(name, value)``; builtins and names it never binds are left out."""
    cells = dict(zip(function.__code__.co_freevars, function.__closure__ or (), strict=True))
    scope = function.__globals__

    def lookup(name: str) -> Any:
        if name in cells:
            try:
                return cells[name].cell_contents
            except ValueError:  # an empty cell
                return _MISSING
        return scope.get(name, _MISSING)

    for name in sorted(names_read(function.__code__)):
        value = lookup(name)
        if value is not _MISSING:
            yield name, value
    for name, attribute in sorted(_attributes_read(function.__code__)):
        owner = lookup(name)
        if isinstance(owner, types.ModuleType) and not _is_numba(owner):
            value = getattr(owner, attribute, _MISSING)
            if value is not _MISSING:
                yield f"{name}.{attribute}", value


_MISSING = object()


def _is_numba(value: Any) -> bool:
    """Whether ``value`` is part of numba's own API (the numba version in the checksum covers
    it; the simulator's objects differ from a GPU's, and must not change compiled kernels'
    keys)."""
    name = (
        value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "")
    )
    return isinstance(name, str) and (name == "numba" or name.startswith("numba."))


def device_function_of(value: Any) -> types.FunctionType | None:
    """The Python function of a numba device function (a dispatcher with ``py_func``)."""
    function = getattr(value, "py_func", None)
    return function if isinstance(function, types.FunctionType) else None


def _value_text(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return f"<module {value.__name__}>"
    if _is_numba(value) and not isinstance(value, numba_types.Type):
        return f"<numba {getattr(value, '__qualname__', type(value).__name__)}>"
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
        return f"<array {value.dtype} {value.shape} {digest}>"
    return stable_text(value)


def code_description(function: types.FunctionType) -> list[str]:
    """What decides the code of ``function``: its source, the values of the globals and closure
    variables it reads, and, through every device function it calls (by name, closure or
    ``module.attribute``, at any depth), theirs."""
    parts: list[str] = []
    seen: set[int] = set()
    pending = [("kernel", function)]
    while pending:
        label, current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        parts.append(f"{label}: {source_of(current)}")
        for name, value in _values_read(current):
            called = device_function_of(value)
            if called is not None:
                parts.append(f"{label}.{name} = <device function>")
                pending.append((f"{label}.{name}", called))
            else:
                parts.append(f"{label}.{name} = {_value_text(value)}")
    return parts


def environment_description() -> list[str]:
    """The versions and settings that change generated code: numbatune, numba, numba-cuda,
    the NVVM and driver versions on a GPU, and numba's code-generation settings."""
    from numba.cuda.core import config

    parts = [f"numbatune {__version__}"]
    for package in ("numba", "numba-cuda", "cuda-bindings"):
        try:
            parts.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{package} missing")
    parts += [f"{name}={getattr(config, name, None)!r}" for name in CODEGEN_SETTINGS]
    if not SIMULATOR:
        from numba.cuda.cudadrv import nvvm
        from numba.cuda.cudadrv.driver import driver

        parts.append(f"nvvm {nvvm.NVVM().get_version()}")
        parts.append(f"driver {driver.get_version()}")
    return parts


class KernelTemplate:
    """The user's kernel function, from which each variant's kernel is compiled."""

    def __init__(self, kernel: Any, name: str) -> None:
        self.function, self.jit_options = _unwrap(kernel, name)
        self.name = name
        self.signature = inspect.signature(self.function)
        self.names_read = frozenset(names_read(self.function.__code__))
        self._static_loops = unroll.has_static_loops(self.function)
        self._code_text: str | None = None

    def check_params(self, variants: Sequence[Variant], launch_reads: Set[str]) -> None:
        """Refuse parameters that neither the kernel nor the launch function reads.

        Such a parameter would silently change nothing.
        """
        unread = sorted({p for v in variants for p in v.params} - self.names_read - launch_reads)
        if unread:
            raise ValueError(
                f"autotune({self.name}): variant parameters {unread} are read neither by the "
                "kernel nor by the launch function; a parameter must be a global or closure "
                "variable the kernel uses, or a keyword argument of the launch function"
            )

    def code_key(self, variant: Variant) -> tuple[str, str]:
        """What of ``variant`` decides the kernel's code: the parameters the kernel reads and
        the jit options. Variants with the same code key compile to the same kernel (those
        that differ only in what the launch function reads share one compile)."""
        read = {name: value for name, value in variant.params.items() if name in self.names_read}
        return stable_text(read), stable_text(self.jit_options_of(variant))

    def jit_options_of(self, variant: Variant) -> dict[str, Any]:
        """The ``numba.cuda.jit`` options the variant's kernel is compiled with on a GPU."""
        return {**self.jit_options, **variant.jit}

    def code_text(self) -> str:
        """What decides the code of every variant's kernel but the variant itself: the kernel,
        the device functions it calls and the values they read (for compiled-kernel keys)."""
        if self._code_text is None:
            self._code_text = "\0".join(code_description(self.function))
        return self._code_text

    def specialise(self, variant: Variant) -> Any:
        """A new ``numba.cuda.jit`` dispatcher in which the variant's parameters are constants."""
        options = self.jit_options_of(variant)
        if SIMULATOR:  # the simulator takes few options
            options = {k: v for k, v in options.items() if k in SIMULATOR_JIT_OPTIONS}
        return cuda.jit(**options)(self.specialised_function(variant))

    def specialised_function(self, variant: Variant) -> types.FunctionType:
        """The kernel's Python function with the variant's parameters bound as its globals (and
        closure variables), its ``static_range`` loops written out."""
        function = self.function
        namespace = dict(function.__globals__)
        namespace.update(variant.params)
        closure = function.__closure__
        if closure is not None:
            closure = tuple(
                types.CellType(variant.params[name]) if name in variant.params else cell
                for name, cell in zip(function.__code__.co_freevars, closure, strict=True)
            )
        code = function.__code__
        if self._static_loops:
            code, closure = unroll.unrolled(function, namespace, closure)
        specialised = types.FunctionType(
            code, namespace, function.__name__, function.__defaults__, closure
        )
        specialised.__kwdefaults__ = function.__kwdefaults__
        specialised.__qualname__ = function.__qualname__
        specialised.__module__ = function.__module__
        specialised.__doc__ = function.__doc__
        return specialised

    def checksum(self, variants: Sequence[Variant], launch: Callable[..., Any]) -> str:
        """A digest of everything that decides what the variants compute and how fast.

        It covers the kernel's source, the values of the globals and closure variables it
        reads, the device functions it calls at any depth (:func:`code_description`), each
        variant's parameters and jit options, the launch function, and the versions and
        settings that change generated code (:func:`environment_description`). A stored result
        whose checksum differs is tuned again.
        """
        digest = hashlib.sha256()
        parts = [
            *environment_description(),
            stable_text({k: v for k, v in self.jit_options.items() if k in JIT_OPTIONS}),
            *code_description(self.function),
            f"launch: {source_of(launch)}",
            *(f"variant {v.label}" for v in variants),
        ]
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()[:32]


def _unwrap(kernel: Any, name: str) -> tuple[types.FunctionType, dict[str, Any]]:
    """The Python function and jit options behind a ``cuda.jit`` kernel or a plain function."""
    if isinstance(kernel, types.FunctionType):
        return kernel, {}
    function = getattr(kernel, "py_func", None)
    if not isinstance(function, types.FunctionType):
        raise TypeError(
            f"autotune({name}): expected a numba.cuda.jit kernel or a plain Python function, "
            f"got {type(kernel).__name__}"
        )
    if SIMULATOR:
        options = {"fastmath": kernel._fastmath, "debug": kernel._debug}
        is_device = kernel._device  # the simulator keeps these private
    else:
        options = dict(kernel.targetoptions)
        is_device = options.pop("device", False)
    if is_device:
        raise TypeError(
            f"autotune({name}): {name} is a device function (cuda.jit(device=True)); "
            "autotune kernels, which are launched from the host"
        )
    return function, {k: v for k, v in options.items() if not _is_default(k, v)}


#: Values of numba.cuda.jit's options that mean "as numba does by default". numba resolves
#: its defaults when a kernel is decorated (a GPU process sees lto=True, opt=True, ...) and its
#: simulator keeps only two options: a kernel's options are what differs from these, the same
#: in both, so that its checksum and compiled-kernel keys are too.
_DEFAULT_OPTIONS: dict[str, tuple[Any, ...]] = {
    "debug": (False, None),
    "fastmath": (False,),
    "opt": (True, None),
    "lineinfo": (False,),
    "launch_bounds": (None,),
    "lto": (True, None),
    "forceinline": (False,),
    "inline": ("never",),
    "shared_memory_carveout": (None,),
    "extensions": ([], (), None),
    "link": ((), [], None),
    "max_registers": (None,),
}


def _is_default(name: str, value: Any) -> bool:
    return value in _DEFAULT_OPTIONS.get(name, ())
