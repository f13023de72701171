"""Both compilers side by side: every example of ``examples/`` tuned with numba-cuda and with
numba-cuda-mlir.

The examples are numba-cuda kernels (``from numba import cuda``). Their numba-cuda-mlir
version is the same source with its imports from numba taken from numba-cuda-mlir
(:func:`for_mlir`): ``cuda`` from ``numba_cuda_mlir``, every other name (``float32``,
``config``...) from ``numba_cuda_mlir.cuda``; so its arrays are numba-cuda-mlir's device
arrays. Each example and compiler runs in a fresh process (``python -m bench.compilers FILE
FUNCTION COMPILER``) with an empty tune cache, which measures:

- the first tune: ``tune`` and the launch after it, as a user's first call costs once its
  arguments exist (compiling every variant, trial runs, benchmarking), with its parts;
- whether the winner's output, from that first call, matches the module's ``reference``;
- the winner's device time: CUDA events, median of many runs
  (:func:`bench.measuring.time_callables`);
- the hit: host time per call of the tuned kernel once tuned, the median over batches of many
  calls, each batch timed from its first call until its last returns, the device's queue
  emptied between batches (so a kernel longer than its launch does not count).

An example that numba-cuda-mlir cannot load, compile or run is recorded as not supported, with
its error; one process that fails or runs past its time is recorded and the next one runs.
Under numba's simulator (``--smoke``) numba-cuda-mlir cannot run: its side is skipped, with
the reason, and numba-cuda's runs on the first example function at its small size.
"""

from __future__ import annotations

import ast
import enum
import functools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULE = "bench.compilers"

#: The longest one example may take with one compiler (its process is stopped after it).
PROCESS_TIMEOUT_S = 150.0
#: When the section starts no more processes (the ones not run are recorded as such).
SECTION_BUDGET_S = 420.0
#: The hit: batches of calls (at most; at least HIT_LEAST_BATCHES, and no more once
#: HIT_BUDGET_S have passed: the examples' long kernels), calls per batch, and the seconds of
#: calls before them (right after a tune, calls cost up to twice as much for a while).
HIT_BATCHES, HIT_CALLS, HIT_WARMUP_S = 25, 20, 1.0
HIT_LEAST_BATCHES, HIT_BUDGET_S = 5, 1.5
SMOKE_HIT_BATCHES, SMOKE_HIT_CALLS, SMOKE_HIT_WARMUP_S = 3, 2, 0.0
#: How close the winner's output must be to the module's reference.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


class Compiler(enum.Enum):
    """The compilers the examples run on, by the names numbatune gives them."""

    NUMBA_CUDA = "numba-cuda"
    NUMBA_CUDA_MLIR = "numba-cuda-mlir"


class Stage(enum.Enum):
    """The parts of one example's run, in order; a failure names the one it happened in."""

    LOAD = "load"
    EXAMPLE = "example"
    FIRST_TUNE = "first tune"


# -- the numba-cuda-mlir version of an example ---------------------------------------------


def for_mlir(source: str) -> str:
    """``source`` with its imports from numba (``from numba import ...``, ``from numba.cuda
    import ...``) taken from numba-cuda-mlir: ``cuda`` from ``numba_cuda_mlir``, every other
    name from ``numba_cuda_mlir.cuda`` (or its submodule of the same path), but numba's
    ``config`` (numba's settings: whether its simulator is on). Each import keeps its lines,
    so line numbers stay those of ``source``.

    Parameters
    ----------
    source
        A Python module's source.

    Returns
    -------
    str
        The rewritten source.
    """
    lines = source.encode().splitlines(keepends=True)
    found = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        and node.level == 0
        and node.module is not None
        and (node.module in ("numba", "numba.cuda") or node.module.startswith("numba.cuda."))
    ]
    for node in sorted(found, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[operator]
        before = lines[first][: node.col_offset]
        after = lines[last][node.end_col_offset :]
        statement = _mlir_imports(node).encode() + b"\n" * (last - first)
        lines[first : last + 1] = [before + statement + after]
    return b"".join(lines).decode()


def _mlir_imports(node: ast.ImportFrom) -> str:
    """The statements, on one line, that import ``node``'s names as :func:`for_mlir` says."""
    sources: dict[str, list[str]] = {}
    for alias in node.names:
        if node.module == "numba" and alias.name in ("cuda", "config"):
            module = "numba_cuda_mlir" if alias.name == "cuda" else "numba"
        elif node.module == "numba":  # float32 and numba's other types
            module = "numba_cuda_mlir.cuda"
        else:
            module = "numba_cuda_mlir.cuda" + str(node.module).removeprefix("numba.cuda")
        sources.setdefault(module, []).append(_alias(alias))
    imports = [f"from {module} import {', '.join(names)}" for module, names in sources.items()]
    return "; ".join(imports)


def _alias(alias: ast.alias) -> str:
    return alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"


def load(path: Path, compiler: Compiler, directory: Path) -> ModuleType:
    """The example module ``path`` as ``compiler`` runs it: as written for numba-cuda; for
    numba-cuda-mlir, :func:`for_mlir` of it, written to ``directory`` and loaded from there
    (so that its kernels' source is the source they run)."""
    from numbatune.demo import load_module

    if compiler is Compiler.NUMBA_CUDA:
        return load_module(path)
    rewritten = directory / path.name
    rewritten.write_text(for_mlir(path.read_text()))
    return load_module(rewritten)


# -- one example with one compiler, in its own process ---------------------------------------


def measure(path: Path, function: str, compiler: Compiler, small: bool) -> dict[str, Any]:
    """The first tune of example function ``function`` of module ``path`` with ``compiler``,
    its winner's correctness, device time and hit (see the module's docstring); up to the
    first tune, a failure ends the row, which says in which :class:`Stage`."""
    import numbatune  # noqa: F401  (first: it chooses the simulator when there is no GPU)

    with tempfile.TemporaryDirectory(prefix="numbatune-compilers-example-") as directory:
        stage = Stage.LOAD
        try:
            module = load(path, compiler, Path(directory))
            stage = Stage.EXAMPLE
            tuned, args = getattr(module, function)(small)
            stage = Stage.FIRST_TUNE
            row, tuned, winner = _first_tune(tuned, args, small)
        except Exception as error:
            return {"failed": stage.value, "error": _error_text(error)}
        return row | _tuned_measures(module, tuned, winner, args, compiler, small)


def _first_tune(tuned: Any, args: tuple[Any, ...], small: bool) -> tuple[dict[str, Any], Any, Any]:
    """The time of the first tune and the launch after it and what the tuning did; the tuned
    kernel tuned (under the simulator, over a covering few of its variants), and its
    winner."""
    from bench import measuring
    from numbatune.testing import covering_variants

    if small:  # the simulator: a few variants that take every value
        tuned = tuned.with_variants(covering_variants(tuned))
    measuring.synchronize()
    started = time.perf_counter()
    report = tuned.tune(*args)
    tuned(*args)
    measuring.synchronize()
    row = {"first_tune_s": time.perf_counter() - started, **_report(tuned, report)}
    return row, tuned, report.winner


def _tuned_measures(
    module: ModuleType,
    tuned: Any,
    winner: Any,
    args: tuple[Any, ...],
    compiler: Compiler,
    small: bool,
) -> dict[str, Any]:
    """Whether the first call's output is the reference, then the winner's device time and
    the hit (for numba-cuda-mlir also with numba-cuda's views of its arrays); each measure
    that fails is recorded with its error and the next is taken."""
    from bench import measuring

    row = _check(module, args)
    run_winner = functools.partial(tuned.run_variant, winner, *args)
    row |= _attempt("winner_us", lambda: measuring.time_callables({"w": run_winner})["w"] * 1e6)
    row |= _attempt("hit_us", lambda: _hit_us(lambda: tuned(*args), small))
    if compiler is Compiler.NUMBA_CUDA_MLIR:
        on_views = lambda: functools.partial(tuned, *_numba_views(args))  # noqa: E731
        row |= _attempt("hit_numba_arrays_us", lambda: _hit_us(on_views(), small))
    return row


def _numba_views(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with each device array replaced by numba-cuda's view of its memory."""
    from numba import cuda

    return tuple(
        cuda.as_cuda_array(a) if hasattr(a, "__cuda_array_interface__") else a for a in args
    )


def _report(tuned: Any, report: Any) -> dict[str, Any]:
    """What the first tune did: its variants, parts, compiles, winner, and the variants it
    did not time (how many, and the first with why)."""
    not_timed = [
        f"{r.variant.label}: {r.status}: {r.outcome}"[:300]
        for r in report.results
        if r.status not in ("timed", "stopped early")
    ]
    return {
        "variants": len(tuned.variants),
        "compile_s": report.compile_s,
        "trial_s": report.trial_s,
        "benchmark_s": report.benchmark_s,
        "compiles": report.compiles,
        "winner": report.winner.label,
        "tuning_winner_us": _us(report.results[report.best_index].median_s),
        "not_timed": len(not_timed),
        "first_not_timed": not_timed[0] if not_timed else None,
    }


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def _attempt(name: str, measured: Callable[[], Any]) -> dict[str, Any]:
    """``{name: measured()}``, or ``{name: None, name_error: ...}`` if it raises."""
    try:
        return {name: measured()}
    except Exception as error:
        return {name: None, f"{name}_error": _error_text(error)}


def _error_text(error: BaseException) -> str:
    """The error's type and message, and the end of its traceback."""
    trace = "".join(traceback.format_exception(error))
    return f"{type(error).__name__}: {error}"[:1500] + "\n" + trace[-2500:]


def _check(module: ModuleType, args: tuple[Any, ...]) -> dict[str, Any]:
    """Whether the output (the last argument) is the module's reference of ``args`` within
    :data:`TOLERANCE` (``correct``), and where they differ if not (``mismatch``); ``correct``
    is None, with ``correct_error``, where there is nothing to compare (no reference, say)."""
    import numpy as np

    try:
        expected = module.reference(*args)
        got = args[-1].copy_to_host()
    except Exception as error:
        return {"correct": None, "correct_error": _error_text(error)}
    try:
        np.testing.assert_allclose(got, expected, **TOLERANCE)
    except AssertionError as error:
        return {"correct": False, "mismatch": str(error).strip()[:2000]}
    return {"correct": True}


def _hit_us(call: Callable[[], None], small: bool) -> float:
    """The median over batches of the host time per call of a batch of calls; the device's
    queue is emptied before each batch and is not waited for inside it (see
    :data:`HIT_BATCHES`)."""
    from bench import measuring

    batches, calls, warmup_s = (
        (SMOKE_HIT_BATCHES, SMOKE_HIT_CALLS, SMOKE_HIT_WARMUP_S)
        if small
        else (HIT_BATCHES, HIT_CALLS, HIT_WARMUP_S)
    )
    began = time.perf_counter()
    call()
    while time.perf_counter() - began < warmup_s:
        measuring.synchronize()
        for _ in range(calls):
            call()
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < batches:
        if len(samples) >= HIT_LEAST_BATCHES and time.perf_counter() - began > HIT_BUDGET_S:
            break
        measuring.synchronize()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - started) / calls * 1e6)
    measuring.synchronize()
    return statistics.median(samples)


# -- the section ------------------------------------------------------------------------------


def _example_functions(directory: Path) -> list[tuple[Path, str]]:
    """(module file, example function name) of every example of ``directory``, in the order
    the demo takes them (:func:`numbatune.demo.examples_of`), read from their source: this
    process defines none of their kernels."""
    return [
        (path, node.name)
        for path in sorted(directory.glob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
        and (node.name == "example" or node.name.startswith("example_"))
    ]


def _skipped(compiler: Compiler, smoke: bool) -> str | None:
    """Why ``compiler`` does not run here, or None."""
    from numbatune.compilers import mlir_kernels
    from numbatune.compilers.numba_cuda_mlir import NO_SIMULATOR

    if compiler is Compiler.NUMBA_CUDA:
        return None
    if smoke:
        return NO_SIMULATOR
    return None if mlir_kernels.installed() else "numba-cuda-mlir is not installed"


def _apart(path: Path, function: str, compiler: Compiler, smoke: bool, limit_s: float) -> Any:
    """:func:`measure` in a fresh process with an empty tune cache, stopped after
    ``limit_s``; a process that fails or is stopped gives its error as the row."""
    from bench import measuring

    arguments = [str(path), function, compiler.value, *(["--small"] if smoke else [])]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="numbatune-compilers-") as cache:
        try:
            row = measuring.run_module(MODULE, arguments, {"NUMBATUNE_CACHE_DIR": cache}, limit_s)
        except subprocess.TimeoutExpired:
            row = {"error": f"stopped after {limit_s:.0f} s"}
        except RuntimeError as error:  # it failed: the end of what it wrote to stderr
            row = {"error": str(error)[-4000:]}
        except Exception as error:  # it wrote no result, or could not start
            row = {"error": _error_text(error)}
    row["process_s"] = time.perf_counter() - started
    return row


def run(
    smoke: bool,
    examples_dir: Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every example function of ``examples_dir`` (``examples/`` by default; under the
    simulator its first only) with each compiler, each in a fresh process, calling
    ``progress`` with the results so far after each."""
    from numbatune import demo

    directory = examples_dir or demo.find_examples_dir()
    functions = _example_functions(directory)[:1] if smoke else _example_functions(directory)
    results: dict[str, Any] = {"examples": {}}
    started = time.perf_counter()
    for path, function in functions:
        rows = results["examples"].setdefault(f"{path.stem}.{function}", {})
        for compiler in Compiler:
            left_s = SECTION_BUDGET_S - (time.perf_counter() - started)
            skipped = _skipped(compiler, smoke)
            if skipped is None and left_s < 10:
                skipped = f"not run: the section's {SECTION_BUDGET_S:.0f} s were spent"
            rows[compiler.value] = (
                {"skipped": skipped}
                if skipped
                else _apart(path, function, compiler, smoke, min(PROCESS_TIMEOUT_S, left_s))
            )
            if progress is not None:
                progress(results)
    return results


def _cells(compiler: str, row: dict[str, Any]) -> list[str]:
    """A row's cells after the example and the compiler: where it did not run, dashes and
    why in the last cell."""
    reason = None
    if "skipped" in row:
        reason = "skipped: " + row["skipped"]
    elif "failed" in row:
        failed = "not supported" if compiler == Compiler.NUMBA_CUDA_MLIR.value else "FAILED"
        reason = f"{failed} ({row['failed']}): " + _said(row["error"].split("\n")[:3])
    elif "error" in row:
        reason = "FAILED: " + _said(row["error"].strip().split("\n")[-1:])
    if reason is not None:
        return [*"------", reason]

    def figure(name: str, digits: int) -> str:
        value = row.get(name)
        return "failed" if value is None else f"{value:.{digits}f}"

    on_views = "hit_numba_arrays_us" if compiler == Compiler.NUMBA_CUDA_MLIR.value else "hit_us"
    correct = {True: "yes", False: "NO", None: "-"}[row["correct"]]
    return [
        str(row["variants"]), figure("first_tune_s", 2), figure("winner_us", 1),
        figure("hit_us", 2), figure(on_views, 2), correct, row["winner"],
    ]  # fmt: skip


def _said(lines: list[str]) -> str:
    """``lines`` on one line of at most 160 characters, without terminal colours."""
    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in lines)
    return text if len(text) <= 160 else text[:157] + "..."


def table(result: dict[str, Any]) -> str:
    """One row per example and compiler: variants, the first tune (s), the winner's device
    time (us), the hit (us per call) with the example's arrays and with numba-cuda's, whether
    the output matched the reference, and the winner."""
    from numbatune.demo import format_table

    header = ["example", "compiler", "variants", "first tune s", "winner device us", "hit us",
              "hit us, numba-cuda arrays", "correct", "winner"]  # fmt: skip
    rows = [
        [example if index == 0 else "", compiler, *_cells(compiler, row)]
        for example, by_compiler in result["examples"].items()
        for index, (compiler, row) in enumerate(by_compiler.items())
    ]
    return format_table(header, rows)


if __name__ == "__main__":
    file, function, compiler, *rest = sys.argv[1:]
    print(json.dumps(measure(Path(file), function, Compiler(compiler), "--small" in rest)))
