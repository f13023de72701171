"""The performance tables of README.md and docs/benchmarks.md, written from results files.

``python -m bench.summary FILE...`` reads results files that ``bench/run.py`` wrote (those with
the sections of :data:`ROWS`; where two files hold a section, the
later one's is taken) and rewrites the table between the ``<!-- summary:begin ... -->`` and
``<!-- summary:end -->`` lines of both pages, the begin line naming the files. A figure is then
written once, in bench/results, and the pages cannot disagree (``tests/test_bench.py`` checks
that each page's table is what its files give).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
BEGIN, END = "<!-- summary:begin", "<!-- summary:end -->"
#: The begin line, the files' paths (relative to the repository) after it, the table, the end.
_BLOCK = re.compile(
    rf"^{re.escape(BEGIN)} (?P<files>[^\n]*) -->\n.*?^{re.escape(END)}$", re.M | re.S
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
    for method, (state, phase) in _FLOOR_ROWS.items():
        found = [ratios.get(f"{kind}: {method}") for kind in _KINDS]
        if all(found):
            rows.append(
                [
                    f"a hit over the driver's floor, {state}, numba arrays / CuPy / torch",
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


#: The sections the table reads, in its order, and the rows each gives.
ROWS: dict[str, Callable[[dict[str, Any]], list[list[str]]]] = {
    "dispatch": _hits,
    "tuning_time": _tuning_time,
    "accuracy": _accuracy,
    "reproducibility": _reproducibility,
    "graphs": _graphs,
}


#: The rows README.md shows (by how their first cell starts); docs/benchmarks.md shows all.
HEADLINES = (
    "a cache hit, 1 Ki float32",
    "a cache hit with 18 arrays",
    "a hit over the driver's floor, one stream",
    "tuning a new key",
    "the same winner in",
    "a tuned kernel's launch replayed",
)


def _environment_line(environment: dict[str, Any]) -> str:
    versions = environment["versions"]
    names = ("numba-cuda", "torch", "triton")
    said = ", ".join(f"{name} {versions[name]}" for name in names if name in versions)
    return f"{environment['device']['name']}, driver {environment['driver']}, {said}"


def table(files: Sequence[Path], headlines: bool = False) -> str:
    """The table (Markdown) of ``files``, each row dated and its file named, with a line per
    file for its device and versions; ``headlines``: only the rows of :data:`HEADLINES`."""
    sections: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    notes = []
    for path in files:
        document = json.loads(Path(path).read_text())
        name = Path(path).name
        environment = document["environment"]
        notes.append(f"`{name}`: {_environment_line(environment)}, {environment['date'][:10]}.")
        for section, found in document["sections"].items():
            result = found.get("result") if isinstance(found, dict) else None
            if section in ROWS and isinstance(result, dict) and "error" not in result:
                sections[section] = (name, result, environment)
    lines = ["| what | numbatune | peer, same run | date, file |", "| --- | --- | --- | --- |"]
    for section, rows in ROWS.items():
        if section in sections:
            name, result, environment = sections[section]
            lines += [
                f"| {' | '.join(row)} | {environment['date'][:10]}, `{name}` |"
                for row in rows(result)
                if not headlines or row[0].startswith(HEADLINES)
            ]
    return "\n".join([*lines, "", *notes])


def _relative(path: Path) -> str:
    return Path(path).resolve().relative_to(ROOT).as_posix()


def block(files: Sequence[Path], page: Path) -> str:
    """The whole block ``page`` holds: the begin line naming ``files``, the table (README's:
    its headlines), the end line."""
    shown = table(files, headlines=page == PAGES[0])
    return f"{BEGIN} {' '.join(_relative(path) for path in files)} -->\n{shown}\n{END}"


def page_block(page: Path) -> tuple[str, list[Path]]:
    """The block ``page`` holds now, and the files its begin line names."""
    found = _BLOCK.search(page.read_text())
    if found is None:
        raise ValueError(f"{page}: no {BEGIN} ... {END} block")
    return found.group(0), [ROOT / name for name in found.group("files").split()]


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite both pages' tables from the results files given (by default, those they name)."""
    files = [Path(name) for name in (sys.argv[1:] if argv is None else argv)]
    for page in PAGES:
        old, named = page_block(page)
        page.write_text(page.read_text().replace(old, block(files or named, page)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
