"""The demo: tune the example kernels and print, for each kernel and key, the winner and what
it gains over the kernel as written (``--all``: every variant's time).

Each example module in ``examples/`` defines ``example(small: bool) -> (tuned_kernel, args)``, and
may define more such functions named ``example_*`` (one kernel tuned for two uses, say).
Under the simulator the examples run at small sizes and the times mean nothing about speed.
"""

from __future__ import annotations

import errno
import importlib.util
import itertools
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from numbatune.arrays import SIMULATOR
from numbatune.dispatch import TunedKernel
from numbatune.errors import NumbatuneError
from numbatune.keys import describe, is_array_part
from numbatune.testing import covering_variants
from numbatune.tuning.results import Source, TuneReport, VariantResult
from numbatune.values import parse_stable_text, stable_text
from numbatune.variants import Variant

Example = Callable[[bool], tuple[TunedKernel, tuple[Any, ...]]]

#: What the demo and ``numbatune compile`` say when they are given no example functions.
NO_EXAMPLES = "no example functions found (a module defines example(small) -> (kernel, args))"


class ExampleError(NumbatuneError, RuntimeError):
    """An example module that cannot be imported, or an example function that raised; the
    message says which, and the error, in one line (as ``numbatune compile`` does)."""


def find_examples_dir() -> Path:
    """The examples shipped with numbatune: ``numbatune/examples`` (a wheel), else ``examples/``
    beside the package (a source tree); a FileNotFoundError where neither exists."""
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
    """The example functions of every module in ``directory``, by file name; a
    FileNotFoundError where it is not a folder, an :class:`ExampleError` where a module raises."""
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(directory))
    return [
        example
        for path in sorted(directory.glob("*.py"))
        for example in examples_of(example_module(path))
    ]


def example_module(path: Path) -> ModuleType:
    """The example module ``path``, run; an :class:`ExampleError` in one line where it raises."""
    try:
        return load_module(path)
    except Exception as error:  # the module's own code: whatever it raises is its error
        raise ExampleError(f"cannot import {path}: {type(error).__name__}: {error}") from error


def example_case(example: Example, small: bool) -> tuple[TunedKernel, tuple[Any, ...]]:
    """The tuned kernel and arguments ``example`` gives; an :class:`ExampleError` in one line,
    naming its file and itself, where it raises."""
    try:
        return example(small)
    except Exception as error:  # the example's own code: whatever it raises is its error
        module = sys.modules.get(example.__module__)
        where = getattr(module, "__file__", None) or example.__module__
        name, why = getattr(example, "__name__", "example"), f"{type(error).__name__}: {error}"
        raise ExampleError(f"{where}: {name}(small={small}) raised {why}") from error


def report_rows(name: str, report: TuneReport) -> list[list[str]]:
    """Table rows for one report (``--all``): one per variant, the winner marked."""
    rows = []
    for index, result in enumerate(report.results):
        if result.error is not None:
            time = "failed: " + result.error.splitlines()[0][:60]
        elif result.median_s is None:
            time = "-"
        else:
            time = f"{result.median_s * 1e6:.1f}"
        best = "*" if index == report.best_index else ""
        rows.append([name, key_label(report.key), result.variant.label, time, best, report.source])
    for row in rows[1:]:  # the kernel, key and source said on the first row only
        row[0] = row[1] = row[5] = ""
    return rows


@dataclass(frozen=True)
class Tuned:
    """What the demo found for one kernel and key: one row of its table."""

    kernel: str
    report: TuneReport
    #: The variant equal to the kernel as written, or None when no variant is.
    written: Variant | None
    #: What one launch does, as the example's module says (``work(*args)``): ``{"bytes": n}``
    #: read and written, or ``{"flops": n}``; None when the module does not say.
    work: dict[str, int] | None

    @property
    def winner(self) -> VariantResult:
        return self.report.results[self.report.best_index]

    @property
    def untimed(self) -> str | None:
        """Why the row has no speedup (:data:`UNTIMED`), or None where it has one."""
        timed = {r.variant for r in self.report.results if r.median_s is not None}
        if self.winner.median_s is None:
            return UNTIMED["winner"]
        if self.written is None:
            return UNTIMED["no variant"]
        return None if self.written in timed else UNTIMED["simulator" if SIMULATOR else "skipped"]

    @property
    def speedup(self) -> float | None:
        """The kernel as written's time over the winner's, where both were timed."""
        written_s = {r.variant: r.median_s for r in self.report.results}.get(self.written)
        winner_s = self.winner.median_s
        return None if written_s is None or winner_s is None else written_s / winner_s

    def cells(self, rates: bool) -> list[str]:
        """The row (:data:`_SUMMARY_HEADER`), with ``rates`` the rate the winner reached."""
        report, median_s, speedup = self.report, self.winner.median_s, self.speedup
        cells = [
            self.kernel,
            key_label(report.key),
            f"{report.tried}/{len(report.results)}",
            _changes(self.winner.variant, self.written),
            "-" if median_s is None else _seconds(median_s),
            "-" if speedup is None else f"{speedup:.2f}x",
        ]
        return [*cells, _rate(self.work, median_s)] if rates else cells


_SUMMARY_HEADER = ["kernel", "key", "tried", "winner", "time", "speedup"]
#: The widest table the demo prints (``--all`` aside).
WIDTH = 100
#: The columns cut to fit it, in this order (the winner's changes, the kernel's name, the key),
#: and the least each is cut to.
_CUTS = ((3, 16), (0, 12), (1, 16))


def _changes(variant: Variant, written: Variant | None) -> str:
    """``variant``'s parameters and jit options that differ from ``written``'s (all where it is
    None), as ``NAME=value`` separated by spaces."""
    if variant == written:
        return "as written"
    values = {**variant.params, **variant.jit}
    before = {} if written is None else {**written.params, **written.jit}
    return " ".join(
        f"{name}={stable_text(value)}"
        for name, value in values.items()
        if name not in before or stable_text(before[name]) != stable_text(value)
    )


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit, s, ms or us, in which ``seconds`` reads from 1 to 999 (or below 1 us), and its
    size in seconds."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return unit, scale
    return "us", 1e-6


def _seconds(seconds: float) -> str:
    unit, scale = time_unit(seconds)
    return f"{seconds / scale:.3g} {unit}"


def _rate(work: dict[str, int] | None, seconds: float | None) -> str:
    """The bytes or floating-point operations per second one launch reached."""
    if work is None or seconds is None:
        return "-"
    for amount, unit in (("bytes", "GB/s"), ("flops", "GFLOP/s")):
        if amount in work:
            rate = work[amount] / seconds / 1e9
            return f"{rate:.0f} {unit}" if rate >= 100 else f"{rate:.3g} {unit}"
    return "-"


def summary_table(tuned: Sequence[Tuned], rates: bool) -> str:
    """One row per kernel and key, cut to :data:`WIDTH` columns (:func:`_fit`); with ``rates``
    a column of the rate each winner reached (no peak: numbatune knows none of the device's)."""
    header = [*_SUMMARY_HEADER, "achieved"] if rates else _SUMMARY_HEADER
    return format_table(header, _fit(header, [t.cells(rates) for t in tuned], WIDTH))


def _fit(header: list[str], rows: list[list[str]], width: int) -> list[list[str]]:
    """``rows`` cut to fit ``width`` under ``header``: the columns of :data:`_CUTS` narrowed in
    turn, none below its least width or its header's, longer cells ending in ``...``."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for column, least in _CUTS:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess > 0:
            floor = min(widths[column], max(least, len(header[column])))
            widths[column] = max(floor, widths[column] - excess)
    return [
        [c if len(c) <= w else c[: w - 3] + "..." for c, w in zip(row, widths, strict=True)]
        for row in rows
    ]


def key_label(key: Hashable) -> str:
    """A tuning key as the command line prints it, short and unquoted so that it can be given
    back (docs/cli.md, Keys); parts not of arrays as :func:`numbatune.keys.describe` writes
    them."""
    parts = key if isinstance(key, tuple) else (key,)
    if not parts:
        return "()"
    if all(is_array_part(part) for part in parts) and len({p[1:] for p in parts}) == 1:
        shapes = _runs(["x".join(map(str, part[0])) for part in parts])
        return f"{', '.join(shapes)} {parts[0][1]} {parts[0][2]}"
    return ", ".join(_runs([describe(part).replace("'", "") for part in parts]))


def stored_key_label(text: str) -> str:
    """:func:`key_label` of a key stored as text (:func:`numbatune.values.key_text`)."""
    return key_label(parse_stable_text(text))


def _runs(texts: list[str]) -> list[str]:
    """``texts`` with each run of equal ones said once, with its count: ``3 of TEXT``."""
    counted = [(text, len(list(run))) for text, run in itertools.groupby(texts)]
    return [text if count == 1 else f"{count} of {text}" for text, count in counted]


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    rows = [list(header), *map(list, rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


#: The line the demo starts with under the simulator.
SIMULATED = (
    "numbatune demo: numba's CUDA simulator (no GPU), small sizes, a few variants: "
    "times mean nothing"
)
#: Said of the rows whose keys the tune cache answered (on disk, or in this process).
STORED = "tuned before, read from the tune cache (numbatune cache clear: tune them again)"
#: The line under the table.
LEGEND = "winner: what it changes of the kernel as written; speedup: over the kernel as written"
#: Why a row's speedup is ``-``, said under the table for the rows that have one.
UNTIMED = {
    "simulator": "the kernel as written is not among the few variants the simulator times",
    "skipped": "the kernel as written was not timed (a search, a level or prune left it out)",
    "no variant": "no variant is the kernel as written",
    "winner": "the winner was not timed (the only variant tried)",
}


def main(
    examples: Iterable[Example],
    small: bool | None = None,
    out: TextIO | None = None,
    every: bool = False,
    progress: TextIO | None = None,
) -> None:
    """Tune each of ``examples``, launch its winner once, and print one table to ``out``
    (``sys.stdout``): a row per kernel and key, or with ``every`` per variant. ``small``: small
    sizes (default: under the simulator only). ``progress`` (``sys.stderr``) takes a line per
    example as it is tuned, and one with its winner. A ValueError where ``examples`` is empty;
    an :class:`ExampleError` where an example function raises."""
    examples = list(examples)
    if not examples:
        raise ValueError(NO_EXAMPLES)
    small = SIMULATOR if small is None else small
    out, progress = out or sys.stdout, progress or sys.stderr
    if SIMULATOR:
        print(SIMULATED, file=out, flush=True)
    found = [_tune(example, small, progress) for example in examples]
    if every:
        header = ["kernel", "key", "variant", "median (us)", "best", "source"]
        rows = [row for t in found for row in report_rows(t.kernel, t.report)]
        print(format_table(header, rows), file=out)
        return
    print(summary_table(found, rates=not SIMULATOR), file=out)
    print(LEGEND, file=out)
    for reason in dict.fromkeys(t.untimed for t in found if t.untimed is not None):
        print(f"speedup -: {reason}", file=out)
    stored = sum(t.report.source in (Source.DISK, Source.MEMORY) for t in found)
    if stored:
        print(f"{stored} of {len(found)} rows: {STORED}", file=out)


def _tune(example: Example, small: bool, progress: TextIO) -> Tuned:
    """Tune the example's kernel and launch the winner once, saying so on ``progress``. Under
    the simulator, where every thread is a Python thread, over a covering few of its variants
    (the kernel as written among them or not: its speedup means nothing there)."""
    tuned, args = example_case(example, small)
    written, space = tuned.written_variant, len(tuned.variants)
    if SIMULATOR:
        tuned = tuned.with_variants(covering_variants(tuned))
    what = f"{len(tuned.variants)} of {space}" if len(tuned.variants) < space else f"{space}"
    print(f"{tuned.name}: tuning {what} variants...", file=progress, flush=True)
    report = tuned.tune(*args)
    tuned(*args)
    work = getattr(sys.modules.get(example.__module__), "work", None)
    found = Tuned(tuned.name, report, written, None if work is None else work(*args))
    print(f"{tuned.name}: {_progress(report)}, winner {_changes(found.winner.variant, written)}",
          file=progress, flush=True)  # fmt: skip
    return found


def _progress(report: TuneReport) -> str:
    """What a tuning did: read from the cache, or variants compiled and timed, and how long."""
    if report.source in (Source.DISK, Source.MEMORY):
        return f"read from the tune cache ({report.source})"
    timed = sum(result.median_s is not None for result in report.results)
    compiled = (
        f"{report.compiles} compiled in {report.compile_s:.1f} s, " if report.compiles else ""
    )
    return f"{compiled}{timed} timed in {report.benchmark_s:.1f} s"
