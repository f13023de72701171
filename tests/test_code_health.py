"""The package's shape: layers that import only downwards, no import cycles, short functions.

docs/architecture.md shows the same layers; these tests keep the two true together.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "numbatune"

#: The layers of the path of one call, lowest first: a module may import from its own layer
#: and the ones below, never from one above (docs/architecture.md).
LAYERS = [
    [
        "_version",
        "errors",
        "values",
        "strategies",
        "config",
        "_backend",
        "processes",
        "native",
        "forking",
    ],
    [
        "arraykinds",
        "compilers",
        "arrays",
        "devices",
        "intrinsics",
        "unroll",
        "variants",
        "references",
    ],
    ["keys", "template", "identity", "record", "background"],
    ["streams"],
    ["tuning"],
    ["cache"],
    ["compile"],
    ["launch"],
    ["trials"],
    ["binder", "spec", "call_arguments", "shared", "resolver"],
    ["dispatch"],
    [
        "testing",
        "demo",
        "precompile",
        "plot",
        "sweep",
        "cli",
        "pytest_plugin",
        "__init__",
        "__main__",
    ],
]


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.with_suffix("").relative_to(PACKAGE).parts
        modules[".".join(parts)] = path
    return modules


def _imports(path: Path) -> set[str]:
    """The numbatune modules a file imports, at its top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("numbatune"):
            base = node.module.removeprefix("numbatune").lstrip(".")
            found |= {f"{base}.{a.name}".lstrip(".") for a in node.names} | {base}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("numbatune").lstrip(".") for a in node.names
                      if a.name.startswith("numbatune")}  # fmt: skip
    return found


def _layer(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_every_module_has_a_layer_and_imports_none_above_it():
    modules = _modules()
    upward = []
    for module, path in modules.items():
        for imported in _imports(path) & set(modules):
            if imported and _layer(imported) > _layer(module):
                upward.append(f"{module} imports {imported}")
    assert upward == []


def test_no_module_imports_itself_back_through_others():
    modules = _modules()
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph[module]):
            if imported in path:
                cycles.append(" -> ".join([*path[path.index(imported) :], imported]))
            elif imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert cycles == []


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring left out (public functions document every parameter:
    the docstring's length is not the code's)."""
    lines = function.end_lineno - function.lineno + 1
    if ast.get_docstring(function) is not None:
        docstring = function.body[0]
        lines -= docstring.end_lineno - docstring.lineno + 1
    return lines


def test_functions_fit_on_a_screen_unless_their_docstring_says_why():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = _code_lines(node)
                if lines > 60 and "one piece" not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} {lines}")
    assert long == []
