"""What numbatune needs of a kernel compiler: the seam between numbatune and numba-cuda.

Dispatch, the tune cache, tuning, compiling, trial runs and the fast path never touch a
compiler's objects but through a :class:`KernelCompiler`. It

- unwraps the user's kernel and specialises a variant's kernel object;
- compiles it for argument types here, or builds it in a compile worker (no GPU) to a binary
  this process loads (:meth:`~KernelCompiler.build`), and serialises and loads compiled
  kernels for the kernel store;
- types arguments and picks the compiled overload a call takes;
- runs a serialised kernel once in the trial worker (:meth:`~KernelCompiler.run_trial`);
- tells the fast path how each argument becomes kernel parameters
  (:meth:`~KernelCompiler.parameters`) and gives it the compiled function to launch;
- launches through its own launch.

The kernel object a tuned kernel is made from chooses its compiler
(:func:`numbatune.compilers.compiler_for`); its :meth:`~KernelCompiler.identity` is part of
every checksum and compiled-kernel key.
"""

from __future__ import annotations

import abc
import enum
import types
from dataclasses import dataclass
from importlib import metadata
from typing import Any


def installed_version(package: str) -> str:
    """The version of an installed package, ``"missing"`` of another."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


def package_version(package: str) -> str:
    """``"<package> <version>"`` (:func:`installed_version`), for compilers' identities."""
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


@dataclass(frozen=True)
class Resources:
    """What the assembler reported for one kernel: per thread registers and local memory
    (stack frame), bytes spilled, and static shared memory per block."""

    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int


@dataclass(frozen=True)
class Built:
    """A kernel built in a compile worker (:meth:`KernelCompiler.build`): its serialised form
    (what :meth:`KernelCompiler.load` loads) and what the build saw."""

    payload: bytes
    resources: Resources | None
    #: The compiler's :meth:`~KernelCompiler.toolchain` in the worker.
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
    """A scalar argument's kernel parameters: for each, its ``struct`` letter and how the
    value gives it."""

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
    """An array argument's kernel parameters: the array structure (numba's by default:
    :class:`ArrayStructure`), as the C extension packs it."""

    #: The size of one element, in bytes.
    itemsize: int
    ndim: int
    #: The layout the kernel was compiled for: ``C``, ``F`` or ``A`` (any).
    layout: str
    #: Whether the kernel takes it writable (read-only arrays are left to the compiler's launch).
    mutable: bool
    #: Whether the kernel takes it aligned.
    aligned: bool
    structure: ArrayStructure = ArrayStructure.NUMBA


@dataclass(frozen=True)
class TupleParameters:
    """A tuple argument's kernel parameters: those of its items, in order (each item given by
    its compiler type)."""

    items: tuple[Any, ...]


#: How one argument becomes kernel parameters (:meth:`KernelCompiler.parameters`).
Parameters = ScalarParameters | ArrayParameters | TupleParameters


class KernelCompiler(abc.ABC):
    """A kernel compiler numbatune tunes the kernels of."""

    #: Its name, in identities and messages.
    name: str = ""

    @property
    @abc.abstractmethod
    def version(self) -> str:
        """Its version (a new version compiles anew and tunes anew)."""

    def identity(self) -> str:
        """Its name and version: part of every checksum and compiled-kernel key."""
        return f"{self.name} {self.version}"

    def environment(self) -> list[str]:
        """The versions and settings of the compiler that change the code it generates: part
        of every checksum (a change tunes anew).

        Returns
        -------
        list of str
            One text each; by default its :meth:`identity` alone.
        """
        return [self.identity()]

    @abc.abstractmethod
    def claims(self, kernel: Any) -> bool:
        """Whether ``kernel`` (a user's kernel, or a kernel object this compiler made) is
        this compiler's."""

    @abc.abstractmethod
    def unwrap(self, kernel: Any, name: str) -> Unwrapped:
        """The function, options and declared signatures behind the user's ``kernel``.

        Raises
        ------
        TypeError
            ``kernel`` is of a kind that cannot be tuned (a device function, say), named
            ``name`` in the message.
        """

    @abc.abstractmethod
    def specialise(
        self, function: types.FunctionType, original: types.FunctionType, options: dict[str, Any]
    ) -> Any:
        """A new kernel object of ``function``, a variant's copy of ``original`` (the user's
        kernel, or a device function it calls: ``options`` then say so), compiled with
        ``options``."""

    @abc.abstractmethod
    def device_options(self, device_function: Any) -> dict[str, Any]:
        """The options of a device function the kernel calls (its copies get the same)."""

    def own_helper(self, device_function: Any) -> Any:
        """The version this compiler's kernels call of ``device_function``, a device function
        a kernel calls: for numbatune's own helpers (:mod:`numbatune.intrinsics`, written for
        numba-cuda) another compiler's; any other, itself."""
        return device_function

    @abc.abstractmethod
    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiler's types of ``args``, as ``kernel`` types them."""

    @abc.abstractmethod
    def example_types(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiler's types of example arguments for a compile ahead of time, with or
        without a GPU (``numbatune compile``): a host array stands for a device array of its
        dtype, rank and layout."""

    @abc.abstractmethod
    def compiled(self, kernel: Any, argtypes: tuple[Any, ...]) -> Any:
        """The overload of ``kernel`` compiled for ``argtypes``, or None."""

    @abc.abstractmethod
    def add(self, kernel: Any, argtypes: tuple[Any, ...], compiled: Any, declared: int) -> None:
        """Compile ``kernel`` for ``argtypes`` (``compiled`` None), or add the ``compiled``
        overload a worker built or the store held; ``declared``: how many signatures the
        user's kernel was declared with (one: the kernel then takes no other)."""

    @abc.abstractmethod
    def overload_for(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, str | None]:
        """The compiled overload a launch on ``args`` takes, and why the fast path cannot
        launch it (None where it can)."""

    @abc.abstractmethod
    def serialise(self, compiled: Any) -> bytes:
        """A compiled overload as bytes, for the kernel store and trial runs (without the
        intermediate code: only what loading it takes)."""

    @abc.abstractmethod
    def load(self, payload: bytes, cc: tuple[int, int]) -> Any:
        """The overload :meth:`serialise` made, for a device of compute capability ``cc``.

        Raises
        ------
        ValueError
            ``payload`` is not one, or holds no code for ``cc``.
        """

    @abc.abstractmethod
    def function_of(self, compiled: Any) -> Any:
        """The driver's function of a compiled overload in the current context (what the
        fast path launches and reads the parameter layout of)."""

    @abc.abstractmethod
    def launch(
        self, kernel: Any, args: tuple[Any, ...], config: tuple[Any, ...], stream: Any
    ) -> None:
        """Launch ``kernel`` on ``args`` with ``config`` (grid, block[, shared bytes]) on
        ``stream`` (the compiler's stream object or 0), through the compiler's own launch."""

    # -- compile workers ------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def payload_version(self) -> int:
        """The format of the compiler's serialised kernels (:meth:`serialise`, :meth:`build`);
        part of the kernel store's keys: kernels of another format are not loaded."""

    @abc.abstractmethod
    def toolchain(self) -> tuple[str, ...]:
        """The versions that decide the code a build makes, its :meth:`identity` first.

        Returns
        -------
        tuple of str
            One text per tool (the compiler, its code generator, its linker), part of every
            compiled-kernel key.
        """

    @abc.abstractmethod
    def pickle_function(self, function: types.FunctionType) -> bytes:
        """A kernel's Python function pickled by value, for a compile or trial worker
        (:meth:`unpickle_function`); the device functions it calls cross too.

        Parameters
        ----------
        function
            A variant's specialised function.

        Returns
        -------
        bytes
            The pickle.

        Raises
        ------
        Exception
            The function, or a value it reads, cannot be pickled.
        """

    @abc.abstractmethod
    def unpickle_function(self, pickled: bytes) -> types.FunctionType:
        """(In a worker) the function :meth:`pickle_function` pickled.

        Parameters
        ----------
        pickled
            What :meth:`pickle_function` returned.

        Returns
        -------
        function
            The Python function, with its device functions rebuilt in this process.
        """

    @abc.abstractmethod
    def warm_worker(self) -> None:
        """(In the fork server of compile workers) do the slow first steps of a build once,
        so that the workers forked from it start with them done. Start no threads: a fork
        does not carry them."""

    @abc.abstractmethod
    def build(
        self,
        function: types.FunctionType,
        options: dict[str, Any],
        argtypes: tuple[Any, ...],
        cc: tuple[int, int],
        max_registers: tuple[int | None, ...] = (None,),
    ) -> list[Built | LinkFailed]:
        """(In a compile worker, with no GPU) compile ``function`` for ``argtypes`` and a
        device of compute capability ``cc`` once, and link it once per register cap.

        Parameters
        ----------
        function
            The kernel's Python function (its loops written out).
        options
            The compile options (:meth:`numbatune.template.KernelTemplate.build_options`).
        argtypes
            The compiler's argument types.
        cc
            The target's compute capability.
        max_registers
            The register caps to link with, one kernel each (None: no cap).

        Returns
        -------
        list
            For each cap, in order, the kernel built, or :class:`LinkFailed`.

        Raises
        ------
        Exception
            The function does not compile (the variants' error).
        """

    @abc.abstractmethod
    def bind(self, compiled: Any) -> None:
        """Load a compiled overload's code into the current context now (else its first
        launch does).

        Parameters
        ----------
        compiled
            An overload :meth:`load` made.
        """

    # -- trial runs -----------------------------------------------------------------------

    @abc.abstractmethod
    def trial_payload(self, kernel: Any, argtypes: tuple[Any, ...]) -> bytes:
        """What the trial worker runs of ``kernel`` (:meth:`run_trial`).

        Parameters
        ----------
        kernel
            A kernel object :meth:`specialise` made, compiled for ``argtypes`` (under a
            simulator, which compiles nothing: any).
        argtypes
            The argument types of the overload to run.

        Returns
        -------
        bytes
            The overload serialised (:meth:`serialise`); under a simulator, the kernel's
            function pickled.
        """

    @abc.abstractmethod
    def run_trial(
        self,
        payload: bytes,
        args: tuple[Any, ...],
        config: tuple[Any, ...],
        cc: tuple[int, int] | None,
    ) -> None:
        """(In the trial worker) launch the kernel :meth:`trial_payload` gave once, on the
        default stream; the caller waits for it.

        Parameters
        ----------
        payload
            What :meth:`trial_payload` returned (or :meth:`build`'s payload).
        args
            The arguments, in this process's device memory.
        config
            ``(grid, block[, shared bytes])``.
        cc
            The device's compute capability (None under a simulator).

        Raises
        ------
        Exception
            The kernel does not load, or its launch fails.
        """

    # -- the fast path --------------------------------------------------------------------

    @abc.abstractmethod
    def fast_launch_unsupported(self) -> str | None:
        """Why the fast path cannot launch this compiler's kernels in this process (a
        simulator, a version whose parameter layout is not known), or None when it can."""

    @abc.abstractmethod
    def declared_types(self, compiled: Any) -> tuple[Any, ...]:
        """The argument types a compiled overload was compiled for.

        Parameters
        ----------
        compiled
            An overload (:meth:`overload_for`).

        Returns
        -------
        tuple
            The compiler's types, one per kernel argument.
        """

    @abc.abstractmethod
    def cooperative(self, compiled: Any) -> bool:
        """Whether a compiled overload synchronises its grid (it must be launched
        cooperatively)."""

    @abc.abstractmethod
    def planned_type(self, declared: Any, actual: Any) -> Any:
        """The type to plan an argument with, for a parameter declared ``declared``.

        Parameters
        ----------
        declared
            The parameter's type in the compiled overload (:meth:`declared_types`).
        actual
            The argument's own type (:meth:`argument_types`).

        Returns
        -------
        Any
            The type the compiler's launch passes the argument as, or None where the plan
            cannot convert it as the compiler's launch does.
        """

    @abc.abstractmethod
    def parameters(self, argtype: Any, value: Any) -> Parameters | None:
        """How an argument becomes kernel parameters.

        Parameters
        ----------
        argtype
            Its type (:meth:`planned_type`).
        value
            The argument (for values its type does not tell apart, such as Python ints that
            need 64 unsigned bits).

        Returns
        -------
        ScalarParameters, ArrayParameters, TupleParameters or None
            Its parameters; None where the fast path has no plan for it (the compiler's launch
            takes it).
        """

    @abc.abstractmethod
    def parameter_layout(self, function: Any) -> list[tuple[int, int]] | None:
        """The (offset, size) in bytes of each kernel parameter of a compiled function, as
        the driver reports them; None where the driver cannot say.

        Parameters
        ----------
        function
            What :meth:`function_of` gave.
        """

    @abc.abstractmethod
    def function_handle(self, function: Any) -> int:
        """The driver's handle (``CUfunction``) the fast path launches a compiled function
        by, in the current context.

        Parameters
        ----------
        function
            What :meth:`function_of` gave.
        """
