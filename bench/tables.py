"""The tables of docs/benchmarks.md's sections, each written from one section's result.

:data:`TABLES` names each table, the section of a results file (``bench/run.py``'s
``results.json``) it reads, and the function that writes it in Markdown. ``bench/summary.py``
puts them in the page between ``<!-- NAME:begin FILE -->`` and ``<!-- NAME:end -->`` lines.
A writer reads only the fields it shows: a result with more (a later bench's) writes the same
table, and a field a run did not measure leaves its cell empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

KINDS = {"numba": "numba arrays", "cupy": "CuPy", "torch": "torch"}
#: The dispatch bench's row names for the hits timed in its first phase, their library floors
#: and numba's launch: the label each row gets, and the result's name (under each kind, or
#: under ``KIND 26 arguments`` for ``("26 arguments", name)``).
_HIT_ROWS = {
    "numbatune hit": "**numbatune hit**",
    "numbatune hit, launch by_shape": "**numbatune hit**, launch function `nt.by_shape`",
    "floor: read, launch function, launch": "its library floor: the arrays' read, the launch "
    "function, the launch",
    "numba cfg = k[grid, block]; cfg(...)": "numba's pre-configured launch, `cfg(...)`",
    "triton autotune hit": "Triton's autotune hit",
}
_MANY_ARGUMENTS_ROWS = {
    "26 arguments: numbatune hit": "18 arrays and 8 scalars: **numbatune hit**",
    "26 arguments: numbatune hit, launch by_shape": "18 arrays and 8 scalars: **numbatune hit**, "
    "launch function `nt.by_shape`",
    ("26 arguments", "floor: read, launch function, launch"): "18 arrays and 8 scalars: its "
    "library floor",
    "26 arguments: numba cfg(...)": "18 arrays and 8 scalars: numba's `cfg(...)`",
}
_STREAM_ROWS = {
    "hit, 2 streams used, own stream": "**a hit on its own stream**, after two streams were used",
    "hit that waits for another stream": "**a hit that waits for the other stream**",
    "hit that waits for another stream, launch by_shape": "**a hit that waits for the other "
    "stream**, launch function `nt.by_shape`",
    "waiting floor: read, launch function, event, launch": "its library floor, with the event "
    "recorded and the wait queued",
    "waits, the library's non-blocking streams": "a hit that waits across the library's "
    "non-blocking streams",
}


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def _number(value: Any, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else ""


def _power_of_two(match: re.Match[str]) -> str:
    n = int(match.group(0))
    return f"2^{n.bit_length() - 1}" if n >= 1 << 16 and n & (n - 1) == 0 else match.group(0)


def size(text: str | int) -> str:
    """``text`` with its powers of two from 2^16 written as such, ``AxB`` as ``A x B``."""
    return re.sub(r"(?<=\d)x(?=\d)", " x ", re.sub(r"\d+", _power_of_two, str(text)))


def _dispatch_rows(dispatch: dict[str, Any], names: dict[Any, str]) -> list[list[str]]:
    rows = []
    for name, label in names.items():
        where, key = (" " + name[0], name[1]) if isinstance(name, tuple) else ("", name)
        cells = [_number(dispatch.get(kind + where, {}).get(key)) for kind in KINDS]
        if any(cells):
            rows.append([label, *cells])
    return rows


def _floor(dispatch: dict[str, Any], phase: int) -> Any:
    return dispatch.get("driver floor (C)", {}).get(f"cuLaunchKernel, packed once, phase {phase}")


def hits(dispatch: dict[str, Any]) -> str:
    """The first phase: a hit, its library floor, numba's and Triton's launches, one and 26
    arguments; the driver's floor in a line after."""
    rows = _dispatch_rows(dispatch, _HIT_ROWS) + _dispatch_rows(dispatch, _MANY_ARGUMENTS_ROWS)
    table = markdown(["us per call", *KINDS.values()], rows)
    floor = _floor(dispatch, 1)
    if floor is None:
        return table
    return (
        f"{table}\n\nThe driver's floor in the same rounds, a C program's `cuLaunchKernel` of "
        f"parameters packed once: {floor:.2f} us."
    )


def streams(dispatch: dict[str, Any]) -> str:
    """The second phase: hits once two streams were used; that phase's host speed after."""
    table = markdown(["us per call", *KINDS.values()], _dispatch_rows(dispatch, _STREAM_ROWS))
    numba = dispatch.get("numba", {})
    said = [
        f"{what} {value:.2f} us"
        for what, value in (
            ("numba's `cfg(...)`", numba.get("numba cfg(...), after two streams")),
            ("the driver's floor", _floor(dispatch, 2)),
            (
                "the driver's event record and wait alone",
                numba.get("driver event record and stream wait alone"),
            ),
        )
        if value is not None
    ]
    return f"{table}\n\nIn this phase: {', '.join(said)}." if said else table


def tuning_time(result: dict[str, Any]) -> str:
    """Per number of variants: numbatune's first call, its measuring part, Triton's."""
    rows = [
        [
            count,
            f"{ours['total_s']:.2f} s",
            f"{ours['measure_s']:.2f} s",
            f"{result['triton'][count]['total_s']:.2f} s" if count in result["triton"] else "",
        ]
        for count, ours in sorted(result["numbatune"].items(), key=lambda item: int(item[0]))
    ]
    header = ["variants / configs", "numbatune", "of it, measuring", "Triton's autotune"]
    return markdown(header, rows)


def accuracy(result: dict[str, Any]) -> str:
    """Per kernel: the chosen variant's careful time over the best's, at each size."""
    kernels: dict[str, list[dict[str, Any]]] = {}
    for key in result["keys"]:
        kernels.setdefault(key["kernel"], []).append(key)
    rows = [
        [
            f"`{kernel}`",
            str(keys[0]["variants"]),
            ", ".join(
                f"{size(key['size'])}: " + (f"**{key['ratio']:.4f}**" if key["ratio"] > 1 else "1")
                for key in keys
            ),
        ]
        for kernel, keys in kernels.items()
    ]
    best = sum(key["chosen"] == key["best"] for key in result["keys"])
    table = markdown(["kernel", "variants", "size: chosen over best"], rows)
    return (
        f"{table}\n\nOver the {len(result['keys'])} keys: mean {result['mean_ratio']:.4f}, worst "
        f"{result['worst_ratio']:.4f}; {best} chose the best variant."
    )


def reproducibility(result: dict[str, Any]) -> str:
    """Per key: the processes that agreed, the winners, the slowest winner over the fastest."""
    processes = result["processes"]
    rows = []
    for key in result["keys"]:
        winners = key["winners"]
        agreed = f"{key['agreed']} of {processes}"
        rows.append(
            [
                size(key["key"]),
                agreed if key["agreed"] == processes else f"**{agreed}**",
                "; ".join(
                    label if len(winners) == 1 else f"{label} ({count})"
                    for label, count in sorted(winners.items(), key=lambda item: -item[1])
                ),
                f"{key['worst_winner_vs_fastest']:.4f}",
            ]
        )
    header = ["key", "processes that agreed", "winners", "slowest winner over the fastest"]
    return markdown(header, rows)


_GRAPH_ROWS = {
    "tuned_replayed_us_per_launch": "**a tuned kernel's launch replayed from a graph**",
    "plain_replayed_us_per_launch": "the same kernel captured plain",
    "eager_us_per_call": "the function eager, the tuned kernel called directly",
    "compiled_graph_break_us_per_call": "the same under `torch.compile` (a graph break at the "
    "kernel)",
    "eager_custom_op_us_per_call": "the function eager, the kernel as `numbatune.torch.custom_op`",
    "compiled_fullgraph_us_per_call": "the same under `torch.compile(fullgraph=True)`",
    "compiled_reduce_overhead_us_per_call": "the same under "
    '`torch.compile(mode="reduce-overhead")`',
}


def graphs(result: dict[str, Any]) -> str:
    """The graph replays' device time per launch, then the host time per call of a function."""
    rows = [
        [label, f"{result[name]:.3f} us" if "replayed" in name else f"{result[name]:.2f} us"]
        for name, label in _GRAPH_ROWS.items()
        if name in result
    ]
    return markdown(["", "per launch or call"], rows)


def levels(result: dict[str, Any]) -> str:
    """Per level, over all the examples: variants tried, tuning time, the loss against
    ``full``'s winners."""
    rows = [
        [
            f"`{level['level']}`",
            str(level["tried"]),
            f"{level['tuning_s']:.2f}",
            _number(level["geomean_vs_full"], 3),
            _number(level["worst_vs_full"], 3),
        ]
        for level in result["summary"]
    ]
    header = ["level", "variants tried", "tuning (s)", "x full's winners, geometric mean",
              "x full's, worst"]  # fmt: skip
    examples = ", ".join(f"`{example['kernel']}`" for example in result["examples"])
    return f"{markdown(header, rows)}\n\nThe examples' kernels: {examples}."


def _rate(row: dict[str, Any]) -> str:
    if "rate" not in row:
        return ""
    return f"{row['rate'] / 1e12:.3f} " + ("TB/s" if row["ceiling"] == "copy" else "TFLOP/s")


def _shape(row: dict[str, Any]) -> str:
    """The largest array's shape (a matrix product's as M^3 where all three are one square)."""
    shapes = [shape for shape in row.get("shape") or [] if shape]
    if not shapes:
        return ""
    first = max(shapes, key=lambda shape: math.prod(shape))
    square = len(first) == 2 and first[0] == first[1]
    if square and row.get("ceiling", "").startswith("cuBLAS") and len(set(map(tuple, shapes))) == 1:
        return f"{size(first[0])}^3"
    if square:
        return f"{size(first[0])}^2"
    return " x ".join(size(n) for n in first)


def ceilings(result: dict[str, Any]) -> str:
    """The ceilings measured, then per example: its winner against its ceiling and its default
    variant, and the library doing the same work where the example names one."""
    rows = [
        [
            f"`{row['kernel']}`",
            _shape(row),
            str(row["variants"]),
            _number(1e6 * row["winner_s"], 1) if row.get("winner_s") else "",
            _rate(row),
            f"**{row['percent_of_ceiling']:.1f}%** of {row['ceiling']}"
            if "percent_of_ceiling" in row
            else "",
            f"{row['default_s'] / row['winner_s']:.2f}x" if row.get("default_s") else "",
            f"{row['baseline']} {1e6 * row['baseline_s']:.1f} us"
            + (
                f" ({row['baseline_percent_of_ceiling']:.1f}%)"
                if "baseline_percent_of_ceiling" in row
                else ""
            )
            if "baseline" in row
            else "",
        ]
        for row in result["examples"]
    ]
    header = ["example", "size", "variants", "time (us)", "rate", "of the ceiling",
              "over the default variant", "library"]  # fmt: skip
    measured = [
        f"{name} {rate / 1e12:.3f} {'TB/s' if name == 'copy' else 'TFLOP/s'} ({value['how']})"
        for name, value in result["ceilings"].items()
        if isinstance(value, dict)
        for rate in [value.get("bytes_per_s") or value.get("flop_per_s")]
    ]
    return f"{markdown(header, rows)}\n\nThe ceilings: {'; '.join(measured)}."


def real_kernels(result: dict[str, Any]) -> str:
    """Per kernel: each side's time per call, host and device, the winner, the first tune, and
    whether the outputs agreed."""
    rows = []
    for name, row in result["kernels"].items():
        if "wall_us" not in row:
            said = row.get("skipped") or row.get("error", "").strip().splitlines()[-1:]
            rows.append([f"`{name}`", *[""] * 6, f"not measured: {''.join(said)}"])
            continue
        wall, device = row["wall_us"], row["device_us"]
        rows.append(
            [
                f"`{name}`",
                f"{wall['original']:.1f}",
                f"{wall['tuned']:.1f}",
                f"{row['ratio']:.3f}x",
                " / ".join(_number(device[side], 1) or "-" for side in ("original", "tuned")),
                row["winner"],
                f"{row['tuning']['seconds']:.2f} s",
                "yes" if row["correct"] else "**no**",
            ]
        )
    header = ["kernel", "the project's launch, us per call", "tuned, us per call", "ratio",
              "device us, project / tuned", "winner", "first tune", "same outputs"]  # fmt: skip
    return markdown(header, rows)


#: Each table's name (its block's in the page), the section it reads, and its writer.
TABLES: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "hits": ("dispatch", hits),
    "streams": ("dispatch", streams),
    "tuning_time": ("tuning_time", tuning_time),
    "accuracy": ("accuracy", accuracy),
    "reproducibility": ("reproducibility", reproducibility),
    "graphs": ("graphs", graphs),
    "levels": ("levels", levels),
    "ceilings": ("ceilings", ceilings),
    "real_kernels": ("real_kernels", real_kernels),
}
