"""What the tuned examples reach: each winner against a hardware ceiling measured in the same run.

Every example function of ``examples/`` (``example(small) -> (tuned_kernel, args)``, and
``example_*``) is tuned; its winner and its default variant (the variant whose parameters equal
the module's globals, if the space has it) are timed carefully. A module that defines
``work(*args) -> {"bytes": n}`` (bytes each read or written once) is held against the
device-to-device copy bandwidth; one that defines ``work(*args) -> {"flops": n}`` against cuBLAS
float32 with TF32 off (through torch); others get their times only. A module that defines
``baseline(*args) -> (name, call)`` also gets the time of ``call()``, a library doing the same
work (torch.softmax, say), measured the same way.
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
    if hasattr(module, "baseline"):  # the same work done by a library, timed alike
        row["baseline"], call = module.baseline(*args)
        row["baseline_s"] = measuring.time_callables({"baseline": call})["baseline"]
    if not hasattr(module, "work"):
        row["ceiling"] = "none: the module defines no work(*args)"
        return row
    amount = module.work(*args)
    row["shape"] = [list(getattr(a, "shape", ())) for a in args]
    if "bytes" in amount:
        row["rate"] = amount["bytes"] / row["winner_s"]
        row["ceiling"] = "copy"
        row["percent_of_ceiling"] = 100 * row["rate"] / ceilings["copy"]["bytes_per_s"]
    elif "flops" in amount and "matmul" in ceilings:
        row["rate"] = amount["flops"] / row["winner_s"]
        row["ceiling"] = "cuBLAS float32"
        row["percent_of_ceiling"] = 100 * row["rate"] / ceilings["matmul"]["flop_per_s"]
    else:
        row["ceiling"] = f"none: work() gave {sorted(amount)} and no such ceiling was measured"
    return row


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
    rows = [
        {
            "module": example.__module__,
            "example": example.__name__,
            **_example(example, smoke, ceilings),
        }
        for example in found
    ]
    return {"ceilings": ceilings, "examples": rows}


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


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
            f"{e['baseline']}: {_us(e['baseline_s'])}" if "baseline" in e else "-",
        ]
        for e in result["examples"]
    ]
    header = ["example", "winner", "time (us)", "vs ceiling", "default", "default (us)", "baseline"]
    return "\n".join([*lines, format_table(header, rows)])
