"""What numbatune needs of a kernel compiler: the seam between numbatune and numba-cuda.

The rest of numbatune touches a compiler's objects only through a :class:`KernelCompiler` and
the module that builds its kernels in compile workers, with no GPU (a :class:`Builds`).
"""

from __future__ import annotations

import abc
import enum
import types
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol


def installed_version(package: str) -> str:
    """The version of an installed package, ``"missing"`` of another."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


def package_version(package: str) -> str:
    """``"<package> <version>"``, for compilers' identities."""
    return f"{package} {installed_version(package)}"


@dataclass(frozen=True)
class Unwrapped:
    """The user's kernel, as a compiler reads it."""

    #: The Python function to specialise.
    function: types.FunctionType
    #: The compile options that differ from the compiler's defaults.
    jit_options: dict[str, Any]
    #: The argument types it was declared with (compiled for those alone); empty: any.
    signatures: tuple[Any, ...]
    #: Whether it is a device function (``cuda.jit(device=True)``), not a kernel.
    device: bool = False


@dataclass(frozen=True)
class Resources:
    """What the assembler reported for one kernel: registers and stack frame per thread, bytes
    spilled, and static shared memory per block."""

    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int


@dataclass(frozen=True)
class Built:
    """A compile worker's kernel: what :meth:`KernelCompiler.load` loads, and what its build saw."""

    payload: bytes
    resources: Resources | None
    #: The compiler's :meth:`~Builds.toolchain` in the worker.
    toolchain: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class LinkFailed:
    """A kernel whose code compiled but whose link to a binary (with its register cap) failed."""

    error: str


class Conversion(enum.Enum):
    """How a scalar argument's value gives one kernel parameter field."""

    #: The value itself.
    VALUE = "value"
    #: The bits of its float16 value, as an unsigned 16-bit integer.
    HALF_BITS = "half bits"
    #: Its real part.
    REAL = "real"
    #: Its imaginary part.
    IMAG = "imag"


@dataclass(frozen=True)
class ScalarParameters:
    """A scalar argument's kernel parameters: each one's ``struct`` letter and conversion."""

    fields: tuple[tuple[str, Conversion], ...]


class ArrayStructure(enum.Enum):
    """How an array argument is laid out as kernel parameters, each 8 bytes."""

    #: numba's array structure: two fields of zeros (meminfo, parent), the element count, the
    #: element size, the data pointer, then the shape and the strides in bytes.
    NUMBA = "numba"
    #: An MLIR memref descriptor (numba-cuda-mlir's): the data pointer twice (allocated,
    #: aligned), an offset of 0 elements, then the shape and the strides in elements.
    MEMREF = "memref"

    @property
    def head(self) -> int:
        """How many of its fields come before the shape."""
        return 5 if self is ArrayStructure.NUMBA else 3


@dataclass(frozen=True)
class ArrayParameters:
    """An array argument's kernel parameters, as the C extension packs them."""

    #: The size of one element, in bytes.
    itemsize: int
    ndim: int
    #: The layout the kernel was compiled for: ``C``, ``F`` or ``A`` (any).
    layout: str
    #: Whether the kernel takes it writable, and aligned (read-only arrays are left to the
    #: compiler's launch).
    mutable: bool
    aligned: bool
    structure: ArrayStructure = ArrayStructure.NUMBA


@dataclass(frozen=True)
class TupleParameters:
    """A tuple argument's kernel parameters: its items' (compiler types), in order."""

    items: tuple[Any, ...]


#: How one argument becomes kernel parameters (:attr:`LaunchTarget.parameters`).
Parameters = ScalarParameters | ArrayParameters | TupleParameters


@dataclass(frozen=True)
class LaunchTarget:
    """A compiled overload as the fast path launches it in the current context."""

    #: For each argument, its own type, the type the overload declares for it, and the type to
    #: plan it with (the one the compiler's launch passes it as), or None where the plan
    #: cannot convert it as that launch does.
    argtypes: tuple[tuple[Any, Any, Any], ...]
    #: The (offset, size) in bytes of each kernel parameter, as the driver reports them; None
    #: where the driver cannot say.
    layout: list[tuple[int, int]] | None
    #: The driver's handle (``CUfunction``) to launch it by.
    handle: int
    #: Whether it synchronises its grid (it must be launched cooperatively).
    cooperative: bool
    #: ``parameters(argtype, value)``: how an argument becomes kernel parameters (the value
    #: for what its type does not tell: Python ints of 64 unsigned bits); None: no plan.
    parameters: Callable[[Any, Any], Parameters | None]


class Builds(Protocol):
    """The compiler's module that builds its kernels in a compile worker, with no GPU."""

    def environment(self) -> list[str]:
        """The versions and settings that change the code it generates: part of every checksum."""

    def toolchain(self) -> tuple[str, ...]:
        """The versions that decide the code a build makes, the compiler's identity first: part
        of every compiled-kernel key."""

    def dumps_function(self, function: types.FunctionType) -> bytes:
        """A variant's specialised function pickled by value, with the device functions it
        calls; raises where it, or a value it reads, cannot be."""

    def loads_function(self, pickled: bytes) -> types.FunctionType:
        """(In a worker) what :meth:`dumps_function` pickled, its device functions rebuilt here."""

    def warm(self) -> None:
        """(In the compile workers' fork server) do the slow first steps of a build once, for
        the workers forked from it; start no threads."""

    def build(
        self,
        function: types.FunctionType,
        options: dict[str, Any],
        argtypes: tuple[Any, ...],
        cc: tuple[int, int],
        max_registers: tuple[int | None, ...] = (None,),
    ) -> list[Built | LinkFailed]:
        """(In a worker) compile ``function`` with ``options`` for ``argtypes`` and compute
        capability ``cc`` once, and link it per cap of ``max_registers`` (None: no cap): each kernel
        built, or :class:`LinkFailed`. Raises where it does not compile (the variants' error)."""


class KernelCompiler(abc.ABC):
    """A kernel compiler numbatune tunes the kernels of."""

    #: Its name, in identities and messages: the name of its package.
    name: str = ""
    #: The module that builds its kernels in compile workers.
    builds: Builds
    #: The format of its serialised kernels; part of the kernel store's keys.
    payload_version: int = 1

    @property
    def version(self) -> str:
        """Its version (``"missing"`` where it is not installed)."""
        return installed_version(self.name)

    def identity(self) -> str:
        """Its name and version: part of every checksum and compiled-kernel key."""
        return f"{self.name} {self.version}"

    @abc.abstractmethod
    def claims(self, kernel: Any) -> bool:
        """Whether ``kernel`` (a user's kernel, or a kernel object it made) is this compiler's."""

    @abc.abstractmethod
    def unwrap(self, kernel: Any) -> Unwrapped:
        """The function, options and declared signatures behind the user's ``kernel`` or a
        device function it calls."""

    @abc.abstractmethod
    def specialise(
        self, function: types.FunctionType, original: types.FunctionType, options: dict[str, Any]
    ) -> Any:
        """A new kernel object of ``function``, a variant's copy of ``original`` (the user's kernel,
        or a device function it calls: ``options`` then say so), compiled with ``options``."""

    def own_helper(self, device_function: Any) -> Any:
        """The version its kernels call of ``device_function``: another compiler's own of
        numbatune's helpers (:mod:`numbatune.intrinsics`, numba-cuda's); any other, itself."""
        return device_function

    @abc.abstractmethod
    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiler's types of ``args``, as ``kernel`` types them; with ``kernel`` None, of
        example arguments for ``numbatune compile`` (a host array typed as a device array)."""

    @abc.abstractmethod
    def compiled(self, kernel: Any, argtypes: tuple[Any, ...]) -> Any:
        """The overload of ``kernel`` compiled for ``argtypes``, or None; its ``bind()`` loads
        its code into the current context."""

    @abc.abstractmethod
    def add(self, kernel: Any, argtypes: tuple[Any, ...], compiled: Any, declared: int) -> None:
        """Compile ``kernel`` for ``argtypes`` (``compiled`` None), or add the ``compiled``
        overload a worker built or the store held; ``declared``: how many signatures the
        user's kernel was declared with (one: the kernel then takes no other)."""

    @abc.abstractmethod
    def launch_target(self, kernel: Any, args: tuple[Any, ...]) -> LaunchTarget | str:
        """What the fast path launches ``kernel``'s compiled overload for ``args`` by, or why it
        cannot here (a simulator, an unknown parameter layout, no overload, a debug kernel)."""

    @abc.abstractmethod
    def launch(
        self, kernel: Any, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any
    ) -> None:
        """Launch ``kernel`` on ``args`` with ``config`` (grid, block[, shared bytes]) on
        ``stream`` (the compiler's stream object or 0), through the compiler's own launch."""

    @abc.abstractmethod
    def serialise(self, compiled: Any) -> bytes:
        """A compiled overload as bytes (only what loading it takes)."""

    @abc.abstractmethod
    def load(self, payload: bytes, cc: tuple[int, int]) -> Any:
        """The overload :meth:`serialise` (or a build) made, for compute capability ``cc``; a
        ValueError where ``payload`` is not one, or holds no code for ``cc``."""

    @abc.abstractmethod
    def trial_payload(self, kernel: Any, argtypes: tuple[Any, ...]) -> bytes:
        """What the trial worker runs of ``kernel``, compiled for ``argtypes``: the overload
        serialised; under a simulator, the function pickled."""

    @abc.abstractmethod
    def run_trial(
        self,
        payload: bytes,
        args: tuple[Any, ...],
        config: tuple[Any, ...],
        cc: tuple[int, int] | None,
    ) -> None:
        """(In the trial worker) launch the kernel of ``payload`` (:meth:`trial_payload`, or a
        build's) once on ``args`` with ``config`` (grid, block[, shared bytes]) on the default
        stream. ``cc``: the device's compute capability (None under a simulator). Raises where
        the kernel does not load, or its launch fails."""
