"""The package's shape: layers that import only downwards, no import cycles, short functions,
numba-cuda's internals read only behind the compiler seam.

docs/architecture.md shows the same layers; these tests keep the two true together.
"""

import ast
import importlib.util
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "numbatune"

#: The layers of the path of one call, lowest first: a module may import from its own layer
#: and the ones below, never from one above (docs/architecture.md).
LAYERS = [
    [
        "_version",
        "errors",
        "rawstreams",
        "values",
        "strategies",
        "config",
        "_backend",
        "processes",
        "native",
        "forking",
        "eager",
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
    ["binder", "spec", "call_arguments", "shared", "resolver", "winners"],
    ["dispatch"],
    ["decorator"],
    [
        "testing",
        "demo",
        "precompile",
        "plot",
        "sweep",
        "cli",
        "pytest_plugin",
        "torch",
        "__init__",
        "__main__",
    ],
]


#: The numba modules that modules outside ``numbatune/compilers/`` may import: numba's public
#: API (``numba.cuda``, ``numba.typeof``, ``numba.types``), its settings, its CUDA driver's
#: errors and calls, and its device arrays and the simulator's (an array kind). The rest of
#: numba-cuda (dispatchers, code libraries, typing, its compiler, its cloudpickle, its version
#: module) is read behind the compiler seam (numbatune.compilers).
PUBLIC_NUMBA = {
    "numba",
    "numba.cuda",
    "numba.types",
    "numba.cuda.core.config",
    "numba.cuda.cudadrv.driver",
    "numba.cuda.cudadrv.devicearray",
    "numba.cuda.simulator.cudadrv.devicearray",
}

#: Private names of numba-cuda (its kernels' attributes, its driver's helpers) that only the
#: compiler seam may read or set.
NUMBA_PRIVATE = {
    "_codelibrary",
    "_specialized",
    "_can_compile",
    "_reduce_states",
    "_rebuild",
    "_stream_handle",
}


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


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _numba_modules(tree: ast.AST) -> set[str]:
    """The numba and numba-cuda modules a file imports (``from m import s`` imports ``m.s``
    where that is a module: ``from numba.cuda import cloudpickle``; else ``m``)."""
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name for name in submodules if _is_module(name)] or [node.module]
        found |= {name for name in names if name.partition(".")[0] in ("numba", "numba_cuda")}
    return found


def test_only_the_compilers_read_numba_cudas_internals():
    internal = []
    for module, path in _modules().items():
        if module.startswith("compilers."):
            continue
        tree = ast.parse(path.read_text())
        internal += [f"{module} imports {name}" for name in _numba_modules(tree) - PUBLIC_NUMBA]
        attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        internal += [f"{module} reads .{name}" for name in sorted(attributes & NUMBA_PRIVATE)]
    assert internal == []
