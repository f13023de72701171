"""What the tuned examples reach: each winner against a hardware ceiling measured in the same run.

Every example function of ``examples/`` (``example(small) -> (tuned_kernel, args)``, and
``example_*``) is tuned; its winner and its default variant (the variant whose parameters equal
the module's globals, if the space has it) are timed carefully. A module that defines
``work(*args) -> {"bytes": n}`` (bytes each read or written once) is held against the
device-to-device copy bandwidth; one that defines ``work(*args) -> {"flops": n}`` against cuBLAS
float32 with TF32 off (through torch); others get their times only. A module that defines
``baseline(*args) -> (name, call)`` also gets the time of ``call()``, a library doing the same
work (torch.softmax, say), measured the same way, and the library's rate against the same
ceiling. Every variant's careful time is kept (``times_s``), and a line per example is printed
as it is done (its winner, the library, and its five fastest variants).

The copy ceiling counts bytes read and written, and a copy turns the memory bus around between
reads and writes; a kernel that only reads (a sum) can pass it, so for the sums the library
doing the same reads (``torch.sum``) is the comparison that says how close to the limit they are.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

from bench import measuring
from numbatune import demo
from numbatune.demo import format_table

COPY_BYTES, SMOKE_COPY_BYTES = 1 << 30, 1 << 12
MATMUL_N = 4096


def copy_bandwidth(smoke: bool) -> dict[str, Any]:
    """Device-to-device copy, bytes read plus written per second (torch, else numba)."""
    size = SMOKE_COPY_BYTES if smoke else COPY_BYTES
    torch = _torch_with_cuda()
    if torch is not None:
        source = torch.rand(size // 4, device="cuda")
        destination = torch.empty_like(source)
        copy: Callable[[], None] = lambda: destination.copy_(source)  # noqa: E731
        how = "torch copy_"
    else:  # no torch, or a build of it without CUDA (CI's, under the simulator)
        host = np.random.default_rng(0).random(size // 4, dtype=np.float32)
        source, destination = cuda.to_device(host), cuda.device_array_like(host)
        copy = lambda: destination.copy_to_device(source)  # noqa: E731
        how = "numba copy_to_device"
    seconds = measuring.time_callables({"copy": copy})["copy"]
    return {"how": how, "bytes": 2 * size, "seconds": seconds, "bytes_per_s": 2 * size / seconds}


def _torch_with_cuda() -> Any:
    """torch, if it is installed and can use a GPU; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def matmul_rate() -> dict[str, Any]:
    """cuBLAS float32 (TF32 off) FLOP/s at MATMUL_N cubed, through torch."""
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "ieee"
    else:
        matmul.allow_tf32 = False
    a = torch.rand(MATMUL_N, MATMUL_N, device="cuda")
    b = torch.rand(MATMUL_N, MATMUL_N, device="cuda")
    c = torch.empty_like(a)
    seconds = measuring.time_callables({"mm": lambda: torch.mm(a, b, out=c)})["mm"]
    reference = torch.mm(a.double(), b.double())
    error = float(torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference))
    flops = 2 * MATMUL_N**3
    return {
        "how": "torch.mm, TF32 off",
        "flops": flops,
        "seconds": seconds,
        "flop_per_s": flops / seconds,
        # float32 arithmetic lands far under 1e-4; TF32 near 3e-4.
        "relative_error_vs_float64": error,
    }


def _default_variant(module: Any, variants: list) -> int | None:
    for index, variant in enumerate(variants):
        if all(getattr(module, k, object()) == v for k, v in variant.params.items()):
            return index
    return None


def _example(example: demo.Example, smoke: bool, ceilings: dict[str, Any]) -> dict[str, Any]:
    module = sys.modules[example.__module__]
    tuned, args = example(smoke)
    report = tuned.tune(*args)
    variants = tuned.variants
    default = _default_variant(module, variants)
    true = measuring.true_times(tuned, args)
    row: dict[str, Any] = {
        "kernel": tuned.name,
        "variants": len(variants),
        "winner": variants[report.best_index].label,
        "winner_s": true[report.best_index],
        "default": None if default is None else variants[default].label,
        "default_s": None if default is None else true[default],
    }
    row["times_s"] = {
        variant.label: seconds for variant, seconds in zip(variants, true, strict=True)
    }
    if hasattr(module, "baseline"):  # the same work done by a library, timed alike
        row["baseline"], call = module.baseline(*args)
        row["baseline_s"] = measuring.time_callables({"baseline": call})["baseline"]
    if not hasattr(module, "work"):
        row["ceiling"] = "none: the module defines no work(*args)"
        return row
    amount = module.work(*args)
    row["shape"] = [list(getattr(a, "shape", ())) for a in args]
    if "bytes" in amount:
        row["ceiling"], unit, ceiling = "copy", "bytes", ceilings["copy"]["bytes_per_s"]
    elif "flops" in amount and "matmul" in ceilings:
        row["ceiling"], unit = "cuBLAS float32", "flops"
        ceiling = ceilings["matmul"]["flop_per_s"]
    else:
        row["ceiling"] = f"none: work() gave {sorted(amount)} and no such ceiling was measured"
        return row
    row["rate"] = amount[unit] / row["winner_s"]
    row["percent_of_ceiling"] = 100 * row["rate"] / ceiling
    if "baseline_s" in row:
        row["baseline_rate"] = amount[unit] / row["baseline_s"]
        row["baseline_percent_of_ceiling"] = 100 * row["baseline_rate"] / ceiling
    return row


def _progress(row: dict[str, Any]) -> str:
    """One line on an example just measured: its winner, the library's time, its fastest."""
    fastest = sorted((t, label) for label, t in row["times_s"].items() if t is not None)[:5]
    share = f" {row['percent_of_ceiling']:.1f}% of {row['ceiling']}" if "rate" in row else ""
    library = ""
    if "baseline_s" in row:
        library = f"; {row['baseline']} {_us(row['baseline_s'])} us"
        if "baseline_percent_of_ceiling" in row:
            library += f" ({row['baseline_percent_of_ceiling']:.1f}%)"
    top = "; ".join(f"{_us(t)} {label}" for t, label in fastest)
    return f"ceilings: {row['kernel']} {_us(row['winner_s'])} us{share}{library} | {top}"


def run(smoke: bool, examples_dir: Path | None = None) -> dict[str, Any]:
    """Measure the ceilings, then tune and time every example of ``examples_dir``."""
    ceilings: dict[str, Any] = {"copy": copy_bandwidth(smoke)}
    if not smoke:
        try:
            ceilings["matmul"] = matmul_rate()
        except ImportError as error:
            ceilings["matmul"] = f"not measured: {error}"
    try:
        found = demo.load_examples(examples_dir or demo.find_examples_dir())
    except FileNotFoundError as error:
        return {"ceilings": ceilings, "examples": [], "missing": str(error)}
    rows = []
    for example in found:
        row = {"module": example.__module__, "example": example.__name__}
        rows.append(row | _example(example, smoke, ceilings))
        print(_progress(rows[-1]), flush=True)
    return {"ceilings": ceilings, "examples": rows}


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def _library(row: dict[str, Any]) -> str:
    """The library's time, and its share of the ceiling where there is one."""
    if "baseline" not in row:
        return "-"
    share = row.get("baseline_percent_of_ceiling")
    return f"{row['baseline']}: {_us(row['baseline_s'])}" + (
        "" if share is None else f" ({share:.1f}%)"
    )


def table(result: dict[str, Any]) -> str:
    """The ceilings, then one row per example."""
    lines = []
    for name, value in result["ceilings"].items():
        if isinstance(value, dict):
            rate = value.get("bytes_per_s") or value.get("flop_per_s")
            lines.append(f"{name} ceiling: {rate / 1e12:.3f} T/s ({value['how']})")
        else:
            lines.append(f"{name} ceiling: {value}")
    rows = [
        [
            e["kernel"],
            e["winner"],
            _us(e["winner_s"]),
            f"{e['percent_of_ceiling']:.1f}% of {e['ceiling']}"
            if "percent_of_ceiling" in e
            else e["ceiling"],
            e["default"] or "-",
            _us(e["default_s"]),
            _library(e),
        ]
        for e in result["examples"]
    ]
    header = ["example", "winner", "time (us)", "vs ceiling", "default", "default (us)", "library"]
    return "\n".join([*lines, format_table(header, rows)])
