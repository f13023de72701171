"""What a kernel's code refers to: the names it reads and writes, the values behind them, and
the device functions it calls at any depth (by name, closure or ``module.attribute``), from
which numbatune specialises them all on a variant's constants, checksums what decides the code,
and tells which arguments the kernel uses as arrays.
"""

from __future__ import annotations

import ast
import builtins
import dis
import functools
import hashlib
import inspect
import sys
import textwrap
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types as numba_types

from numbatune.values import is_integer, stable_text
from numbatune.variants import grouped

_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"}
_STORES = {"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"}
_ATTRIBUTE_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}
_MISSING = object()


def nested_codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code objects nested in it."""
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from nested_codes(constant)


def names_read(code: types.CodeType) -> set[str]:
    """Global and free-variable names a function's code (and the code nested in it) reads (not
    attribute names, ``module.NAME``: rebinding them would change nothing)."""
    return {
        instruction.argval
        for nested in nested_codes(code)
        for instruction in dis.get_instructions(nested)
        if instruction.opname in _LOADS
    }


def assignments(code: types.CodeType) -> dict[str, int]:
    """The names a function's code assigns (locals, globals, cells), each with its first line."""
    found: dict[str, int] = {}
    for nested in nested_codes(code):
        line = nested.co_firstlineno
        for instruction in dis.get_instructions(nested):
            line = _line_of(instruction) or line
            if instruction.opname in _STORES:
                found.setdefault(instruction.argval, line)
    return found


def _line_of(instruction: dis.Instruction) -> int | None:
    """The source line an instruction starts, if it starts one (Python 3.10 to 3.13)."""
    line = getattr(instruction, "line_number", None)  # 3.13
    if line is None and type(instruction.starts_line) is int:
        line = instruction.starts_line
    return line


def attributes_read(code: types.CodeType) -> set[tuple[str, str]]:
    """``(name, attributes)`` for each chain of attributes the code reads of a global or free
    variable ``name``, ``attributes`` dotted (``pkg.sub.N``: ``("pkg", "sub.N")``)."""
    found = set()
    for nested in nested_codes(code):
        chain: list[str] = []  # code ends in a return or a jump, never in a chain
        for instruction in dis.get_instructions(nested):
            if chain and instruction.opname in _ATTRIBUTE_LOADS:
                chain.append(instruction.argval)
                continue
            if len(chain) > 1:
                found.add((chain[0], ".".join(chain[1:])))
            chain = [instruction.argval] if instruction.opname in _LOADS else []
    return found


def lookup(function: types.FunctionType, name: str) -> Any:
    """The value ``function`` sees for the global or free variable ``name``, or ``_MISSING``."""
    if name in function.__code__.co_freevars:
        cell = function.__closure__[function.__code__.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:  # an empty cell
            return _MISSING
    return function.__globals__.get(name, _MISSING)


def values_in(functions: Iterable[types.FunctionType], names: Iterable[str]) -> dict[str, Any]:
    """The value each of ``names`` has for the first of ``functions`` that gives it one
    (:func:`lookup`); names none of them gives one are left out."""
    functions = list(functions)
    values = {}
    for name in names:
        found = (lookup(function, name) for function in functions)
        value = next((v for v in found if v is not _MISSING), _MISSING)
        if value is not _MISSING:
            values[name] = value
    return values


def _through_modules(value: Any, attributes: str) -> tuple[str, Any]:
    """How far a chain of ``attributes`` (dotted) read of ``value`` goes through modules
    (other than numba's), and the value it reaches there: ``("sub.N", 10)`` for ``pkg`` and
    ``"sub.N"``; ``""`` where ``value`` is no such module."""
    done: list[str] = []
    for attribute in attributes.split("."):
        if not isinstance(value, types.ModuleType) or is_numba(value):
            break
        value = getattr(value, attribute, _MISSING)
        if value is _MISSING:
            return "", _MISSING
        done.append(attribute)
    return ".".join(done), value


def values_read(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of the globals and closure variables ``function`` reads (not
    builtins), and of what it reads through modules (not numba's) as attributes (``pkg.sub.N``)."""
    for name in sorted(names_read(function.__code__)):
        value = lookup(function, name)
        if value is not _MISSING:
            yield name, value
    found: dict[str, Any] = {}
    for name, attributes in attributes_read(function.__code__):
        path, value = _through_modules(lookup(function, name), attributes)
        if path:
            found[f"{name}.{path}"] = value
    for label in sorted(found):
        yield label, found[label]


#: The packages whose API kernels use (their versions are in the checksum).
_COMPILER_PACKAGES = ("numba", "numba_cuda_mlir")


def is_numba(value: Any) -> bool:
    """Whether ``value`` is part of numba's own API, or numba-cuda-mlir's (the checksum has the
    compiler's version; the simulator's objects differ from a GPU's, and must not change keys)."""
    name = (
        value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "")
    )
    return isinstance(name, str) and name.partition(".")[0] in _COMPILER_PACKAGES


def _is_type(value: Any) -> bool:
    """Whether ``value`` is a numba type (``float32``), numba-cuda's or numba-cuda-mlir's
    (whose types are its own): the checksum writes its name, which tells types apart."""
    mlir_types = sys.modules.get("numba_cuda_mlir.numba_cuda.types")
    return isinstance(value, numba_types.Type) or (
        mlir_types is not None and isinstance(value, mlir_types.Type)
    )


def device_function_of(value: Any) -> types.FunctionType | None:
    """The Python function of a numba device function (a dispatcher with ``py_func``)."""
    function = getattr(value, "py_func", None)
    return function if isinstance(function, types.FunctionType) else None


def device_functions_in(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """The device functions ``value`` is, or holds in tuples, lists and dict values at any
    depth (dicts in their keys' :func:`stable_text` order), each with where it lies in
    ``value``, after ``where``: ``""`` for the value itself, ``[0]``, ``['first'][1]``."""
    if device_function_of(value) is not None:
        yield where, value
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            yield from device_functions_in(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key in sorted(value, key=stable_text):
            yield from device_functions_in(value[key], f"{where}[{stable_text(key)}]")


@dataclass(frozen=True)
class Callee:
    """A device function a caller reaches by ``name`` (a global or closure variable) or by
    ``name.attribute`` (through modules: ``pkg.sub.helper``)."""

    name: str
    attribute: str | None
    dispatcher: Any

    @property
    def label(self) -> str:
        """How the caller names it: ``name`` or ``name.attribute``."""
        return self.name if self.attribute is None else f"{self.name}.{self.attribute}"

    @property
    def function(self) -> types.FunctionType:
        function = device_function_of(self.dispatcher)
        assert function is not None
        return function


def callees(function: types.FunctionType) -> list[Callee]:
    """The device functions ``function`` calls, and how it reaches them."""
    found = []
    for label, value in values_read(function):
        if device_function_of(value) is not None:
            name, _, attribute = label.partition(".")
            found.append(Callee(name, attribute or None, value))
    return found


def reachable(function: types.FunctionType) -> list[types.FunctionType]:
    """``function`` and every device function it calls, at any depth, each once."""
    seen: dict[int, types.FunctionType] = {}
    pending = [function]
    while pending:
        current = pending.pop()
        if id(current) not in seen:
            seen[id(current)] = current
            pending += [callee.function for callee in callees(current)]
    return list(seen.values())


def source_of(function: Callable[..., Any]) -> str:
    """The source of a function (of a lambda, the lambda alone; of a ``functools.partial`` or
    callable object, of what it calls, with its bound arguments), or its code's bytes and
    constants where no source can be read."""
    target = getattr(function, "func", None)
    if target is not None and callable(target):  # functools.partial
        bound = stable_text((tuple(function.args), dict(function.keywords)))
        return f"{source_of(target)} bound {bound}"
    if not isinstance(function, types.FunctionType | types.MethodType | type):
        function = type(function)  # a callable object: its class
    try:
        if function.__name__ == "<lambda>":
            return _lambda_source(function)
        return inspect.getsource(function)
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        if code is None:
            return stable_text(function)
        return repr((code.co_code, code.co_consts, code.co_names))


def _lambda_source(function: types.FunctionType | types.MethodType) -> str:
    """The text of the lambdas that begin on ``function``'s first line with its parameters
    (several only where one line holds two such); its source lines where its file does not parse."""
    lines, _ = inspect.findsource(function)
    source = "".join(lines)
    parameters = list(inspect.signature(function).parameters)
    texts = [
        ast.get_source_segment(source, node) or ""
        for node in _lambdas(source).get(function.__code__.co_firstlineno, [])
        if [a.arg for a in _parameters(node.args)] == parameters
    ]
    return "\n".join(texts) or inspect.getsource(function)


@functools.lru_cache(maxsize=16)
def _lambdas(source: str) -> dict[int, list[ast.Lambda]]:
    """The lambdas of a module's ``source`` by the line each begins on (parsed once for all its
    lambdas: kernels' options often are)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    lambdas = (node for node in ast.walk(tree) if isinstance(node, ast.Lambda))
    return grouped(lambdas, lambda node: node.lineno)


def _parameters(arguments: ast.arguments) -> list[ast.arg]:
    """A lambda's parameters, in the order its signature lists them."""
    starred = [arguments.vararg] if arguments.vararg else []
    keywords = [arguments.kwarg] if arguments.kwarg else []
    return [*arguments.posonlyargs, *arguments.args, *starred, *arguments.kwonlyargs, *keywords]


def _undecorated(source: str) -> str:
    """A function's (or class's) source less its decorators (``source`` where it does not parse)."""
    try:
        node = ast.parse(textwrap.dedent(source)).body[0]
    except (SyntaxError, IndexError):
        return source
    if not getattr(node, "decorator_list", None):
        return source
    return "".join(source.splitlines(keepends=True)[node.lineno - 1 :])


def helpers(function: Callable[..., Any]) -> list[types.FunctionType]:
    """The plain Python functions of its own top-level package (not libraries') that
    ``function`` (a function, ``functools.partial`` or callable object) calls, by name, closure
    or ``module.attribute``, at any depth, each once, in a fixed order."""
    while callable(getattr(function, "func", None)):  # functools.partial
        function = function.func  # type: ignore[union-attr]
    if not isinstance(function, types.FunctionType):
        function = inspect.getattr_static(type(function), "__call__", None)  # an object's
    if not isinstance(function, types.FunctionType):
        return []
    package = (function.__module__ or "").partition(".")[0]
    seen, found, pending = {id(function)}, [], [function]
    while pending:
        for _, value in values_read(pending.pop()):
            if (
                isinstance(value, types.FunctionType)
                and id(value) not in seen
                and (value.__module__ or "").partition(".")[0] == package
            ):
                seen.add(id(value))
                found.append(value)
                pending.append(value)
    return found


def value_text(value: Any) -> str:
    """A value as the checksum sees it: :func:`stable_text`, with modules and numba's API by
    name, device functions and arrays by a digest of their code and contents."""
    function = device_function_of(value)
    if function is not None:
        digest = hashlib.sha256(source_of(function).encode()).hexdigest()[:16]
        return f"<device function {function.__qualname__} {digest}>"
    if isinstance(value, types.ModuleType):
        return f"<module {value.__name__}>"
    if is_numba(value) and not _is_type(value):
        return f"<numba {getattr(value, '__qualname__', type(value).__name__)}>"
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
        return f"<array {value.dtype} {value.shape} {digest}>"
    return stable_text(value)


def code_description(function: types.FunctionType, device: bool = False) -> list[str]:
    """What decides the code of ``function``, a kernel (a device function if ``device``): its
    source, the values of the globals and closure variables it reads, and those of every device
    function it calls or reads in tuples, lists and dicts (:func:`device_functions_in`), at any
    depth. A kernel's source is taken without its decorators (``autotune``'s options change no
    code; its jit options and signatures count on their own); a device function's keeps its
    ``cuda.jit(device=True, ...)``, whose options change its code."""
    parts: list[str] = []
    seen: set[int] = set()
    pending = [("device" if device else "kernel", function)]
    while pending:
        label, current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        source = source_of(current)
        if current is function and not device:
            source = _undecorated(source)
        parts.append(f"{label}: {source}")
        for name, value in values_read(current):
            called = device_function_of(value)
            if called is not None:
                parts.append(f"{label}.{name} = <device function>")
                pending.append((f"{label}.{name}", called))
            else:
                parts.append(f"{label}.{name} = {value_text(value)}")
                pending += [
                    (f"{label}.{name}{where}", device_function_of(held))
                    for where, held in device_functions_in(value)
                ]
    return parts


#: Attributes only arrays have, among those kernels read.
_ARRAY_ATTRIBUTES = {"shape", "size", "ndim", "strides", "dtype"}


def _parsed(function: types.FunctionType) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None


def array_parameters(function: types.FunctionType) -> dict[str, str]:
    """The parameters the kernel indexes (``a[i]``: arrays or tuples) or reads array attributes
    of (``a.shape``: arrays), by name, with how; empty where its source cannot be read."""
    tree = _parsed(function)
    if tree is None:
        return {}
    parameters = set(inspect.signature(function).parameters)
    uses: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _ARRAY_ATTRIBUTES:
            target, how = node.value, f".{node.attr}"
        elif isinstance(node, ast.Subscript):
            target, how = node.value, "indexed"
        else:
            continue
        named = isinstance(target, ast.Name) and target.id in parameters
        if named and (how != "indexed" or target.id not in uses):
            uses[target.id] = how
    return uses


@dataclass(frozen=True)
class ElementUse:
    """How a kernel's own code uses the elements of an array parameter: whether it reads them,
    writes them, and with how many indices (``a[i, j]``: 2). A use not followed (passed to a
    function, such as an atomic, a view or slice taken, an index not an integer for certain:
    :class:`_Indices`, the name rebound) counts as reading and writing."""

    reads: bool = False
    writes: bool = False
    indices: frozenset[int] = frozenset()

    def __or__(self, other: ElementUse) -> ElementUse:
        return ElementUse(
            self.reads or other.reads, self.writes or other.writes, self.indices | other.indices
        )

    def rerun_changes_nothing(self, ndim: int, records: bool) -> bool:
        """Whether a run of the kernel can neither see what an earlier run wrote into an array
        of ``ndim`` dimensions used this way nor change what a later one reads: only read, or
        only written, element by element (an element of a record array is a view)."""
        elements = all(count >= ndim for count in self.indices) and not records
        return elements and not (self.reads and self.writes)


_UNFOLLOWED = ElementUse(reads=True, writes=True)


def element_uses(function: types.FunctionType) -> dict[str, ElementUse]:
    """How the kernel's body uses each parameter's elements (:class:`ElementUse`); empty where
    its source cannot be read."""
    tree = _parsed(function)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return {}
    parameters = set(inspect.signature(function).parameters)
    body = tree.body[0].body  # not the decorators: their lambdas name the parameters too
    parents = {
        child: node
        for statement in body
        for node in ast.walk(statement)
        for child in ast.iter_child_nodes(node)
    }
    indices = _Indices(device_function_of(function) or function, parameters, body, parents)
    uses = dict.fromkeys(parameters, ElementUse())
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and node.id in parameters:
                uses[node.id] |= _element_use(node, parents, indices)
    return uses


def _element_use(name: ast.Name, parents: dict[ast.AST, ast.AST], indices: _Indices) -> ElementUse:
    """What one occurrence of an array parameter's name does with its elements."""
    parent = parents.get(name)
    if not isinstance(name.ctx, ast.Load):
        return _UNFOLLOWED
    if isinstance(parent, ast.Attribute) and parent.attr in _ARRAY_ATTRIBUTES:
        return ElementUse()
    if isinstance(parent, ast.Call) and _is_len(parent, name):
        return ElementUse()
    if not (isinstance(parent, ast.Subscript) and parent.value is name):
        return _UNFOLLOWED
    outer, count = parent, 0
    while True:  # a[i][j]: one element access of two indices
        index = outer.slice
        elements = index.elts if isinstance(index, ast.Tuple) else [index]
        if not all(indices.is_element(element) for element in elements):
            return _UNFOLLOWED
        count += len(elements)
        above = parents.get(outer)
        if not (isinstance(above, ast.Subscript) and above.value is outer):
            break
        outer = above
    if isinstance(outer.ctx, ast.Load):
        return ElementUse(reads=True, indices=frozenset({count}))
    if isinstance(outer.ctx, ast.Store):
        changed = isinstance(parents.get(outer), ast.AugAssign)  # a[i] += 1 reads a[i] too
        return ElementUse(reads=changed, writes=True, indices=frozenset({count}))
    return _UNFOLLOWED


def _is_len(call: ast.Call, name: ast.Name) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "len" and call.args == [name]


#: Functions whose calls give integers (or tuples of them), besides numba's API
#: (``cuda.grid(1)``, ``cuda.atomic.add(...)``).
_INTEGER_FUNCTIONS = frozenset(
    {
        "builtins.abs",
        "builtins.int",
        "builtins.len",
        "builtins.max",
        "builtins.min",
        "builtins.range",
        "builtins.round",
        "numbatune.intrinsics.nonnegative",
        "numbatune.unroll.static_range",
    }
)


class _Indices:
    """Which of a kernel's indices are element indices for certain: integers (or tuples of
    them) made of integer constants, the kernel's parameters, integer globals, numba's API
    (``cuda.grid(1)``), calls of :data:`_INTEGER_FUNCTIONS`, arithmetic, and local names every
    binding of which is such a value. Any other (a slice, ``...``, ``None``, a device
    function's result, a name bound to one) may select several elements."""

    def __init__(
        self,
        function: types.FunctionType,
        parameters: set[str],
        body: list[ast.stmt],
        parents: dict[ast.AST, ast.AST],
    ) -> None:
        self._function = function
        self._parameters = parameters
        #: What each local name is bound to, None for a binding not followed.
        self._bindings: dict[str, list[ast.expr | None]] = {}
        for statement in body:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    self._bindings.setdefault(node.id, []).append(_bound_value(node, parents))

    def is_element(self, index: ast.AST, assuming: frozenset[str] = frozenset()) -> bool:
        """Whether ``index`` is an element index for certain, the names ``assuming`` holds
        taken to be (``i = i + 1``: ``i``'s other assignments decide)."""
        if isinstance(index, ast.Constant):
            return isinstance(index.value, int)
        if isinstance(index, ast.Name):
            return self._is_element_name(index.id, assuming)
        if isinstance(index, ast.Attribute):  # a.shape, cuda.threadIdx.x, module.N
            return self.is_element(index.value, assuming) or is_integer(self._value(index))
        if isinstance(index, ast.Call):  # numba's API: cuda.grid(1) as cuda.threadIdx.x
            function = index.func
            return self.is_element(function, assuming) or _gives_integers(self._value(function))
        if isinstance(index, _ARITHMETIC):
            parts = [c for c in ast.iter_child_nodes(index) if isinstance(c, ast.expr)]
            return all(self.is_element(part, assuming) for part in parts)
        return False

    def _is_element_name(self, name: str, assuming: frozenset[str]) -> bool:
        if name in assuming:
            return True
        bindings = self._bindings.get(name, [])
        if not bindings and name not in self._parameters:
            value = self._value(ast.Name(name))
            return is_integer(value) or is_numba(value)
        return all(
            value is not None and self.is_element(value, assuming | {name}) for value in bindings
        )

    def _value(self, node: ast.expr) -> Any:
        """The value a global name, or a chain of attributes of one through modules, has;
        ``_MISSING`` for anything else (the simulator's ``cuda`` has no ``grid`` before a run)."""
        if isinstance(node, ast.Name):
            if node.id in self._bindings or node.id in self._parameters:
                return _MISSING
            value = lookup(self._function, node.id)
            return getattr(builtins, node.id, _MISSING) if value is _MISSING else value
        if isinstance(node, ast.Attribute):
            owner = self._value(node.value)
            if isinstance(owner, types.ModuleType):
                return getattr(owner, node.attr, _MISSING)
        return _MISSING


#: The expressions an element index may be made of, each of its parts one.
_ARITHMETIC = (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.Subscript)


def _gives_integers(function: Any) -> bool:
    """Whether calls of ``function`` give integers (or tuples of them)."""
    python = device_function_of(function) or function
    name = f"{getattr(python, '__module__', '')}.{getattr(python, '__qualname__', '')}"
    return is_numba(function) or name in _INTEGER_FUNCTIONS


def _bound_value(name: ast.Name, parents: dict[ast.AST, ast.AST]) -> ast.expr | None:
    """What an assignment (all its right-hand side where it unpacks) or a loop (its iterable)
    binds ``name`` from; None for any other binding."""
    target: ast.AST = name
    while isinstance(parents.get(target), ast.Tuple | ast.List | ast.Starred):
        target = parents[target]
    statement = parents.get(target)
    if isinstance(statement, ast.For):
        return statement.iter
    if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.NamedExpr):
        return statement.value
    return None
