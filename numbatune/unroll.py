"""Loops unrolled when a variant is compiled: ``for k in nt.static_range(BK):``.

numba lowers ``range()`` loops to a 64-bit counting loop that the compiler unrolls only when
the unrolled body is small; a matrix product's inner loop, 64 multiply-adds a step, stays a
loop, and its counter costs a fifth of the instructions. ``static_range`` marks a loop whose
bounds are compile-time constants (variant parameters and module globals): when numbatune
compiles a variant, it writes the loop out, one copy of the body per value, each after an
assignment of that value to the loop variable, so indices into local and shared arrays become
constants. Like Triton's ``tl.static_range`` and cubecl's ``#[unroll]``.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from numbatune.errors import KernelSourceError


def static_range(*bounds: int) -> range:
    """``range(*bounds)``, written out by numbatune when it compiles a variant.

    Use it as the iterable of a ``for`` loop in an autotuned kernel::

        for k in nt.static_range(BK):
            ...

    The bounds are evaluated when the variant is compiled, from its parameters and the
    module's globals (and the values of enclosing ``static_range`` loops), so they cannot use
    the kernel's arguments or local variables. The body may not ``break`` or ``continue``
    the loop. Outside an autotuned kernel (a plain ``cuda.jit`` kernel on a GPU), numba does
    not know this function.
    """
    return range(*bounds)


def has_static_loops(function: Callable[..., Any]) -> bool:
    """Whether ``function``'s code names ``static_range`` (a cheap test before parsing it)."""

    def names(code: types.CodeType) -> set[str]:
        found = set(code.co_names) | set(code.co_freevars)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                found |= names(constant)
        return found

    return "static_range" in names(function.__code__)


def unrolled(
    function: types.FunctionType,
    namespace: dict[str, Any],
    closure: tuple[types.CellType, ...] | None,
) -> tuple[types.CodeType, tuple[types.CellType, ...] | None]:
    """The code of ``function`` with its ``static_range`` loops written out, and its closure.

    ``namespace`` holds the globals the bounds are evaluated in (the variant's parameters
    included), ``closure`` the cells of the function's free variables; the closure returned
    holds the same cells in the order of the new code's free variables. Line numbers are kept,
    so numba's errors point at the user's source.
    """
    try:
        lines, first_line = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError) as error:
        raise KernelSourceError(
            f"static_range ({function.__qualname__}): its loops are written out from the "
            f"kernel's source, which cannot be read ({type(error).__name__}: {error}); define "
            "the kernel in a file, or use range()"
        ) from None
    ast.increment_lineno(tree, first_line - 1)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise KernelSourceError(
            f"static_range ({function.__qualname__}): cannot find the kernel's definition in "
            "its source"
        )
    definition.decorator_list = []
    cells = dict(zip(function.__code__.co_freevars, closure or (), strict=True))
    scope = {**namespace, **{name: cell.cell_contents for name, cell in cells.items()}}
    definition.body = _Unroller(scope, function.__qualname__).unroll(definition.body)
    if cells:  # compile it nested, so that its free variables stay free variables
        outer = ast.parse(f"def _outer():\n    {' = '.join(cells)} = None").body[0]
        outer.body.append(definition)
        tree.body = [outer]
    filename = inspect.getsourcefile(function) or "<kernel>"
    code = compile(ast.fix_missing_locations(tree), filename, "exec")
    while code.co_name != definition.name:
        code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return code, tuple(cells[name] for name in code.co_freevars) or None


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
            for field in ("body", "orelse", "finalbody"):
                block = getattr(statement, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    setattr(statement, field, self.unroll(block))
            for handler in getattr(statement, "handlers", []):
                handler.body = self.unroll(handler.body)
            result.append(statement)
        return result

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
            raise KernelSourceError(
                f"static_range ({where}): the loop variable must be a single name"
            )
        if loop.orelse:
            raise KernelSourceError(
                f"static_range ({where}): a static_range loop cannot have an else"
            )
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
        outside = self.scope.get(name, _MISSING)
        result: list[ast.stmt] = []
        for value in values:
            assign = ast.Assign(targets=[ast.Name(name, ast.Store())], value=ast.Constant(value))
            result.append(ast.copy_location(assign, loop))
            self.scope[name] = value
            result.extend(self.unroll(copy.deepcopy(loop.body)))
        if outside is _MISSING:
            self.scope.pop(name, None)
        else:
            self.scope[name] = outside
        return result


_MISSING = object()


def _same_loop_nodes(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``statements`` outside any nested loop or function."""
    pending = list(statements)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
