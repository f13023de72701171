"""The demo: tune the example kernels and print what each variant measured.

Each example module in ``examples/`` defines ``example(small: bool) -> (tuned_kernel, args)``, and
may define more such functions named ``example_*`` (one kernel tuned for two uses, say).
Under the simulator the examples run at small sizes and the times mean nothing about speed.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from numbatune.arrays import SIMULATOR
from numbatune.dispatch import TunedKernel
from numbatune.keys import describe
from numbatune.testing import covering_variants
from numbatune.tuning.results import TuneReport

Example = Callable[[bool], tuple[TunedKernel, tuple[Any, ...]]]


def find_examples_dir() -> Path:
    """The examples shipped with numbatune.

    Returns
    -------
    Path
        ``numbatune/examples`` where numbatune is installed from a wheel, else ``examples/``
        beside the package (a source tree, or an editable install of one).

    Raises
    ------
    FileNotFoundError
        Where neither exists.
    """
    package = Path(__file__).resolve().parent
    for candidate in (package / "examples", package.parent / "examples"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"numbatune demo: no examples in {package} or beside it; reinstall numbatune, or pass "
        "--examples DIR"
    )


def load_module(path: Path) -> ModuleType:
    """Run the example file ``path`` as the module ``numbatune_examples.<file name>``."""
    spec = importlib.util.spec_from_file_location(f"numbatune_examples.{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def examples_of(module: ModuleType) -> list[Example]:
    """The module's ``example`` and ``example_*`` functions, in the order they are defined."""
    return [
        value
        for name, value in vars(module).items()
        if (name == "example" or name.startswith("example_"))
        and callable(value)
        and getattr(value, "__module__", None) == module.__name__
    ]


def load_examples(directory: Path) -> list[Example]:
    """The example functions of every module in ``directory``, by file name."""
    return [
        example
        for path in sorted(directory.glob("*.py"))
        for example in examples_of(load_module(path))
    ]


def report_rows(name: str, report: TuneReport) -> list[list[str]]:
    """Table rows for one report: one per variant, the winner marked."""
    rows = []
    for index, result in enumerate(report.results):
        if result.error is not None:
            time = "failed: " + result.error.splitlines()[0][:60]
        elif result.median_s is None:
            time = "-"
        else:
            time = f"{result.median_s * 1e6:.1f}"
        rows.append(
            [
                name if index == 0 else "",
                _short(report.key) if index == 0 else "",
                result.variant.label,
                time,
                "*" if index == report.best_index else "",
                report.source if index == 0 else "",
            ]
        )
    return rows


def _short(key: Any, width: int = 48) -> str:
    text = describe(key)
    return text if len(text) <= width else text[: width - 3] + "..."


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    rows = [list(header), *map(list, rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def main(examples: Iterable[Example], small: bool | None = None, out: TextIO = sys.stdout) -> None:
    """Tune each example, launch its winner once, and print one table for all of them."""
    small = SIMULATOR if small is None else small
    if SIMULATOR:
        print(
            "numbatune demo: no GPU, running under numba's CUDA simulator at small sizes, over "
            "a few variants of each kernel that take every parameter value; times say nothing "
            "about speed.",
            file=out,
        )
    rows = []
    for example in examples:
        tuned, args = example(small)
        if SIMULATOR:  # every simulated thread is a Python thread: tune a covering few
            tuned = tuned.with_variants(covering_variants(tuned))
        report = tuned.tune(*args)
        tuned(*args)
        rows.extend(report_rows(tuned.name, report))
    header = ["kernel", "key", "variant", "median (us)", "best", "source"]
    print(format_table(header, rows), file=out)
