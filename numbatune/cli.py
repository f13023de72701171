"""The ``numbatune`` command line (also ``python -m numbatune``).

Data goes to stdout (a table, or JSON with ``--json``), messages to stderr. Exit status: 0 done,
1 done in part (a variant that did not compile, a key not tuned), 2 an error: wrong usage
(argparse's) or a mistake the command found (a file that does not exist, an output that cannot
be written, an unknown function or key), said in one line, ``numbatune: error: ...``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numbatune.config import Timing, check_environment, parse_positive_int
from numbatune.errors import NumbatuneError

if TYPE_CHECKING:
    from numbatune.cache.files import Written


def _demo(arguments: argparse.Namespace) -> int:
    from numbatune import demo

    directory = arguments.examples or demo.find_examples_dir()
    demo.main(demo.load_examples(directory), small=arguments.small, every=arguments.all)
    return 0


def _print(arguments: argparse.Namespace, data: Any, header: list[str], rows: list[list]) -> None:
    from numbatune.demo import format_table

    if arguments.json:
        print(json.dumps(data, indent=1, default=str))
    else:
        print(format_table(header, [[str(cell) for cell in row] for row in rows]))


def _info(arguments: argparse.Namespace) -> int:
    from numba import cuda

    from numbatune import __version__, compilers, native
    from numbatune.arrays import SIMULATOR
    from numbatune.cache import files
    from numbatune.cache.disk import write_problem
    from numbatune.compilers.base import installed_version
    from numbatune.config import settings
    from numbatune.devices import device_name

    versions = {"python": platform.python_version(), "numbatune": __version__}
    for package in ("numba", "numba-cuda", "numpy", "diskcache"):
        version = installed_version(package)
        versions[package] = "not installed" if version == "missing" else version
    devices, driver = [], None
    if not SIMULATOR:
        driver = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
        devices = [
            {"id": d.id, "name": device_name(d), "compute_capability": d.compute_capability}
            for d in cuda.list_devices()
        ]
    cache_dir = settings.cache_dir
    data = {
        "simulator": SIMULATOR,
        "driver": driver,
        "devices": devices,
        "launcher": native.describe(SIMULATOR, settings.fast_launch),
        "compilers": compilers.available(),
        "versions": versions,
        "cache_dir": None if cache_dir is None else str(cache_dir),
        "cache_bytes": 0 if cache_dir is None else files.size_bytes(cache_dir),
        "cache_problem": None if cache_dir is None else write_problem(cache_dir),
    }
    rows = [
        ["simulator", "yes (no CUDA GPU found)" if SIMULATOR else "no"],
        ["driver", driver or "-"],
        *[
            [f"device {d['id']}", f"{d['name']} (sm{''.join(map(str, d['compute_capability']))})"]
            for d in devices
        ],
        ["launcher", data["launcher"]],
        *[[f"compiler {name}", version] for name, version in data["compilers"].items()],
        *[[name, version] for name, version in versions.items()],
        ["cache", data["cache_dir"] or "off"],
        ["cache size", f"{data['cache_bytes']} bytes"],
        ["cache state", data["cache_problem"] or ("writable" if cache_dir else "-")],
    ]
    _print(arguments, data, ["", ""], rows)
    return 0


def _needs_cache() -> Path:
    from numbatune.config import settings

    cache_dir = settings.cache_dir
    if cache_dir is None:
        raise _Failure("the disk cache is off (NUMBATUNE_CACHE_DIR=off)")
    return cache_dir


class _Failure(Exception):
    """A command that cannot be done as asked; :func:`main` says why in one line, status 2, as
    it does numbatune's own errors (a file not numbatune's, a compiler library missing)."""


#: What a user's mistake raises, as opposed to a bug: said in one line by :func:`main`.
_MISTAKES = (_Failure, NumbatuneError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
             PermissionError, ValueError)  # fmt: skip


def _output(path: Path) -> Path:
    """``path``, checked before any work is done: a file that can be written."""
    if path.is_dir():
        raise _Failure(f"cannot write {path}: it is a folder; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise _Failure(f"cannot write {path}: there is no folder {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _Failure(f"cannot write {path}: permission denied")
    return path


def _cache_list(arguments: argparse.Namespace) -> int:
    from numbatune.cache import files

    counts: dict[tuple[str, str], list[int]] = {}
    for entry in files.stored_entries(_needs_cache()):
        count = counts.setdefault((entry.device, entry.function), [0, 0])
        count[entry.damaged is not None] += 1
    data = [
        {"device": d, "function": f, "keys": n, "damaged": damaged}
        for (d, f), (n, damaged) in sorted(counts.items())
    ]
    rows = [[d["function"], d["keys"], d["damaged"] or "", d["device"]] for d in data]
    _print(arguments, data, ["function", "keys", "damaged", "device"], rows)
    return 0


def _entry_rows(entry: Any) -> list[list]:
    from numbatune.demo import stored_key_label

    key = stored_key_label(entry.key)
    if entry.damaged is not None:
        return [[key, "damaged: " + entry.damaged[:80], "", "", ""]]
    stored, rows = entry.stored, []
    for index, result in enumerate(stored["results"]):
        time = result["median_s"]
        outcome = f"{time * 1e6:.2f}" if time is not None else (result["error"] or "")[:60]
        if result.get("mismatch"):
            outcome = "wrong result: " + json.dumps(result["mismatch"])
        best = "*" if index == stored["best_index"] else ""
        rows.append([key if index == 0 else "", result["variant"], outcome, best, ""])
    rows[0][-1] = (
        f"compile {stored['compile_s']:.2f} s ({stored['compiles']} kernels), "
        f"trial runs {stored['trial_s']:.2f} s, benchmark {stored['benchmark_s']:.2f} s, "
        f"timed as {stored.get('timing', Timing.LAUNCHES.value)}"
    )
    return rows


_ENTRY_HEADER = ["key", "variant", "median (us)", "best", "tuning"]


def _stored(function: str, key: str | None = None) -> list[Any]:
    """The stored entries of ``function`` (full name or last part); with ``key``, of the keys
    printed (or stored) as ``key``, else of those whose text holds it."""
    from numbatune.cache import files
    from numbatune.demo import stored_key_label

    found = files.stored_entries(_needs_cache(), function)
    if not found:
        raise _Failure(f"no stored result for {function} (numbatune cache list names those kept)")
    if key is None:
        return found
    printed = [(entry, entry.key, stored_key_label(entry.key)) for entry in found]
    chosen = [e for e, *texts in printed if key in texts] or [
        e for e, *texts in printed if any(key in text for text in texts)
    ]
    if not chosen:
        keys = "; ".join(text for _, _, text in printed[:3]) + ("; ..." if len(found) > 3 else "")
        raise _Failure(f"{function} has no stored key {key!r}; its keys: {keys}")
    return chosen


def _cache_show(arguments: argparse.Namespace) -> int:
    _print_entries(arguments, _stored(arguments.function, arguments.key))
    return 0


def _print_entries(arguments: argparse.Namespace, found: list[Any]) -> None:
    """The stored entries ``found``: a row per variant, or their data with ``--json``."""
    rows = [row for entry in found for row in _entry_rows(entry)]
    _print(arguments, [_entry_data(e) for e in found], _ENTRY_HEADER, rows)


def _entry_data(entry: Any) -> dict[str, Any]:
    """An entry for ``--json``: as stored, each variant's parameters and jit options of their
    own types again."""
    head = {"device": entry.device, "function": entry.function, "key": entry.key}
    if entry.stored is None:
        return {**head, "damaged": entry.damaged}
    results = [
        {**result, "params": _values(result["params"]), "jit": _values(result["jit"])}
        for result in entry.stored["results"]
    ]
    return {**head, **entry.stored, "results": results}


def _values(texts: dict[str, str]) -> dict[str, Any]:
    from numbatune.values import parse_stable_text

    return {name: parse_stable_text(text) for name, text in texts.items()}


def _cache_clear(arguments: argparse.Namespace) -> int:
    from numbatune.cache import files

    deleted = files.clear(_needs_cache(), arguments.function)
    print(
        f"numbatune: deleted {deleted} stored results and their compiled kernels", file=sys.stderr
    )
    return 0


def _cache_export(arguments: argparse.Namespace) -> int:
    from numbatune.cache import files

    if arguments.function is not None:
        _stored(arguments.function)  # an unknown function is a mistake, before any writing
    written, damaged = files.export(
        _needs_cache(), _output(arguments.file), arguments.function, arguments.kernels
    )
    left_out = f"; left out {damaged} damaged" if damaged else ""
    print(f"numbatune: exported {_written(written)} to {arguments.file}{left_out}", file=sys.stderr)
    return 0


def _written(written: Written) -> str:
    """What an export file holds, in words."""
    megabytes = written.size_bytes / 1e6
    size = f"{megabytes:.1f} MB" if megabytes >= 1 else f"{megabytes * 1e3:.1f} kB"
    return f"{written.results} stored results and {written.kernels} compiled kernels ({size})"


def _cache_import(arguments: argparse.Namespace) -> int:
    from numbatune.cache import files
    from numbatune.cache.disk import write_problem

    cache_dir = _needs_cache()
    problem = write_problem(cache_dir)
    if problem is not None:
        raise _Failure(f"cannot import into {cache_dir}: {problem}")
    result = files.import_file(arguments.file, cache_dir)
    print(
        f"numbatune: imported {result.imported}; skipped {result.other_device} of other "
        f"devices and {result.already_present} already in the cache; imported "
        f"{result.kernels_imported} compiled kernels ({result.kernels_present} already in the "
        "store)"
        + (f"; could not write {result.not_written}: {result.why_not_written}"
           if result.not_written else ""),
        file=sys.stderr,
    )  # fmt: skip
    return 1 if result.not_written else 0


def _compile(arguments: argparse.Namespace) -> int:
    from numbatune import demo, precompile
    from numbatune.cache.disk import write_problem

    cache_dir = arguments.cache_dir or _needs_cache()
    problem = write_problem(cache_dir)
    if problem is not None:
        raise _Failure(f"no kernel could be kept in {cache_dir}: {problem}")
    cases = []
    for path in arguments.paths:
        if not path.exists():
            raise _Failure(f"{path}: no such file or folder")
        for file in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            examples = demo.examples_of(demo.example_module(file))
            cases += [demo.example_case(example, True) for example in examples]
    if not cases:
        raise _Failure(demo.NO_EXAMPLES)
    progress = _progress if sys.stderr.isatty() else lambda finished, total: None
    started = time.perf_counter()
    compiled = precompile.precompile(cases, arguments.cc, cache_dir, arguments.workers, progress)
    seconds = time.perf_counter() - started
    rows = [_compiled_row(c) for c in compiled]
    header = ["kernel", "variant", "registers", "spills (st/ld B)", "shared B", "stack B", "s"]
    _print(arguments, [dataclasses.asdict(c) for c in compiled], header, rows)
    failed = sum(c.error is not None for c in compiled)
    built = [c for c in compiled if c.shares is None and c.error is None]
    lost = [c.not_kept for c in built if not c.kept]
    kept = f"kept in {cache_dir}"
    if lost:
        kept = f"only {len(built) - len(lost)} of {len(built)} {kept}: {lost[0]}"
    print(
        f"numbatune compile: {len(compiled)} variants for sm_{arguments.cc[0]}{arguments.cc[1]}: "
        f"{len(built)} kernels built, {failed} variants failed, in {seconds:.1f} s; {kept}",
        file=sys.stderr,
    )
    return 1 if failed or lost else 0


def _compiled_row(compiled: Any) -> list[str]:
    head = [compiled.kernel.rpartition(".")[2], compiled.variant]
    if compiled.error is not None:
        return [*head, "failed: " + compiled.error.splitlines()[0][:60], "", "", "", ""]
    r = compiled.resources
    shares = f"(as {compiled.shares})" if compiled.shares else f"{compiled.seconds:.2f}"
    if r is None:
        return [*head, "?", "?", "?", "?", shares]
    spills = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
    return [*head, str(r.registers), spills, str(r.shared_bytes), str(r.stack_bytes), shares]


def _progress(finished: int, total: int) -> None:
    print(f"\rnumbatune compile: {finished}/{total} kernels", end="", file=sys.stderr, flush=True)
    if finished == total:
        print("\r\033[K", end="", file=sys.stderr, flush=True)


def _compute_capability(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR, as 9.0, got {text!r}")
    return int(major), int(minor)


def _positive_int(text: str) -> int:
    """A count given on the command line (``--workers``): a whole number, 1 or more."""
    try:
        return parse_positive_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer, as 4, got {text!r}"
        ) from None


def _sweep(arguments: argparse.Namespace) -> int:
    from numbatune import record, sweep
    from numbatune.config import settings

    output = _output(arguments.output)
    path = arguments.record or settings.record or record.served_keys_path(_needs_cache())
    if not Path(path).is_file():
        raise _Failure(f"no record at {path}: give RECORD, or set NUMBATUNE_RECORD while the "
                       "program runs")  # fmt: skip
    found = record.read(path)
    result = sweep.sweep(
        found.records, output, arguments.module, arguments.path,
        ray_address=arguments.ray or None, use_ray=arguments.ray is not None,
        workers=arguments.workers, unreadable=found.unreadable, kernels=arguments.kernels,
    )  # fmt: skip
    rows = [
        [o.function.rpartition(".")[2], o.key or "", o.status, o.detail] for o in result.outcomes
    ]
    data = [dataclasses.asdict(o) for o in result.outcomes]
    _print(arguments, data, ["kernel", "key", "outcome", "winner or why"], rows)
    counts = {s: sum(o.status is s for o in result.outcomes) for s in sweep.Status}
    print(
        f"numbatune sweep: {len(found.records)} keys: {counts[sweep.Status.TUNED]} tuned, "
        f"{counts[sweep.Status.STORED]} stored, {counts[sweep.Status.FAILED]} failed, "
        f"{counts[sweep.Status.SKIPPED]} skipped, over {result.workers} workers "
        f"({result.engine}) in {result.seconds:.1f} s; {_written(result.written)} written to "
        f"{arguments.output}",
        file=sys.stderr,
    )
    return 0 if result.complete else 1


def _picture(path: Path) -> Path:
    """``path``, checked before any work: a file that can be written, in a format matplotlib
    writes."""
    from numbatune import plot

    try:
        plot.check_format(_output(path))
    except ImportError as error:
        raise _Failure(
            f"no picture: {error} (pip install 'numbatune[report]' for matplotlib)"
        ) from error
    return path


def _report(arguments: argparse.Namespace) -> int:
    from numbatune import plot

    output = None if arguments.output is None else _picture(arguments.output)
    found = _stored(arguments.function)
    _print_entries(arguments, found)
    if output is not None:
        plot.picture([e for e in found if e.stored is not None], output)
        print(f"numbatune: wrote {output}", file=sys.stderr)
    return 0


def _command(
    parent: Any, name: str, help: str, run: Callable[[argparse.Namespace], int], json: bool = False
) -> argparse.ArgumentParser:
    """The (sub)command ``name`` of ``parent`` that ``run`` does, with ``--json`` if asked."""
    command = parent.add_parser(name, help=help)
    if json:
        command.add_argument("--json", action="store_true", help="JSON on stdout, for scripts")
    command.set_defaults(run=run)
    return command


def _add_sweep(commands: Any) -> None:
    sweep = _command(commands, "sweep", "tune recorded keys, over GPUs or Ray, into an export",
                     _sweep, json=True)  # fmt: skip
    sweep.add_argument(
        "record", nargs="?", type=Path,
        help="the record (default: NUMBATUNE_RECORD, else <cache_dir>/record.jsonl)",
    )  # fmt: skip
    sweep.add_argument("-o", "--output", type=Path, required=True, help="the export to write")
    sweep.add_argument("--module", action="append", default=[], help="a module to import first")
    sweep.add_argument(
        "--path", action="append", default=[], help="a folder to import modules from (default: .)"
    )
    sweep.add_argument(
        "--ray", nargs="?", const="", metavar="ADDRESS",
        help="spread the keys over a Ray cluster (auto, HOST:PORT; none: start one here)",
    )  # fmt: skip
    sweep.add_argument("--workers", type=_positive_int, help="workers (default: one per GPU)")
    _with_no_kernels(sweep)


def _with_no_kernels(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--no-kernels", dest="kernels", action="store_false",
        help="leave the compiled kernels out of the export (smaller; importers compile)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``numbatune`` command."""
    from numbatune import __version__

    parser = argparse.ArgumentParser(
        prog="numbatune", description="Autotuning for Numba-CUDA kernels."
    )
    parser.add_argument("--version", action="version", version=f"numbatune {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = _command(commands, "demo", "tune the example kernels and print a table", _demo)
    demo.add_argument("--examples", type=Path, help="directory of example modules")
    size = demo.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", default=None, help="small sizes")
    size.add_argument("--full", dest="small", action="store_false", help="GPU-sized inputs")
    demo.add_argument("--all", action="store_true", help="every variant's time, not the winners")
    _command(commands, "info", "devices, versions and the cache", _info, json=True)
    cache = commands.add_parser("cache", help="list, show, clear, export or import results")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    _command(actions, "list", "functions with stored results", _cache_list, json=True)
    show = _command(actions, "show", "a function's results, every variant", _cache_show, json=True)
    show.add_argument("function", help="the function (full name or its last part)")
    show.add_argument(
        "key", nargs="?", help="only this key, as printed (else the keys whose text holds this)"
    )
    clear = _command(
        actions, "clear", "delete stored results (all, or one function's)", _cache_clear
    )
    clear.add_argument("function", nargs="?")
    export = _command(actions, "export", "write stored results and their compiled kernels to a "
                      "JSON file", _cache_export)  # fmt: skip
    export.add_argument("file", type=Path)
    export.add_argument("--function", help="only this function's results")
    _with_no_kernels(export)
    load = _command(
        actions, "import", "add an exported file's results for this device", _cache_import
    )
    load.add_argument("file", type=Path)
    compile_ = _command(commands, "compile", "compile every variant ahead of time, with no GPU",
                        _compile, json=True)  # fmt: skip
    compile_.add_argument("paths", nargs="+", type=Path, help="example modules or their folders")
    compile_.add_argument("--cc", type=_compute_capability, required=True, help="e.g. 9.0")
    compile_.add_argument("--cache-dir", type=Path, help="where to keep them (default: the cache)")
    compile_.add_argument("--workers", type=_positive_int, help="worker processes (default: cores)")
    _add_sweep(commands)
    report = _command(commands, "report", "every variant's time per key", _report, json=True)
    report.add_argument("function")
    report.add_argument("-o", "--output", type=Path, help="write a picture (.png, .svg, .pdf)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    A mistake in what was asked (a file that does not exist or cannot be written, an unknown
    function or key, a value numbatune refuses, any of numbatune's own errors) ends in one
    line on stderr, ``numbatune: error: ...``, and status 2, as argparse's usage errors do;
    any other exception is a bug and goes up with its traceback.
    """
    arguments = build_parser().parse_args(argv)
    try:
        check_environment()  # (an invalid NUMBATUNE_* variable)
        return arguments.run(arguments)
    except _MISTAKES as error:
        print(f"numbatune: error: {_one_line(error)}", file=sys.stderr)
        return 2


def _one_line(error: Exception) -> str:
    """What went wrong, in one line: the file and why for an error of the file system, else
    the first line of the message."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    lines = str(error).strip().removeprefix("numbatune: ").splitlines() or [type(error).__name__]
    more = f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else ""
    return lines[0] + more


if __name__ == "__main__":
    sys.exit(main())
