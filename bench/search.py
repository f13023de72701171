"""Searching large spaces (issue 22): searches with a 60 s budget against exhaustive runs.

Three examples, each over a widened space (:data:`SPACES`), at the examples' full sizes:

- ``sgemm`` (``examples/sgemm.py``, 4096^3, 1,120 variants): block tiles of 32 to 256 rows and
  columns, K slices of 8, 16 and 32, thread tiles from 4 x 4 to 16 x 8, both thread layouts,
  and no register cap or a cap of 128, 168 or 232, filtered to what the kernel can run (64 to
  512 threads, whole loads per thread, at most 48 KiB of shared memory); the shared tiles
  aligned to 16 bytes, and A's padded by 4 words a row where that still fits in 48 KiB.
- ``softmax`` (``examples/softmax.py``, 16384 x 16384, 630 variants): 1 to 32 warps a row, 1
  to 16 rows a block (128 to 1024 threads), 1 to 64 columns a thread keeps, fast or exact math,
  and no register cap or a cap of 64 or 128.
- ``stencil`` (``examples/stencil.py``, 16384^2, 408 variants): blocks of 32 to 256 threads, 1
  to 8 columns by 1 to 16 rows of points a thread (at most 32), neighbours read or from warp
  shuffles, and no register cap or a cap of 32 or 64.

Each search runs in a fresh process with an empty cache directory: a ``pattern``, a ``random``
and a ``model`` search with a budget of 60 s (compiling, trial runs and timing included); then the
careful measurement times its winner, and the exhaustive run's winner when its result file is
given, in the same process (sgemm: against cuBLAS float32, TF32 off, too). The exhaustive run
of a space (``python -m bench.search exhaustive EXAMPLE OUT.json``) takes far longer and is run
once, offline, with ``NUMBATUNE_CACHE_DIR`` kept between runs: a run cut short goes on where it
stopped (numbatune.cache.journal). Its result file (every variant's tuned median and the best
variant) is what the searches are held against (``--exhaustive DIR``: DIR/EXAMPLE.json), and
what ``python -m bench.search replay EXAMPLE EXHAUSTIVE.json TRIES BATCH SEEDS`` replays each
strategy against, once per seed, with no GPU (:func:`replay`). A result file holds the space of
its day: ``bench/results/search-exhaustive-h100-2026-11-24/stencil.json`` replays with the
stencil example and space of then (commit a6d9b6c or before), not with today's.

``--smoke`` (CI, under numba's simulator): tiny arguments, a few variants of each space, and
each strategy on one example; the times mean nothing.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What each search case may spend.
BUDGET_S = 60.0
STRATEGIES = ("pattern", "random", "model")


def _sgemm_tiles_fit(bm: int, bn: int, bk: int, pad: int) -> bool:
    """Whether sgemm's shared tiles (two buffers of A's, padded by ``pad`` words a row, and of
    B's) fit in the 48 KiB a block may declare."""
    return 2 * bk * (bm + pad + bn) * 4 <= 48 * 1024


def sgemm_space(smoke: bool = False) -> list[Any]:
    """The widened sgemm space (see the module's docstring)."""
    blocks = [32, 64] if smoke else [32, 64, 128, 256]
    tiles = [(4, 4)] if smoke else [(4, 4), (4, 8), (8, 4), (8, 8), (8, 16), (16, 8)]
    caps = [None] if smoke else [None, 128, 168, 232]
    space = []
    for bm, bn, bk, (tm, tn), spread, cap in itertools.product(
        blocks, blocks, [8] if smoke else [8, 16, 32], tiles, [False, True], caps
    ):
        threads = (bm // tm) * (bn // tn)
        if tm > bm or tn > bn or not 64 <= threads <= 512 or threads % bn:
            continue
        if (bm * bk) % threads or (bk * bn) % threads or not _sgemm_tiles_fit(bm, bn, bk, 0):
            continue
        if smoke and bm * bn > 32 * 32:
            continue
        params = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "SPREAD": spread}
        params |= dict(THREADS=threads, LOADS_A=bm * bk // threads, LOADS_B=bk * bn // threads)
        if not smoke:  # (the simulator takes no alignment) A's rows padded where they fit
            params |= {"PAD": 4 if _sgemm_tiles_fit(bm, bn, bk, 4) else 0, "ALIGN": 16}
        space.append(_capped(params, cap))
    return space


def softmax_space(smoke: bool = False) -> list[Any]:
    """The widened softmax space (see the module's docstring)."""
    space = []
    for warps, rows, items, fast, cap in itertools.product(
        [4] if smoke else [1, 2, 4, 8, 16, 32],
        [1] if smoke else [1, 2, 4, 8, 16],
        [1, 8] if smoke else [1, 2, 4, 8, 16, 32, 64],
        [False] if smoke else [False, True],
        [None] if smoke else [None, 64, 128],
    ):
        threads = 32 * warps * rows  # a block of 1024 threads has 64 registers a thread
        if not 128 <= threads <= 1024 or (threads > 512 and items > 16):
            continue
        if cap == 64 and items > 32:
            continue
        space.append(_capped({"WARPS": warps, "ROWS": rows, "ITEMS": items}, cap, fastmath=fast))
    return space


def stencil_space(smoke: bool = False) -> list[Any]:
    """The widened stencil space (see the module's docstring)."""
    space = []
    for bx, cols, rows, shuffle, cap in itertools.product(
        [64] if smoke else [32, 64, 128, 256],
        [2] if smoke else [1, 2, 4, 8],
        [2, 4] if smoke else [1, 2, 4, 8, 16],
        [False] if smoke else [False, True],
        [None] if smoke else [None, 32, 64],
    ):
        if cols * rows <= 32:
            params = {"BX": bx, "COLS": cols, "ROWS": rows, "SHUFFLE": shuffle}
            space.append(_capped(params, cap))
    return space


def _capped(params: dict[str, Any], cap: int | None, **jit: Any) -> Any:
    import numbatune as nt

    capped = {} if cap is None else {"max_registers": cap}
    return nt.Variant(params, **jit, **capped)


#: Each example's widened space.
SPACES: dict[str, Callable[[bool], list[Any]]] = {
    "sgemm": sgemm_space,
    "softmax": softmax_space,
    "stencil": stencil_space,
}


def _case(example: str, strategy: str, smoke: bool, best_known: str | None) -> dict[str, Any]:
    """(In a fresh process) tune ``example``'s widened space with ``strategy``, and time its
    winner (and the variant labelled ``best_known``) carefully."""
    import numbatune as nt
    from bench import measuring
    from bench.ceilings import matmul_rate
    from numbatune.demo import load_module

    module = load_module(ROOT / "examples" / f"{example}.py")
    tuned, args = module.example(smoke)
    budget = nt.Budget(variants=None, seconds=BUDGET_S) if strategy != "exhaustive" else None
    wide = tuned.with_variants(
        SPACES[example](smoke),
        name=f"{example}_wide",
        search=strategy,
        budget=nt.Budget(variants=3) if smoke and budget else budget,
    )
    measuring.synchronize()
    started = time.perf_counter()
    report = wide.tune(*args)
    seconds = time.perf_counter() - started
    best = report.winner
    calls = {"winner": lambda: wide.run_variant(best, *args)}
    known = next((v for v in wide.variants if v.label == best_known), None)
    if known is not None and known != best:
        calls["exhaustive's winner"] = lambda: wide.run_variant(known, *args)
    # Under the simulator (smoke) times say nothing: the tuning's own median stands in for
    # the careful timing, which would run each kernel dozens of times more.
    careful = (
        {"winner": report.results[report.best_index].median_s}
        if smoke
        else measuring.time_callables(calls)
    )
    result = {
        "strategy": str(report.strategy),
        "space": report.space,
        "tried": report.tried,
        "seconds": seconds,
        "compile_s": report.compile_s,
        "trial_s": report.trial_s,
        "benchmark_s": report.benchmark_s,
        "compiles": report.compiles,
        "winner": best.label,
        "winner_s": careful["winner"],
        "medians": {r.variant.label: r.median_s for r in report.results if r.tried},
    }
    if known is not None:
        result["winner_over_exhaustive"] = careful["winner"] / careful.get(
            "exhaustive's winner", careful["winner"]
        )
    if example == "sgemm" and not smoke:
        result["cublas"] = matmul_rate()
        flops = 2 * args[0].shape[0] * args[0].shape[1] * args[1].shape[1]
        result["percent_of_cublas"] = (
            100 * flops / careful["winner"] / result["cublas"]["flop_per_s"]
        )
    return result


def run(
    smoke: bool, exhaustive: Path | None = None, examples: Sequence[str] = tuple(SPACES)
) -> dict[str, Any]:
    """Each search of each example in a fresh process; held against the exhaustive runs'
    result files in the folder ``exhaustive`` (``EXAMPLE.json``), where given."""
    from bench import measuring

    result: dict[str, Any] = {}
    for index, example in enumerate(examples):
        space = SPACES[example]
        known = exhaustive / f"{example}.json" if exhaustive is not None else None
        best = json.loads(known.read_text()) if known is not None and known.exists() else None
        cases = {}
        # The smoke run keeps the code working: each strategy once, over the examples in turn.
        strategies = (STRATEGIES[index % len(STRATEGIES)],) if smoke else STRATEGIES
        for strategy in strategies:
            with tempfile.TemporaryDirectory(prefix="numbatune-search-") as cache:
                arguments = ["case", example, strategy, *(["--smoke"] if smoke else [])]
                arguments += ["--best", best["winner"]] if best is not None else []
                cases[strategy] = measuring.run_module(
                    "bench.search", arguments, {"NUMBATUNE_CACHE_DIR": cache}
                )
        result[example] = {"space": len(space(smoke)), "cases": cases}
        if best is not None:
            result[example]["exhaustive"] = {
                k: best[k] for k in ("winner", "winner_s", "seconds", "tried")
            }
    return result


def replay(
    example: str, exhaustive: dict[str, Any], tries: int, batch: int, seeds: int
) -> dict[str, Any]:
    """Each strategy's search of ``example``'s space run again ``seeds`` times, each with its
    own seed, with the exhaustive run's medians as the times it measures (no GPU, no noise:
    Kernel Tuner's simulation mode): how often ``tries`` builds (variants built together
    count once: they cost about one compile), proposed ``batch`` at a time and measured with
    their siblings as a tuning would, find one within 2% of the exhaustive run's best."""
    import random
    import statistics

    from numbatune.demo import load_module
    from numbatune.strategies import Strategy
    from numbatune.tuning import search

    space = SPACES[example](False)
    tuned, _ = load_module(ROOT / "examples" / f"{example}.py").example(True)
    build_key = tuned._template.build_key
    together = search.siblings(space, build_key)
    medians = exhaustive["medians"]
    times = {v: medians.get(v.label) for v in space}
    fastest = min(t for t in times.values() if t is not None)
    result: dict[str, Any] = {"tries": tries, "batch": batch, "seeds": seeds}
    for strategy in STRATEGIES:
        ratios, measured_counts = [], []
        for seed in range(seeds):
            proposer = search.proposer(Strategy(strategy), space, [], random.Random(seed), batch)
            measured: dict[Any, float | None] = {}
            built: set[Any] = set()
            best = None
            while len(built) < tries:
                count = min(batch, tries - len(built))
                proposal, _ = search.next_batch(proposer, measured, best, count, together,
                                                build_key)  # fmt: skip
                if not proposal:
                    break
                measured.update({v: times[v] for v in proposal})
                built.update(build_key(v) for v in proposal)
                best = min((v for v, t in measured.items() if t is not None),
                           key=lambda v: measured[v], default=None)  # fmt: skip
            ratios.append(math.inf if best is None else measured[best] / fastest)
            measured_counts.append(len(measured))
        result[strategy] = {
            "within_2_percent": sum(r <= 1.02 for r in ratios),
            "median": statistics.median(ratios),
            "worst": max(ratios),
            "variants_measured": statistics.mean(measured_counts),
        }
    return result


def table(result: dict[str, Any]) -> str:
    """One row per search of each example (and the exhaustive run, if given)."""
    from numbatune.demo import format_table

    rows = []
    for example, searched in result.items():
        runs = {**searched["cases"], **({"exhaustive": searched["exhaustive"]}
                                         if "exhaustive" in searched else {})}  # fmt: skip
        for name, case in runs.items():
            if "error" in case:
                rows.append([example, name, "failed: " + case["error"][-80:]])
                continue
            rows.append([
                example, name, f"{case['tried']}/{searched['space']}", f"{case['seconds']:.1f}",
                case["winner"], f"{case['winner_s'] * 1e6:.1f}",
                f"{case['winner_over_exhaustive']:.4f}" if "winner_over_exhaustive" in case else "",
                f"{case['percent_of_cublas']:.1f}" if "percent_of_cublas" in case else "",
            ])  # fmt: skip
    header = ["example", "search", "tried", "tuning (s)", "winner", "winner (us)",
              "x exhaustive's", "% of cuBLAS"]  # fmt: skip
    return format_table(header, rows)


if __name__ == "__main__":
    kind, example, *rest = sys.argv[1:]
    if kind == "case":  # python -m bench.search case EXAMPLE STRATEGY [--smoke] [--best LABEL]
        logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(message)s")
        logging.getLogger("numbatune").setLevel(logging.DEBUG)  # each batch, on stderr
        best_known = rest[rest.index("--best") + 1] if "--best" in rest else None
        print(json.dumps(_case(example, rest[0], "--smoke" in rest, best_known)))
    elif kind == "exhaustive":  # python -m bench.search exhaustive EXAMPLE OUT.json: offline
        logging.basicConfig(level=logging.INFO)  # where a long run is: compiles, the tuning
        logging.getLogger("numbatune").setLevel(logging.DEBUG)  # each measured chunk, too
        Path(rest[0]).write_text(json.dumps(_case(example, "exhaustive", False, None), indent=1))
    elif kind == "replay":  # ... replay EXAMPLE EXHAUSTIVE.json TRIES BATCH SEEDS: no GPU
        tries, batch, seeds = (int(n) for n in rest[1:4])
        replayed = replay(example, json.loads(Path(rest[0]).read_text()), tries, batch, seeds)
        print(json.dumps(replayed, indent=1))
    elif kind == "searches":  # python -m bench.search searches EXAMPLE EXHAUSTIVE_DIR OUT.json
        searched = run(False, Path(rest[0]), [example])
        Path(rest[1]).write_text(json.dumps(searched, indent=1))
        print(table(searched))
