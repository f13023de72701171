"""The performance tables of README.md and docs/benchmarks.md, written from results files.

``python -m bench.summary FILE...`` reads results files that ``bench/run.py`` wrote and rewrites
each block of both pages, the lines between ``<!-- NAME:begin FILES -->`` and
``<!-- NAME:end -->``, the begin line naming the files it was written from. The ``summary``
block (both pages) takes the sections of :data:`ROWS` from all the files, the later one's where
two hold a section; each other block is a table of :data:`bench.tables.TABLES`, written from
the last file that holds its section. A block that no file given holds is left as it is (and
named on the way). A figure is then written once, in bench/results, and the pages cannot
disagree (``tests/test_bench.py`` checks that each block is what its files give).
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.tables import TABLES

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
SUMMARY = "summary"
#: The begin line, its block's name, the files' paths (relative to the repository) after it, the
#: table, the end line.
_BLOCK = re.compile(
    r"^<!-- (?P<name>[a-z_]+):begin(?P<files>[^\n]*?) -->\n.*?^<!-- (?P=name):end -->$",
    re.M | re.S,
)
_KINDS = ("numba", "cupy", "torch")


def _us(values: Sequence[float]) -> str:
    return " / ".join(f"{value:.2f}" for value in values) + " us"


def _hits(dispatch: dict[str, Any]) -> list[list[str]]:
    kinds = [dispatch[kind] for kind in _KINDS]
    numba_cfg = kinds[0]["numba cfg = k[grid, block]; cfg(...)"]
    rows = [
        [
            "a cache hit, 1 Ki float32, numba arrays / CuPy / torch",
            _us([kind["numbatune hit"] for kind in kinds]),
            f"numba's pre-configured launch {numba_cfg:.2f} us;"
            f" Triton's autotune hit {kinds[2]['triton autotune hit']:.2f} us",
        ],
        [
            "a cache hit with 18 arrays and 8 scalars, numba arrays / CuPy / torch",
            _us([kind["26 arguments: numbatune hit"] for kind in kinds]),
            "numba's launch " + _us([kind["26 arguments: numba cfg(...)"] for kind in kinds]),
        ],
    ]
    mlir = dispatch.get("mlir, numba-cuda-mlir arrays")
    if mlir is not None:
        rows.append(
            [
                "a numba-cuda-mlir kernel's hit, its own arrays",
                _us([mlir["numbatune hit"]]),
                "numba-cuda-mlir's pre-configured launch "
                + _us([mlir["numba-cuda-mlir cfg(...)"]]),
            ]
        )
    if "declared signature: numbatune hit" in dispatch["numba"]:
        declared = [dispatch[kind] for kind in ("numba", "torch")]
        rows.append(
            [
                "a hit of a kernel declared with a signature, numba arrays / torch",
                _us([kind["declared signature: numbatune hit"] for kind in declared]),
                "numba's launch of it "
                + _us([kind["declared signature: numba cfg(...)"] for kind in declared]),
            ]
        )
    return rows + _to_the_floor(dispatch)


#: The hit states measured against the driver's floor, as ``bench.dispatch_cost`` names them,
#: and the phase whose floor each is measured against.
_FLOOR_ROWS = {
    "numbatune hit": ("one stream", "phase 1"),
    "hit that waits for another stream": ("waiting for another stream", "phase 2"),
    "26 arguments: numbatune hit": ("18 arrays and 8 scalars", "phase 1"),
}


def _to_the_floor(dispatch: dict[str, Any]) -> list[list[str]]:
    """The hits as multiples of a C program's ``cuLaunchKernel`` of parameters packed once,
    timed in the same rounds (where the run had the floor)."""
    ratios = dispatch.get("to the floor", {})
    floor = dispatch.get("driver floor (C)", {})
    rows = []
    for (method, (state, phase)), (launch, said) in itertools.product(
        _FLOOR_ROWS.items(), [("", ""), (", launch by_shape", ", launch function by_shape")]
    ):
        found = [ratios.get(f"{kind}: {method}{launch}") for kind in _KINDS]
        if all(found):
            rows.append(
                [
                    f"a hit over the driver's floor, {state}{said}, numba arrays / CuPy / torch",
                    " / ".join(f"{ratio['ratio']:.2f}x" for ratio in found),
                    "the floor: cuLaunchKernel of parameters packed once, from C, "
                    f"{floor[f'cuLaunchKernel, packed once, {phase}']:.2f} us",
                ]
            )
    return rows


def _tuning_time(result: dict[str, Any]) -> list[list[str]]:
    most = max(result["numbatune"], key=int)
    return [
        [
            f"tuning a new key, {most} variants, 2^{result['size'].bit_length() - 1} float32",
            f"{result['numbatune'][most]['total_s']:.2f} s",
            f"Triton's autotune, {most} configs: {result['triton'][most]['total_s']:.2f} s",
        ]
    ]


def _accuracy(result: dict[str, Any]) -> list[list[str]]:
    return [
        [
            f"tuning accuracy, {len(result['keys'])} keys: the winner's time over the best's",
            f"{result['mean_ratio']:.4f} on average, {result['worst_ratio']:.4f} at worst",
            "",
        ]
    ]


def _reproducibility(result: dict[str, Any]) -> list[list[str]]:
    return [
        [
            f"the same winner in {result['processes']} fresh processes, {len(result['keys'])} "
            "keys of the examples",
            f"{result['agreed_keys']} of {len(result['keys'])} keys; the slowest winner "
            f"{result['worst_winner_vs_fastest']:.4f}x the fastest",
            "",
        ]
    ]


def _graphs(result: dict[str, Any]) -> list[list[str]]:
    return [
        [
            "a tuned kernel's launch replayed from a CUDA graph, device time",
            f"{result['tuned_replayed_us_per_launch']:.3f} us",
            f"the same kernel captured plain: {result['plain_replayed_us_per_launch']:.3f} us",
        ],
        [
            "a function around a tuned kernel as a custom op, torch.compile reduce-overhead",
            f"{result['compiled_reduce_overhead_us_per_call']:.2f} us a call",
            f"the same function eager: {result['eager_custom_op_us_per_call']:.2f} us",
        ],
    ]


def _ceilings(result: dict[str, Any]) -> list[list[str]]:
    examples = [row for row in result["examples"] if row.get("default_s")]
    gains = [row["default_s"] / row["winner_s"] for row in examples]
    copy = [row["percent_of_ceiling"] for row in examples if row.get("ceiling") == "copy"]
    rows = [
        [
            f"the examples' tuned winners over their hand-picked defaults, {len(gains)} kernels "
            "and sizes",
            f"{min(gains):.2f}x to {max(gains):.2f}x faster",
            "",
        ]
    ]
    if copy:
        rows.append(
            [
                f"the memory-bound examples' winners, {len(copy)} kernels and sizes",
                f"{min(copy):.1f}% to {max(copy):.1f}% of the copy bandwidth",
                f"copy {result['ceilings']['copy']['bytes_per_s'] / 1e12:.2f} TB/s",
            ]
        )
    return rows


#: The sections the table reads, in its order, and the rows each gives.
ROWS: dict[str, Callable[[dict[str, Any]], list[list[str]]]] = {
    "dispatch": _hits,
    "tuning_time": _tuning_time,
    "accuracy": _accuracy,
    "reproducibility": _reproducibility,
    "graphs": _graphs,
    "ceilings": _ceilings,
}


#: The rows README.md shows (by how their first cell starts); docs/benchmarks.md shows all.
HEADLINES = (
    "a cache hit, 1 Ki float32",
    "a cache hit with 18 arrays",
    "a hit over the driver's floor, one stream",
    "tuning a new key",
    "the same winner in",
    "a tuned kernel's launch replayed",
    "the examples' tuned winners",
)


def _environment_line(environment: dict[str, Any]) -> str:
    versions = environment["versions"]
    names = ("numba-cuda", "torch", "triton")
    said = ", ".join(f"{name} {versions[name]}" for name in names if name in versions)
    if "device" not in environment:  # a smoke run's
        return f"{_device(environment)}, {said}"
    return f"{_device(environment)}, driver {environment['driver']}, {said}"


def _device(environment: dict[str, Any]) -> str:
    """The device a results file was measured on (a smoke run's: the simulator)."""
    return environment.get("device", {}).get("name", "numba's CUDA simulator")


def _results(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The file's environment, and the results of its sections that ran without an error."""
    document = json.loads(Path(path).read_text())
    sections = {
        section: found["result"]
        for section, found in document["sections"].items()
        if isinstance(found, dict)
        and isinstance(found.get("result"), dict)
        and "error" not in found["result"]
    }
    return document["environment"], sections


def table(files: Sequence[Path], headlines: bool = False) -> str:
    """The table (Markdown) of ``files``, each row dated and its file named, with a line per
    file for its device and versions; ``headlines``: only the rows of :data:`HEADLINES`."""
    sections: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    notes = []
    for path in files:
        environment, results = _results(path)
        name = Path(path).name
        notes.append(f"`{name}`: {_environment_line(environment)}, {environment['date'][:10]}.")
        sections |= {section: (name, results[section], environment)
                     for section in ROWS if section in results}  # fmt: skip
    lines = ["| what | numbatune | peer, same run | date, file |", "| --- | --- | --- | --- |"]
    for section, rows in ROWS.items():
        if section in sections:
            name, result, environment = sections[section]
            lines += [
                f"| {' | '.join(row)} | {environment['date'][:10]}, `{name}` |"
                for row in rows(result)
                if not headlines or row[0].startswith(HEADLINES)
            ]
    return "\n".join([*lines, "", "\n\n".join(notes)])


def section_table(name: str, path: Path) -> str:
    """The table ``name`` of :data:`bench.tables.TABLES` from the file ``path``, the file, its
    device and its date said after it."""
    section, write = TABLES[name]
    environment, results = _results(path)
    written = write(results[section])
    source = f"From `{Path(path).name}`: {_device(environment)}, {environment['date'][:10]}."
    between = "\n\n" if written.endswith("|") else " "  # after the table's own note, if any
    return f"{written}{between}{source}"


def _relative(path: Path) -> str:
    return Path(path).resolve().relative_to(ROOT).as_posix()


def block(name: str, files: Sequence[Path], page: Path) -> str:
    """The whole block ``name`` of ``page``: the begin line naming ``files``, the table written
    from them (README's summary: its headlines), the end line."""
    if name == SUMMARY:
        shown = table(files, headlines=page == PAGES[0])
    else:
        (path,) = files
        shown = section_table(name, path)
    named = "".join(" " + _relative(path) for path in files)
    return f"<!-- {name}:begin{named} -->\n{shown}\n<!-- {name}:end -->"


def page_blocks(page: Path) -> list[tuple[str, str, list[Path]]]:
    """The blocks ``page`` holds now: each one's text, name, and the files its begin line
    names."""
    return [
        (found.group(0), found.group("name"), [ROOT / f for f in found.group("files").split()])
        for found in _BLOCK.finditer(page.read_text())
    ]


def _files_for(name: str, files: Sequence[Path]) -> list[Path]:
    """The files among ``files`` the block ``name`` is written from (none: it is kept)."""
    if name == SUMMARY:
        return [path for path in files if set(ROWS) & set(_results(path)[1])]
    section = TABLES[name][0]
    holding = [path for path in files if section in _results(path)[1]]
    return holding[-1:]


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite both pages' blocks from the results files given (by default, those each names)."""
    files = [Path(name) for name in (sys.argv[1:] if argv is None else argv)]
    for page in PAGES:
        text = page.read_text()
        for old, name, named in page_blocks(page):
            chosen = _files_for(name, files) if files else named
            if chosen:
                text = text.replace(old, block(name, chosen, page))
            else:
                print(
                    f"bench.summary: {page.name}'s {name} table kept: "
                    + ("no file given holds its section" if files else "it names no file")
                )
        page.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
