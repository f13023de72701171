"""Reproducible winners: the examples' keys tuned in fresh processes, each from an empty cache.

Every key of ``KEYS`` (one to two shapes of each example kernel, the transpose and saxpy shapes
where winners were seen to change between processes among them) is tuned in ``processes``
fresh processes (8 by default), each with a tune cache directory of its own, empty. A first
process, not counted, compiles every variant into a kernel store that the counted ones share
(the ``kernels`` folder of each fresh cache directory is a link to it): they load the kernels
instead of compiling them, which changes no timing, and no variant is tried again in a separate
process. Each process prints, per key, its winner, the variants tied with it (``report.tied``),
its four fastest, and their medians (those it timed again to settle ties: their second
times).

The parent then times again, with the careful measurement of ``bench/measuring.py``, every
variant any process picked or found among its four fastest, and reports per key how many
processes agreed on the most picked winner, and how far the slowest winner picked lies from the
fastest of the variants timed again (the target: the same winner in every process, within 2%).

``python -m bench.reproducibility OUT_DIR [--processes N] [--quick]`` writes
``OUT_DIR/reproducibility.json``; ``--quick`` runs under numba's simulator, with 2 processes
unless told, two kernels at tiny sizes over 3 variants each, to keep the code working (its
times mean nothing). ``bench/run.py``
runs it as its ``reproducibility`` section.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# numbatune before numba: without a GPU it turns numba's simulator on.
from numbatune.arrays import SIMULATOR

PROCESSES, QUICK_PROCESSES = 8, 2
#: The parent's limit for one process, seconds.
PROCESS_LIMIT_S = 300.0
#: This module, as the processes run it (``python -m``).
_MODULE = "bench.reproducibility"
#: How close to the fastest variant timed again the winners must be.
TARGET = 1.02

#: The example module of each kernel, and the shapes its keys are tuned at (on a GPU; under
#: the simulator with --quick).
KEYS: dict[str, tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]] = {
    "saxpy": ("saxpy", [(1 << 24,), (1 << 26,)], [(64,)]),
    "transpose": ("transpose", [(1024, 16384), (4096, 4096)], [(8, 16)]),
    "softmax": ("softmax", [(4096, 1024)], []),
    "laplace": ("stencil", [(2048, 2048)], []),
    "row_sums": ("reduction", [(1, 1 << 24), (4096, 1024)], []),
    "sgemm": ("sgemm", [(1024, 1024)], []),
    "fast_matmul": ("matmul", [(1024, 1024)], []),
}
#: Under the simulator (--quick), each kernel's first variants only: it runs a block's threads
#: as Python threads.
QUICK_VARIANTS = 3


def _arguments(kernel: str, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """The arguments of ``kernel`` at ``shape``: float32 arrays of ones (no kernel's time
    depends on the values)."""
    import numpy as np
    from numba import cuda

    def ones(dims: tuple[int, ...]) -> Any:
        return cuda.to_device(np.ones(dims, np.float32))

    made: dict[str, Callable[[], tuple[Any, ...]]] = {
        "saxpy": lambda: (np.float32(2.0), ones(shape), ones(shape), ones(shape)),
        "transpose": lambda: (ones(shape), ones(shape[::-1])),
        "row_sums": lambda: (ones(shape), ones(shape[:1])),
    }
    pair = lambda: (ones(shape), ones(shape))  # noqa: E731  (softmax, laplace)
    triple = lambda: (ones(shape), ones(shape), ones(shape))  # noqa: E731  (square products)
    return made.get(kernel, triple if kernel in ("sgemm", "fast_matmul") else pair)()


def _keys(quick: bool) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (kernel, shape)
        for kernel, (_, full, small) in KEYS.items()
        for shape in (small if quick else full)
    ]


@functools.cache
def _kernel(name: str) -> Any:
    """The tuned kernel ``name`` of its example module, loaded as ``numbatune demo`` loads it
    (so that every process gives it the same function id, and the kernel store serves it);
    under the simulator, over its first variants."""
    from numbatune import demo

    module = demo.load_module(demo.find_examples_dir() / f"{KEYS[name][0]}.py")
    kernel = getattr(module, name)
    return kernel.with_variants(kernel.variants[:QUICK_VARIANTS]) if SIMULATOR else kernel


def _label(kernel: str, shape: tuple[int, ...]) -> str:
    return f"{kernel} {'x'.join(map(str, shape))}"


def _child(quick: bool) -> None:
    """(In a fresh process) tune every key; print each one's winner, ties and fastest four."""
    found = {}
    for kernel, shape in _keys(quick):
        report = _kernel(kernel).tune(*_arguments(kernel, shape))
        fastest = [report.results.index(r) for r in report.fastest(4)]
        found[_label(kernel, shape)] = {
            "winner": report.best_index,
            "tied": list(report.tied),
            "fastest": fastest,
            "medians_s": {i: report.results[i].median_s for i in {*fastest, *report.tied}},
        }
    print(json.dumps(found))


def run(smoke: bool, processes: int | None = None) -> dict[str, Any]:
    """Tune the keys in ``processes`` fresh processes (``smoke``: the simulator's sizes), then
    time their winners and fastest variants again; the figures, per key."""
    from bench import measuring

    count = processes or (QUICK_PROCESSES if smoke else PROCESSES)
    arguments = ["--child", *(["--quick"] if smoke else [])]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="numbatune-reproducibility-") as folder:
        store = Path(folder) / "store"
        (store / "kernels").mkdir(parents=True)
        measuring.run_module(
            _MODULE, arguments, {"NUMBATUNE_CACHE_DIR": str(store)}, PROCESS_LIMIT_S
        )  # (compiles; not counted)
        compiled_s = time.perf_counter() - started
        picks: list[dict[str, Any]] = []
        for number in range(count):
            cache_dir = Path(folder) / f"process-{number}"
            cache_dir.mkdir()
            (cache_dir / "kernels").symlink_to(store / "kernels", target_is_directory=True)
            environment = {"NUMBATUNE_CACHE_DIR": str(cache_dir)}
            picks.append(measuring.run_module(_MODULE, arguments, environment, PROCESS_LIMIT_S))
        tuned_s = time.perf_counter() - started - compiled_s
        with measuring.configured(cache_dir=store):  # (its compiled kernels, and no tuning)
            keys = [_judged(kernel, shape, picks) for kernel, shape in _keys(smoke)]
    return {
        "processes": count,
        "keys": keys,
        "agreed_keys": sum(k["agreed"] == count for k in keys),
        "worst_winner_vs_fastest": max(k["worst_winner_vs_fastest"] for k in keys),
        "target": {"agreed": count, "winner_vs_fastest": TARGET},
        "seconds": {
            "first_process": compiled_s,
            "processes": tuned_s,
            "timed_again": time.perf_counter() - started - compiled_s - tuned_s,
        },
    }


def _judged(kernel: str, shape: tuple[int, ...], picks: Sequence[dict[str, Any]]) -> dict:
    """One key's figures: its winners and ties across the processes, and the winners' times
    against the fastest of the variants timed again."""
    from bench import measuring

    label = _label(kernel, shape)
    found = [pick[label] for pick in picks]
    winners = Counter(f["winner"] for f in found)
    again = {i for f in found for i in (f["winner"], *f["fastest"], *f["tied"])}
    tuned = _kernel(kernel)
    times = measuring.true_times(tuned, _arguments(kernel, shape), again)
    fastest = min(t for t in times if t is not None)
    variants = tuned.variants
    return {
        "key": label,
        "winners": {variants[i].label: n for i, n in winners.most_common()},
        "agreed": winners.most_common(1)[0][1],
        "tied": sorted({variants[i].label for f in found for i in f["tied"]}),
        "timed_again": {variants[i].label: times[i] for i in sorted(again)},
        "per_process": [
            {
                "winner": variants[f["winner"]].label,
                "tied": [variants[i].label for i in f["tied"]],
                "medians_s": {variants[int(i)].label: t for i, t in f["medians_s"].items()},
            }
            for f in found
        ],
        "worst_winner_vs_fastest": max(times[i] for i in winners) / fastest,
    }


def table(result: dict[str, Any]) -> str:
    """One row per key: the processes that agreed, the winners, and how far they lie from the
    fastest variant timed again."""
    from numbatune.demo import format_table

    rows = [
        [
            k["key"],
            f"{k['agreed']}/{result['processes']}",
            ", ".join(f"{label} x{n}" for label, n in k["winners"].items()),
            f"{k['worst_winner_vs_fastest']:.4f}",
            str(len(k["tied"])),
        ]
        for k in result["keys"]
    ]
    header = ["key", "agreed", "winners", "worst winner/fastest", "tied"]
    return (
        f"{result['agreed_keys']} of {len(result['keys'])} keys: the same winner in all "
        f"{result['processes']} processes\n" + format_table(header, rows)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.reproducibility OUT_DIR [--processes N] [--quick]``."""
    parser = argparse.ArgumentParser(
        prog="bench/reproducibility.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out_dir", type=Path, help="directory for reproducibility.json")
    parser.add_argument("--processes", type=int, help=f"fresh processes (default {PROCESSES})")
    parser.add_argument("--quick", action="store_true", help="simulator, tiny sizes, no claims")
    arguments = parser.parse_args(argv)
    from bench import measuring

    if arguments.quick != SIMULATOR:
        parser.error(
            "--quick runs under numba's CUDA simulator, and a full run needs a GPU; "
            f"the simulator is {'on' if SIMULATOR else 'off'} here"
        )

    result = run(arguments.quick, arguments.processes)
    arguments.out_dir.mkdir(parents=True, exist_ok=True)
    document = {"environment": measuring.environment(), "result": result}
    (arguments.out_dir / "reproducibility.json").write_text(json.dumps(document, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        _child(quick="--quick" in sys.argv)
    else:
        sys.exit(main())
