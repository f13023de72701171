"""What numbatune needs of a kernel compiler: the seam between numbatune and numba-cuda.

Dispatch, the tune cache and tuning never touch a compiler's objects but through a
:class:`KernelCompiler`: it unwraps the user's kernel, compiles a variant's kernel object for
argument types (or adds one a worker built), types arguments, picks the compiled overload a call
takes, gives the compiled function the fast path launches, and launches through its own launch.
The kernel object a tuned kernel is made from chooses its compiler
(:func:`numbatune.compilers.compiler_for`); its :meth:`~KernelCompiler.identity` is part of
every checksum and compiled-kernel key.
"""

from __future__ import annotations

import abc
import types
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unwrapped:
    """The user's kernel, as a compiler reads it."""

    #: The Python function to specialise.
    function: types.FunctionType
    #: The compile options that differ from the compiler's defaults.
    jit_options: dict[str, Any]
    #: The argument types it was declared with (compiled for those alone); empty: any.
    signatures: tuple[Any, ...]


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

    @abc.abstractmethod
    def argument_types(self, kernel: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiler's types of ``args``, as ``kernel`` types them."""

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
