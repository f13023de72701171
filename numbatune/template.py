"""The user's kernel as a template: specialised on each variant's constants, and checksummed.

numba freezes globals at compile time, so compiling the kernel's function again with a variant's
names rebound makes them constants (``cuda.shared.array(shape=TPB, ...)``, ``range(TPB)``), in
the device functions it calls at any depth too. The checksum decides whether a stored result
still holds.
"""

from __future__ import annotations

import builtins
import difflib
import hashlib
import inspect
import types
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

from numbatune import references, unroll
from numbatune._version import __version__
from numbatune.arrays import SIMULATOR
from numbatune.compilers import COMPILERS, KernelCompiler, compiler_for
from numbatune.references import code_description, source_of
from numbatune.values import stable_text
from numbatune.variants import LINK_OPTIONS, SIMULATOR_JIT_OPTIONS, Variant, grouped


def environment_description(compiler: KernelCompiler) -> list[str]:
    """The versions and settings that change generated code: numbatune's version and the
    kernel compiler's (:meth:`~numbatune.compilers.base.Builds.environment`)."""
    return [f"numbatune {__version__}", *compiler.builds.environment()]


class KernelTemplate:
    """The user's kernel function, from which each variant's kernel is compiled by the
    compiler the kernel object chooses (:func:`numbatune.compilers.compiler_for`)."""

    def __init__(self, kernel: Any, name: str) -> None:
        #: The compiler of the kernel's variants.
        self.compiler = compiler_for(kernel, name)
        unwrapped = self.compiler.unwrap(kernel)
        if unwrapped.device:
            raise TypeError(
                f"autotune({name}): {name} is a device function (cuda.jit(device=True)); "
                "autotune kernels, which are launched from the host"
            )
        self.function, self.jit_options = unwrapped.function, unwrapped.jit_options
        self.signatures = unwrapped.signatures
        self.name = name
        self.signature = inspect.signature(self.function)
        self._functions = references.reachable(self.function)
        self._check_callees()
        #: Every name the kernel and its device functions read as globals or closure variables.
        self.names_read = frozenset(
            name for f in self._functions for name in references.names_read(f.__code__)
        )
        self._code_text: str | None = None
        self._device_codes: dict[int, tuple[Any, str]] = {}

    def _check_callees(self) -> None:
        """Refuse a device function of another kernel compiler than the kernel's, whose calls
        it types as an unknown object (numbatune's own helpers are swapped for its own)."""
        for function in self._functions:
            for callee in references.callees(function):
                own = self.compiler.own_helper(callee.dispatcher)
                other = next(
                    (c for c in COMPILERS if c is not self.compiler and c.claims(own)), None
                )
                if other is not None:
                    raise TypeError(
                        f"autotune({self.name}): {function.__qualname__} calls {callee.label}, "
                        f"a {other.name} device function; a {self.compiler.name} kernel can "
                        f"call only {self.compiler.name}'s (make it with "
                        f"{self.compiler.name}'s cuda.jit(device=True))"
                    )

    def check_params(self, variants: Sequence[Variant], used_elsewhere: Set[str]) -> None:
        """Refuse parameters used neither by the kernel, its device functions nor
        ``used_elsewhere`` (the launch and valid functions), and those the kernel assigns
        itself (its variants would not change them: a wrong variant could win)."""
        names = {p for v in variants for p in v.params}
        for function in self._functions:
            assigned = references.assignments(function.__code__)
            for name in sorted(names & set(assigned)):
                raise ValueError(
                    f"autotune({self.name}): {function.__qualname__} assigns {name} at line "
                    f"{assigned[name]}, a variant parameter: every variant would use that value "
                    f"and launch blocks that do not match it. Remove the assignment (keep {name} "
                    "a module global or closure variable; each variant sets it)"
                )
        unused = sorted(names - self.names_read - used_elsewhere)
        if unused:
            read = self._globals_read()
            by_case = {name.lower(): name for name in read}
            parts = []
            for name in unused:
                close = difflib.get_close_matches(name.lower(), by_case, n=1)
                parts.append(f"{name} (did you mean {by_case[close[0]]}?)" if close else name)
            raise ValueError(
                f"autotune({self.name}): variant parameters {', '.join(parts)} are used neither "
                "by the kernel, the device functions it calls, the launch function nor valid; "
                "a parameter must be a global or closure variable the kernel reads, or a "
                "keyword argument of the launch or valid function. The kernel reads the "
                f"globals {', '.join(read) or '(none)'}"
            )

    def _globals_read(self) -> list[str]:
        """The globals and closure variables the kernel and its device functions read that
        could be parameters (no modules, builtins nor numba's), sorted."""
        values = references.values_in(self._functions, self.names_read)
        return sorted(
            name
            for name in self.names_read
            if (name not in values and not hasattr(builtins, name))
            or (
                name in values
                and not isinstance(values[name], types.ModuleType)
                and not references.is_numba(values[name])
            )
        )

    def written_values(self, names: Iterable[str], also: Iterable[Any] = ()) -> dict[str, Any]:
        """The value each of ``names`` has as written, as a global or closure variable of the
        kernel, else a device function it calls, else one of ``also`` (the launch and valid
        functions); a name none gives a value is left out."""
        functions = [*self._functions, *(f for f in also if isinstance(f, types.FunctionType))]
        return references.values_in(functions, names)

    def default_variant(self, variants: Sequence[Variant]) -> Variant | None:
        """The variant equal to the kernel as written: each of its parameters that the kernel
        reads has the value the kernel's module (or closure) gives it; None if none is."""
        for variant in variants:
            written = [
                (value, references.lookup(self.function, name))
                for name, value in variant.params.items()
                if name in self.names_read
            ]
            if all(stable_text(v) == stable_text(module) for v, module in written):
                return variant
        return None

    def code_key(self, variant: Variant) -> tuple[str, str]:
        """What of ``variant`` decides the kernel's code: the parameters the kernel and its
        device functions read, and the jit options. Variants of one code key share a kernel."""
        return self._key(variant, self.jit_options_of(variant))

    def by_kernel(self, variants: Sequence[Variant]) -> list[list[Variant]]:
        """``variants`` grouped by the kernel they compile to (the same :meth:`code_key`), the
        groups and their members in the order met."""
        return list(grouped(variants, self.code_key).values())

    def build_key(self, variant: Variant) -> tuple[str, str]:
        """What of ``variant`` decides its kernel's compile to PTX: its :meth:`code_key` less the
        link-only jit options. Kernels of one build key build together: one compile, a link each."""
        return self._key(variant, self.build_options(variant))

    def build_options(self, variant: Variant) -> dict[str, Any]:
        """The variant's jit options (:meth:`jit_options_of`) less those only linking reads."""
        return {k: v for k, v in self.jit_options_of(variant).items() if k not in LINK_OPTIONS}

    def _key(self, variant: Variant, options: Mapping[str, Any]) -> tuple[str, str]:
        read = {name: value for name, value in variant.params.items() if name in self.names_read}
        return stable_text(read) + self._code_of(read), stable_text(options)

    def variant_text(self, variant: Variant) -> str:
        """The variant as the checksum and the sharing key see it: its label, and the code of
        the device functions among its parameters, which it only names."""
        return f"variant {variant.label}{self._code_of(variant.params)}"

    def _code_of(self, params: Mapping[str, Any]) -> str:
        """A digest of the code of each device function among a variant's ``params``, as values
        or in tuples, lists and dicts at any depth (their names are all its label says)."""
        codes = {
            name: " ".join(self._device_code(f) for _, f in references.device_functions_in(value))
            for name, value in params.items()
        }
        return "".join(f" {name}: {codes[name]}" for name in sorted(codes) if codes[name])

    def _device_code(self, value: Any) -> str:
        """A digest of :func:`code_description` of ``value``, a device function, made once;
        "" for any other value."""
        function = references.device_function_of(value)
        if function is None:
            return ""
        known = self._device_codes.get(id(value))
        if known is None:  # kept with the value, so that its id is not another's
            text = "\0".join(code_description(function, device=True))
            known = (value, hashlib.sha256(text.encode()).hexdigest()[:32])
            self._device_codes[id(value)] = known
        return known[1]

    def by_build(self, variants: Sequence[Variant]) -> list[list[list[Variant]]]:
        """``variants`` grouped by kernel (:meth:`by_kernel`), the kernels grouped by their
        :meth:`build_key`, in the order met."""
        builds = grouped(self.by_kernel(variants), lambda members: self.build_key(members[0]))
        return list(builds.values())

    def jit_options_of(self, variant: Variant) -> dict[str, Any]:
        """The ``numba.cuda.jit`` options the variant's kernel is compiled with on a GPU."""
        return {**self.jit_options, **variant.jit}

    def code_text(self) -> str:
        """What decides every variant's kernel code but the variant: the kernel, the device
        functions it calls and the values they read (for compiled-kernel keys)."""
        if self._code_text is None:
            self._code_text = "\0".join(code_description(self.function))
        return self._code_text

    def specialise(self, variant: Variant, function: types.FunctionType) -> Any:
        """A new ``numba.cuda.jit`` dispatcher of ``function``, the variant's
        :meth:`specialised_function`, in which the variant's parameters are constants."""
        options = self.jit_options_of(variant)
        if SIMULATOR:  # the simulator takes few options
            options = {k: v for k, v in options.items() if k in SIMULATOR_JIT_OPTIONS}
        return self.compiler.specialise(function, self.function, options)

    def specialised_function(self, variant: Variant, write_out: bool = True) -> types.FunctionType:
        """The kernel's function with the variant's parameters bound as its globals and closure
        variables, calling device functions specialised likewise, its ``static_range`` loops
        written out unless ``write_out`` is false (a compile worker does it then)."""
        specialiser = _Specialiser(variant.params, self.names_read, self.compiler)
        return specialiser.function(self.function, write_out)

    def written_out_size(self, variant: Variant) -> int:
        """How many statements the variant's kernel and device functions have, their loops
        written out (0 when none has any): the larger, the longer its compile."""
        return sum(unroll.written_out_size(f, variant.params) for f in self._functions)

    def checksum(self, variants: Sequence[Variant], launch: Callable[..., Any]) -> str:
        """A digest of everything that decides what the variants compute and how fast.

        The kernel's code and the values it reads, with its device functions at any depth
        (:func:`code_description`), its jit options and signatures, each variant
        (:meth:`variant_text`), the launch function and the functions of its package it calls
        (:func:`numbatune.references.helpers`), and the versions and settings that change
        generated code. A stored result whose checksum differs is tuned again.
        """
        parts = [
            *environment_description(self.compiler),
            stable_text(self.jit_options),
            repr(tuple(self.signatures)),
            *code_description(self.function),
            f"launch: {source_of(launch)}",
            *(
                f"launch helper {h.__qualname__}: {source_of(h)}"
                for h in references.helpers(launch)
            ),
            *(self.variant_text(v) for v in variants),
        ]
        return hashlib.sha256("".join(f"{part}\0" for part in parts).encode()).hexdigest()[:32]


class _Specialiser:
    """Copies of a kernel and of the device functions it reaches that read any of ``params``,
    with the parameters bound and the copies calling each other."""

    def __init__(
        self, params: Mapping[str, Any], names_read: Set[str], compiler: KernelCompiler
    ) -> None:
        self._params = dict(params)
        self._compiler = compiler
        self._relevant = set(params) & names_read
        self._copies: dict[int, Any] = {}
        self._affected: dict[int, bool] = {}

    def _needs_copy(self, function: types.FunctionType) -> bool:
        """Whether ``function``, or a device function it reaches, reads a parameter or calls a
        numbatune helper the compiler has its own version of."""
        key = id(function)
        if key not in self._affected:
            self._affected[key] = False  # a recursive call does not make it affected
            own = bool(references.names_read(function.__code__) & self._relevant)
            called = any(
                self._compiler.own_helper(c.dispatcher) is not c.dispatcher
                or self._needs_copy(c.function)
                for c in references.callees(function)
            )
            self._affected[key] = own or called
        return self._affected[key]

    def _device_function(self, dispatcher: Any) -> Any:
        """``dispatcher`` itself (the compiler's own version of numbatune's helpers), or a
        specialised copy where its code reads a parameter or calls such a helper."""
        dispatcher = self._compiler.own_helper(dispatcher)
        function = references.device_function_of(dispatcher)
        if function is None or not self._needs_copy(function):
            return dispatcher
        key = id(function)
        if key not in self._copies:
            options = {"device": True, **self._compiler.unwrap(dispatcher).jit_options}
            copy = self.function(function)
            self._copies[key] = self._compiler.specialise(copy, function, options)
        return self._copies[key]

    def function(self, function: types.FunctionType, write_out: bool = True) -> types.FunctionType:
        """A copy of ``function`` with the parameters and specialised callees bound, and its
        ``static_range`` loops written out if ``write_out``."""
        proxies: dict[str, dict[str, Any]] = {}
        rebound: dict[str, Any] = {}
        for callee in references.callees(function):
            replacement = self._device_function(callee.dispatcher)
            if replacement is callee.dispatcher:
                continue
            if callee.attribute is None:
                rebound[callee.name] = replacement
            else:
                proxies.setdefault(callee.name, {})[callee.attribute] = replacement
        for name, replaced in proxies.items():
            module = references.lookup(function, name)
            read = {
                chain
                for other, chain in references.attributes_read(function.__code__)
                if references.lookup(function, other) is module
            }
            rebound[name] = _proxy_module(module, read, replaced)
        free = function.__code__.co_freevars
        namespace = {**function.__globals__, **self._params}
        namespace.update({name: value for name, value in rebound.items() if name not in free})
        bound = {**rebound, **self._params}
        cells = zip(free, function.__closure__ or (), strict=True)
        closure = function.__closure__ and tuple(
            types.CellType(bound[name]) if name in bound else cell for name, cell in cells
        )
        copy = unroll.function_with(function, function.__code__, namespace, closure)
        return unroll.written_out(copy) if write_out else copy


def _proxy_module(module: Any, read: Set[str], replaced: Mapping[str, Any]) -> types.ModuleType:
    """A module standing in for ``module`` in a function that reads its chains of attributes
    ``read`` (dotted: ``sub.helper``), the chains ``replaced`` names reaching their replacement
    (through stand-ins of the modules on the way)."""
    proxy = types.ModuleType(f"{module.__name__}.numbatune_variant")
    for first in {chain.partition(".")[0] for chain in read}:
        if hasattr(module, first):
            setattr(proxy, first, getattr(module, first))
    below: dict[str, dict[str, Any]] = {}
    for chain, value in replaced.items():
        first, _, rest = chain.partition(".")
        if rest:
            below.setdefault(first, {})[rest] = value
        else:
            setattr(proxy, first, value)
    for first, inner in below.items():
        chains = {rest for head, _, rest in (c.partition(".") for c in read) if head == first}
        setattr(proxy, first, _proxy_module(getattr(module, first), chains - {""}, inner))
    return proxy
