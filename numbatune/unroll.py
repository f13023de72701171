"""Loops unrolled when a variant is compiled: ``for k in nt.static_range(BK):``.

numba lowers ``range()`` to a 64-bit counting loop that the compiler unrolls only when the body
is small: a matrix product's inner loop of 64 multiply-adds stays a loop, its counter a fifth
of the instructions. A ``static_range`` loop, whose bounds are compile-time constants, is
written out when numbatune compiles a variant: a copy of the body per value, after an
assignment of the value to the loop variable, so indices into local and shared arrays become
constants (like Triton's ``tl.static_range``).

Each copy is then folded (:class:`_Folder`): expressions of integer and boolean constants are
computed, and ``a if CONSTANT else b`` keeps the branch taken, which numba would otherwise
type and lower for the compiler to fold (the sgemm example's largest kernel compiled in 4.56 s
instead of 5.48 s on the development machine).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import inspect
import linecache
import operator
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from numbatune.errors import KernelSourceError
from numbatune.references import nested_codes


def static_range(*bounds: int) -> range:
    """``range(*bounds)``, written out by numbatune when it compiles a variant.

    Use it as the iterable of a ``for`` loop in an autotuned kernel: each turn becomes a copy
    of the body in which the loop variable is a constant (numba leaves such a loop rolled).
    The body may not ``break`` or ``continue`` the loop. Outside an autotuned kernel (a plain
    ``cuda.jit`` kernel on a GPU), numba does not know this function.

    Parameters
    ----------
    *bounds
        As for ``range``: ``stop``, or ``start, stop[, step]``. They are evaluated when the
        variant is compiled, from its parameters and the module's globals (and the values of
        enclosing ``static_range`` loops), so they cannot use the kernel's arguments or local
        variables.

    Returns
    -------
    range
        ``range(*bounds)``: what the loop iterates over where it is not written out.

    Raises
    ------
    KernelSourceError
        When the variant is compiled: the kernel's source cannot be read, or the loop cannot
        be written out. The message names the kernel and the line.

    Examples
    --------
    ```python
    for k in nt.static_range(BK):
        acc += a_tile[ty, k] * b_tile[k, tx]
    ```
    """
    return range(*bounds)


def has_static_loops(function: Callable[..., Any]) -> bool:
    """Whether ``function``'s code names ``static_range`` (a cheap test before parsing it)."""
    return any(
        "static_range" in (*code.co_names, *code.co_freevars)
        for code in nested_codes(function.__code__)
    )


def written_out(function: types.FunctionType) -> types.FunctionType:
    """``function`` with its ``static_range`` loops written out (itself if none), bounds evaluated
    in its globals and closure; line numbers kept: numba's errors point at the user's source."""
    if not has_static_loops(function):
        return function
    definition = _clone(_definition(function.__code__, function.__qualname__))
    tree = ast.Module([definition], [])
    cells = dict(zip(function.__code__.co_freevars, function.__closure__ or (), strict=True))
    scope = _scope(function)
    definition.body = _Unroller(scope, function.__qualname__).unroll(definition.body)
    constants = _constants(scope, _assigned([definition]))
    definition.body = [_Folder(constants).visit(statement) for statement in definition.body]
    if cells:  # compile it nested, so that its free variables stay free variables
        outer = ast.parse(f"def _outer():\n    {' = '.join(cells)} = None").body[0]
        outer.body.append(definition)
        tree.body = [outer]
    filename = inspect.getsourcefile(function) or "<kernel>"
    code = compile(ast.fix_missing_locations(tree), filename, "exec")
    while code.co_name != definition.name:
        code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    closure = tuple(cells[name] for name in code.co_freevars) or None
    return function_with(function, code, function.__globals__, closure)


def function_with(
    function: types.FunctionType,
    code: types.CodeType,
    namespace: dict[str, Any],
    closure: tuple[types.CellType, ...] | None,
) -> types.FunctionType:
    """A copy of ``function`` (name, defaults, docstring) with other code, globals and closure."""
    copy = types.FunctionType(code, namespace, function.__name__, function.__defaults__, closure)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    return copy


def written_out_size(function: types.FunctionType, params: dict[str, Any]) -> int:
    """How many statements :func:`written_out` makes of ``function`` with ``params`` bound: a
    measure of its compile time (0 where it has no such loops, or no source)."""
    if not has_static_loops(function):
        return 0
    try:
        definition = _definition(function.__code__, function.__qualname__)
        scope = {**_scope(function), **params}
        return _Unroller(scope, function.__qualname__).size(definition.body)
    except KernelSourceError:
        return 0


def _scope(function: types.FunctionType) -> dict[str, Any]:
    """The globals and closure variables ``function`` sees, by name."""
    cells = zip(function.__code__.co_freevars, function.__closure__ or (), strict=True)
    return {**function.__globals__, **{name: cell.cell_contents for name, cell in cells}}


@functools.lru_cache(maxsize=64)
def _definition(code: types.CodeType, qualname: str) -> ast.FunctionDef:
    """The parsed definition of the function of ``code``, its line numbers as in its file (not
    to be changed: callers change copies)."""
    try:
        lines, first_line = _source_lines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError) as error:
        raise KernelSourceError(
            f"static_range ({qualname}): its loops are written out from the "
            f"kernel's source, which cannot be read ({type(error).__name__}: {error}); define "
            "the kernel in a file, or use range()"
        ) from None
    ast.increment_lineno(tree, first_line - 1)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise KernelSourceError(
            f"static_range ({qualname}): cannot find the kernel's definition in its source"
        )
    definition.decorator_list = []
    return definition


def _source_lines(code: types.CodeType) -> tuple[list[str], int]:
    """``inspect.getsourcelines(code)``, read through linecache first: inspect looks for the
    module of a code object through every module loaded (0.02-0.1 s in a process that has
    imported torch, in the first call of a fresh process whose kernels are stored)."""
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename)
    if not lines or len(lines) < code.co_firstlineno:
        return inspect.getsourcelines(code)
    return inspect.getblock(lines[code.co_firstlineno - 1 :]), code.co_firstlineno


class _Unroller:
    """Writes out ``static_range`` loops, outermost first, with the values of enclosing ones."""

    def __init__(self, scope: dict[str, Any], kernel_name: str) -> None:
        self.scope = scope
        self.kernel_name = kernel_name

    def unroll(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        result: list[ast.stmt] = []
        for statement in statements:
            if isinstance(statement, ast.For) and self._is_static(statement.iter):
                result.extend(self._write_out(statement))
                continue
            for holder, field in _blocks(statement):
                setattr(holder, field, self.unroll(getattr(holder, field)))
            result.append(statement)
        return result

    def size(self, statements: list[ast.stmt]) -> int:
        """How many statements :meth:`unroll` makes of ``statements`` (unknown bounds: one turn)."""
        total = 0
        for statement in statements:
            blocks = [getattr(holder, field) for holder, field in _blocks(statement)]
            if not (isinstance(statement, ast.For) and self._is_static(statement.iter)):
                total += 1 + sum(self.size(block) for block in blocks)
                continue
            values: list[Any] = [None]
            with contextlib.suppress(Exception):
                values = list(self._evaluate(statement.iter))
            name = getattr(statement.target, "id", "")
            with self._restoring(name):
                for value in values:
                    self.scope[name] = value
                    total += 1 + sum(self.size(block) for block in blocks)
        return total

    @contextlib.contextmanager
    def _restoring(self, name: str) -> Iterator[None]:
        """Within it, ``name`` takes a static loop's values; after it, what it was before."""
        outside = self.scope.get(name, _UNKNOWN)
        try:
            yield
        finally:
            if outside is _UNKNOWN:
                self.scope.pop(name, None)
            else:
                self.scope[name] = outside

    def _is_static(self, iterable: ast.expr) -> bool:
        if not isinstance(iterable, ast.Call):
            return False
        try:
            return self._evaluate(iterable.func) is static_range
        except Exception:
            return False

    def _evaluate(self, expression: ast.expr) -> Any:
        code = compile(ast.fix_missing_locations(ast.Expression(expression)), "<bound>", "eval")
        return eval(code, {}, self.scope)  # names of the user's module and variant only

    def _write_out(self, loop: ast.For) -> list[ast.stmt]:
        where = f"{self.kernel_name}, line {loop.lineno}"
        if not isinstance(loop.target, ast.Name):
            raise KernelSourceError(f"static_range ({where}): the loop variable must be one name")
        if loop.orelse:
            raise KernelSourceError(f"static_range ({where}): the loop cannot have an else")
        for node in _same_loop_nodes(loop.body):
            if isinstance(node, (ast.Break, ast.Continue)):
                raise KernelSourceError(
                    f"static_range ({where}): the body cannot break or continue the loop"
                )
        try:
            values = list(self._evaluate(loop.iter))
        except Exception as error:
            raise KernelSourceError(
                f"static_range ({where}): its bounds must be compile-time integers, computed "
                f"from variant parameters and module globals ({type(error).__name__}: {error})"
            ) from None
        name = loop.target.id
        result: list[ast.stmt] = []
        reassigned = name in _assigned(loop.body)
        with self._restoring(name):
            for value in values:
                assign = ast.Assign(
                    targets=[ast.Name(name, ast.Store())], value=ast.Constant(value)
                )
                result.append(ast.copy_location(assign, loop))
                self.scope[name] = value
                body = self.unroll(_clone(loop.body))
                if not reassigned:
                    body = [_Folder(_constants({name: value}, set())).visit(s) for s in body]
                result.extend(body)
        return result


def _blocks(statement: ast.stmt) -> Iterator[tuple[Any, str]]:
    """Where ``statement`` holds statements: (holder, field) pairs, its handlers' included."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(statement, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield statement, field
    for handler in getattr(statement, "handlers", []):
        yield handler, "body"


def _clone(tree: Any) -> Any:
    """A copy of an AST node or list of them, sharing nothing transforms change (twice as fast
    as ``copy.deepcopy``: copying is much of writing a large loop out)."""
    if isinstance(tree, list):
        return [_clone(item) for item in tree]
    if isinstance(tree, ast.AST) and not isinstance(tree, ast.expr_context):
        clone = type(tree).__new__(type(tree))
        clone.__dict__.update({k: _clone(v) for k, v in tree.__dict__.items()})
        return clone
    return tree  # str, int, None, and Load / Store, which are shared anyway


def _same_loop_nodes(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``statements`` outside any nested loop or function."""
    pending = list(statements)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))


def _assigned(nodes: list[ast.AST]) -> set[str]:
    """The names ``nodes`` bind (assigned, deleted, imported, parameters): a function's locals."""
    names = set()
    for child in (c for node in nodes for c in ast.walk(node)):
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            names.add(child.id)
        elif isinstance(child, ast.arg):
            names.add(child.arg)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).partition(".")[0] for a in child.names)
    return names


def _constants(scope: dict[str, Any], assigned: set[str]) -> dict[str, int | bool]:
    """The integers and booleans of ``scope`` whose names are not among ``assigned``."""
    return {n: v for n, v in scope.items() if type(v) in (int, bool) and n not in assigned}


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}  # fmt: skip
_UNARY = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
    ast.Not: operator.not_,
}  # fmt: skip
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}  # fmt: skip


class _Folder(ast.NodeTransformer):
    """Replaces each expression of integer and boolean constants by its value, computed as
    numba would (64-bit integers: an expression with a step out of their range, or a shift by
    a count out of 0..63, is left to numba), and ``a if constant else b`` by the branch taken.

    An operation left as it was keeps its operands as written when they would all become
    constants: Python's compiler would compute it itself, past numba's range."""

    def __init__(self, constants: dict[str, int | bool]) -> None:
        self.constants = constants

    def visit(self, node: ast.AST) -> ast.AST:
        if not isinstance(node, ast.expr):
            return super().visit(node)
        value = self._value(node)
        if value is not _UNKNOWN:
            return ast.copy_location(ast.Constant(value), node)
        if isinstance(node, ast.IfExp):
            test = self._value(node.test)
            if test is not _UNKNOWN:
                return self.visit(node.body if test else node.orelse)
        if not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare)):
            return self.generic_visit(node)
        folded = self.generic_visit(copy.copy(node))
        operands = [c for c in ast.iter_child_nodes(folded) if isinstance(c, ast.expr)]
        return node if all(isinstance(o, ast.Constant) for o in operands) else folded

    def _value(self, node: ast.expr) -> Any:
        """The value of ``node`` if it is an integer or boolean computed from constants."""
        if isinstance(node, ast.Constant):
            return node.value if type(node.value) in (int, bool) else _UNKNOWN
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return self.constants.get(node.id, _UNKNOWN)
        if isinstance(node, ast.IfExp):
            test = self._value(node.test)
            return _UNKNOWN if test is _UNKNOWN else self._value(node.body if test else node.orelse)
        if isinstance(node, ast.BinOp):
            how, operands = _BINARY.get(type(node.op)), (node.left, node.right)
        elif isinstance(node, ast.UnaryOp):
            how, operands = _UNARY.get(type(node.op)), (node.operand,)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            how, operands = _COMPARE.get(type(node.ops[0])), (node.left, node.comparators[0])
        else:
            return _UNKNOWN
        values = [self._value(o) for o in operands]
        if how is None or _UNKNOWN in values:
            return _UNKNOWN
        arithmetic = not isinstance(node, ast.Compare) and how is not operator.not_
        if arithmetic and bool in map(type, values):
            return _UNKNOWN  # numba's arithmetic on booleans differs from Python's
        if how in (operator.lshift, operator.rshift) and not 0 <= values[1] < 64:
            # Python raises on a negative count (code a guard may never let run) and computes
            # a huge number for a large one, which numba's 64-bit shift does not give.
            return _UNKNOWN
        try:
            value = how(*values)
        except ArithmeticError:  # e.g. // 0: left for numba to report
            return _UNKNOWN
        in_range = type(value) is bool or (type(value) is int and -(2**63) <= value < 2**63)
        return value if in_range else _UNKNOWN


_UNKNOWN = object()
