"""Run the benchmark suite: ``python bench/run.py OUT_DIR [--smoke] [--only SECTION ...]``.

Writes every figure to ``OUT_DIR/results.json`` (rewritten after each section, so a run cut short
keeps what it measured) and prints one table per section. ``--smoke`` runs under numba's CUDA
simulator at tiny sizes to keep the code working; its times mean nothing. docs/benchmarks.md
explains each section.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

# numbatune before numba: without a GPU it turns numba's simulator on (bench.real imports
# neither).
from bench.real import KERNELS  # noqa: E402
from numbatune.arrays import SIMULATOR  # noqa: E402

SECTIONS = [
    "dispatch",
    "first_tune",
    "tuning_time",
    "accuracy",
    "stability",
    "reproducibility",
    "graphs",
    "warm_start",
    "ceilings",
    "levels",
    "search",
    "space_cost",
    "real_kernels",
    "compilers",
]

Progress = Callable[[Any], None]


def _section(name: str) -> Callable[[Path, argparse.Namespace, Progress], Any]:
    """The section's run: a function of the output directory, the command's arguments, and a
    function that records a partial result (sections that measure in parts call it)."""
    if name == "dispatch":
        from bench import dispatch_cost

        return lambda out_dir, arguments, _: dispatch_cost.measure_dispatch(
            out_dir, arguments.smoke
        )
    module = importlib.import_module(f"bench.{name}")
    if name in ("ceilings", "levels"):
        return lambda out_dir, arguments, _: module.run(arguments.smoke, arguments.examples)
    if name == "reproducibility":
        return lambda out_dir, arguments, _: module.run(arguments.smoke, arguments.processes)
    if name == "search":
        return lambda out_dir, arguments, _: module.run(arguments.smoke, arguments.exhaustive)
    if name == "compilers":
        return lambda out_dir, arguments, progress: module.run(
            arguments.smoke, arguments.examples, progress
        )
    if name == "real_kernels":
        return lambda out_dir, arguments, progress: module.run(
            arguments.smoke, progress, tuple(arguments.kernels or KERNELS)
        )
    return lambda out_dir, arguments, _: module.run(arguments.smoke)


def _table(name: str, result: Any) -> str:
    if isinstance(result, dict) and "error" in result:
        return "FAILED: " + result["error"].strip().splitlines()[-1]
    if isinstance(result, str):
        return result
    module = importlib.import_module(
        "bench.dispatch_cost" if name == "dispatch" else f"bench.{name}"
    )
    return module.table(result)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sections, write OUT_DIR/results.json, print the tables; 1 if a section failed."""
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory for results.json")
    parser.add_argument("--smoke", action="store_true", help="simulator, tiny sizes, no claims")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--examples", type=Path, help="example modules (default: examples/)")
    parser.add_argument(
        "--exhaustive", type=Path, help="search: the offline exhaustive run's result file"
    )
    parser.add_argument(
        "--kernels", nargs="+", choices=KERNELS, help="real_kernels: only these (bench/real/)"
    )
    parser.add_argument(
        "--processes", type=int, help="reproducibility: fresh processes (default 8; smoke: 2)"
    )
    arguments = parser.parse_args(argv)
    if arguments.smoke != SIMULATOR:
        parser.error(
            "--smoke runs under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1), and a full run "
            f"needs a GPU; the simulator is {'on' if SIMULATOR else 'off'} here"
        )
    from bench import measuring

    out_dir: Path = arguments.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": measuring.environment(), "sections": {}}
    failed = False
    if SIMULATOR:
        print("bench: smoke run under numba's CUDA simulator; times say nothing about speed.")

    def write(name: str, seconds: float, result: Any, partial: bool = False) -> None:
        results["sections"][name] = {"seconds": seconds, "result": result}
        if partial:
            results["sections"][name]["partial"] = True
        (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))

    with measuring.configured(cache_dir=None):  # every key is tuned, none read from disk
        for name in arguments.only or SECTIONS:
            started = time.perf_counter()

            def progress(partial: Any, name: str = name, started: float = started) -> None:
                write(name, time.perf_counter() - started, partial, partial=True)

            try:
                result = _section(name)(out_dir, arguments, progress)
            except Exception:
                failed = True
                result = {"error": traceback.format_exc()}
            seconds = time.perf_counter() - started
            write(name, seconds, result)
            print(f"\n== {name} ({seconds:.1f} s)\n{_table(name, result)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
