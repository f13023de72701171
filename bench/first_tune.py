"""First tune of a new key in a fresh process with a cold cache; the first call of a fresh
process whose key is stored; and numbatune's cold first tune against Triton's autotune.

Every case runs in a process of its own (``python -m bench.first_tune CHILD ...``) with an
empty cache directory, so nothing is compiled or tuned beforehand: what is timed is what a
user's first call costs once its arguments exist (the CUDA context is made by the arguments).
For each example: the first ``tune`` (its compile and benchmark parts from the report) and the
launch after it; then a second fresh process with the same cache, whose first call must compile
nothing. Against Triton: the same computation (out = a * x + y) with 64 variants against 64
configs, each tool cold in its own process (Triton's cache directory empty too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: (label, example file, example function, or ``function:size`` for ``function(size=size)``)
#: for each case.
CASES = [
    ("sgemm 4096^3", "sgemm", "example"),
    ("sgemm 1024^3", "sgemm", "example:1024"),  # the size of issue 18's first measurement
    ("softmax 16384x1024", "softmax", "example"),
    ("stencil", "stencil", "example"),
    ("row sums", "reduction", "example_rows"),
    ("saxpy", "saxpy", "example"),
]
SMOKE_CASES = [("saxpy", "saxpy", "example")]


def _child_example(mode: str, file: str, function: str, small: bool) -> dict[str, Any]:
    import numbatune  # noqa: F401  (first: it chooses the simulator when there is no GPU)
    from bench import measuring
    from numbatune.demo import load_module
    from numbatune.testing import covering_variants

    log = _compile_log()
    module = load_module(ROOT / "examples" / f"{file}.py")
    name, _, size = function.partition(":")  # FUNCTION:SIZE passes size=SIZE
    tuned, args = getattr(module, name)(small, **({"size": int(size)} if size else {}))
    if small:  # the simulator: a few variants that take every value
        tuned = tuned.with_variants(covering_variants(tuned))
    measuring.synchronize()
    started = time.perf_counter()
    report = tuned.tune(*args) if mode == "tune" else None
    tuned(*args)
    measuring.synchronize()
    result = {"seconds": time.perf_counter() - started, "stats": tuned.stats, "compile_log": log}
    if report is not None:
        result |= {
            "variants": len(tuned.variants),
            "compile_s": report.compile_s,
            "benchmark_s": report.benchmark_s,
            "trial_s": report.trial_s,
            "screened_out": report.screened_out,
            "compiles": report.compiles,
            "best": report.winner.label,
            "not timed": {
                r.variant.label: f"{r.status}: {r.outcome}"[:300]
                for r in report.results
                if r.status not in ("timed", "stopped early")
            },
        }
    return result


def _compile_log() -> list[str]:
    """The compile summaries numbatune logs (workers, seconds), collected as they come."""
    import logging

    from numbatune.config import settings

    lines = [f"{os.cpu_count()} cores, {settings.compile_workers} compile workers"]

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "worker processes in" in record.getMessage():
                lines.append(record.getMessage())

    logger = logging.getLogger("numbatune")
    logger.setLevel(logging.INFO)
    logger.addHandler(Collect())
    return lines


def _child_scale_add(tool: str, small: bool) -> dict[str, Any]:
    if tool == "triton":
        from bench import triton_scale_add

        return triton_scale_add.first_tune(64, 1 << 24)
    import numbatune as nt
    from bench import kernels, measuring
    from bench.tuning_time import SMOKE_SPACES, SPACES

    variants = SMOKE_SPACES[2] if small else SPACES[64]
    tuned = nt.autotune(kernels.scale_add, variants=variants, launch=kernels.scale_add_launch)
    args = kernels.case("scale_add").arguments(64 if small else 1 << 24)
    measuring.synchronize()
    started = time.perf_counter()
    tuned(*args)
    measuring.synchronize()
    return {"seconds": time.perf_counter() - started, "stats": tuned.stats}


def _spawn(arguments: list[str], cache: Path) -> dict[str, Any]:
    environment = {**os.environ, "NUMBATUNE_CACHE_DIR": str(cache)}
    environment["TRITON_CACHE_DIR"] = str(cache / "triton")
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "bench.first_tune", *arguments],
        env=environment, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(smoke: bool) -> dict[str, Any]:
    """Every case in fresh processes; see the module's docstring."""
    small = ["--small"] if smoke else []
    results: dict[str, Any] = {"examples": {}, "scale_add_64": {}}
    for label, file, function in SMOKE_CASES if smoke else CASES:
        with tempfile.TemporaryDirectory(prefix="numbatune-first-") as cache:
            first = _spawn(["example", "tune", file, function, *small], Path(cache))
            stored = _spawn(["example", "call", file, function, *small], Path(cache))
        results["examples"][label] = {"first_tune": first, "stored_first_call": stored}
    for tool in ("numbatune",) if smoke else ("numbatune", "triton"):
        with tempfile.TemporaryDirectory(prefix="numbatune-first-") as cache:
            results["scale_add_64"][tool] = _spawn(["scale_add", tool, *small], Path(cache))
    return results


def table(result: dict[str, Any]) -> str:
    """One row per example; then the comparison with Triton."""
    from numbatune.demo import format_table

    rows = []
    for label, r in result["examples"].items():
        first, stored = r["first_tune"], r["stored_first_call"]
        if "error" in first or "error" in stored:
            rows.append([label, "failed: " + (first.get("error") or stored["error"])[-80:]])
            continue
        rows.append([
            label, str(first["variants"]), f"{first['seconds']:.2f}", f"{first['compile_s']:.2f}",
            f"{first['trial_s']:.2f}", f"{first['benchmark_s']:.2f}", str(first["compiles"]),
            f"{stored['seconds']:.3f}",
            str(stored["stats"]["compiles"]), str(stored["stats"]["loaded"]),
        ])  # fmt: skip
    header = ["example", "variants", "first tune+launch (s)", "compile (s)", "trial runs (s)",
              "benchmark (s)",
              "compiles", "stored: first call (s)", "compiles", "loaded"]  # fmt: skip
    lines = [format_table(header, rows)]
    tools = result["scale_add_64"]
    seconds = {t: r.get("seconds") for t, r in tools.items()}
    timed = [f"{t} {s:.2f} s" if s is not None else f"{t} failed" for t, s in seconds.items()]
    lines.append("scale_add, 64 variants / configs, cold first call: " + ", ".join(timed))
    if seconds.get("triton") and seconds.get("numbatune"):
        lines.append(f"Triton / numbatune: {seconds['triton'] / seconds['numbatune']:.1f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    small = "--small" in rest
    rest = [r for r in rest if r != "--small"]
    if kind == "example":
        print(json.dumps(_child_example(rest[0], rest[1], rest[2], small)))
    else:
        print(json.dumps(_child_scale_add(rest[0], small)))
