"""Searching a large space (issue 22): searches with a 60 s budget against an exhaustive run.

The kernel is ``examples/sgemm.py``'s at 4096^3, over a widened space (:func:`wide_space`):
block tiles of 32 to 256 rows and columns, K slices of 8, 16 and 32, thread tiles from 4 x 4
to 16 x 8, both thread layouts, and no register cap or a cap of 128, 168 or 232, filtered to
what the kernel can run (64 to 512 threads, whole loads per thread, at most 48 KiB of shared
memory): 1120 variants. Each case runs in a
fresh process with an empty cache: a ``pattern`` and a ``random`` search with a budget of 60 s
(compiling, trial runs and timing included), each winner then timed by the careful
measurement against cuBLAS float32 (TF32 off) in the same process. The exhaustive run of the
same space (``python -m bench.search exhaustive OUT.json``) takes far longer and is run once,
offline; its result file (every variant's tuned median and the best variant's careful time)
is what the searches are held against (``--exhaustive FILE``).

``--smoke`` (CI, under numba's simulator): tiny matrices and the few variants of the space
with 4 x 4 thread tiles and blocks of at most 32 x 32; the times mean nothing.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What each search case may spend.
BUDGET_S = 60.0
STRATEGIES = ("pattern", "random")


def wide_space(smoke: bool = False) -> list[Any]:
    """The widened sgemm space (see the module's docstring)."""
    import numbatune as nt

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
        if (bm * bk) % threads or (bk * bn) % threads or 2 * bk * (bm + bn) * 4 > 48 * 1024:
            continue
        if smoke and bm * bn > 32 * 32:
            continue
        params = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "SPREAD": spread}
        params |= dict(THREADS=threads, LOADS_A=bm * bk // threads, LOADS_B=bk * bn // threads)
        space.append(nt.Variant(params) if cap is None else nt.Variant(params, max_registers=cap))
    return space


def _case(strategy: str, smoke: bool) -> dict[str, Any]:
    """(In a fresh process) tune the wide sgemm with ``strategy`` and time its winner."""
    import numbatune as nt
    from bench import measuring
    from bench.ceilings import matmul_rate
    from numbatune.demo import load_module

    module = load_module(ROOT / "examples" / "sgemm.py")
    tuned, args = module.example(smoke)
    budget = nt.Budget(variants=None, seconds=BUDGET_S) if strategy != "exhaustive" else None
    wide = tuned.with_variants(
        wide_space(smoke),
        name="sgemm_wide",
        search=strategy,
        budget=nt.Budget(variants=3) if smoke and budget else budget,
    )
    measuring.synchronize()
    started = time.perf_counter()
    report = wide.tune(*args)
    seconds = time.perf_counter() - started
    best = report.best_variant
    careful = measuring.time_callables({"winner": lambda: wide.run_variant(best, *args)})
    result = {
        "strategy": str(report.strategy),
        "space": report.space,
        "tried": report.tried,
        "seconds": seconds,
        "compile_s": report.compile_s,
        "trial_s": report.trial_s,
        "benchmark_s": report.benchmark_s,
        "winner": best.label,
        "winner_s": careful["winner"],
        "medians": {r.variant.label: r.median_s for r in report.results if r.tried},
    }
    if not smoke:
        result["cublas"] = matmul_rate()
        flops = 2 * args[0].shape[0] * args[0].shape[1] * args[1].shape[1]
        result["percent_of_cublas"] = (
            100 * flops / careful["winner"] / result["cublas"]["flop_per_s"]
        )
    return result


def run(smoke: bool, exhaustive: Path | None = None) -> dict[str, Any]:
    """Each search in a fresh process; held against ``exhaustive`` (a result file) if given."""
    from bench import measuring

    cases = {}
    for strategy in STRATEGIES:
        with tempfile.TemporaryDirectory(prefix="numbatune-search-") as cache:
            environment = {"NUMBATUNE_CACHE_DIR": cache}
            arguments = ["case", strategy, *(["--smoke"] if smoke else [])]
            cases[strategy] = measuring.run_module("bench.search", arguments, environment)
    result: dict[str, Any] = {"space": len(wide_space(smoke)), "cases": cases}
    if exhaustive is not None:
        best = json.loads(exhaustive.read_text())
        result["exhaustive"] = {k: best[k] for k in ("winner", "winner_s", "seconds", "tried")}
        for case in cases.values():
            if "winner_s" in case:
                case["winner_over_exhaustive"] = case["winner_s"] / best["winner_s"]
    return result


def table(result: dict[str, Any]) -> str:
    """One row per search (and the exhaustive run, if given)."""
    from numbatune.demo import format_table

    rows = []
    runs = {
        **result["cases"],
        **({"exhaustive": result["exhaustive"]} if "exhaustive" in result else {}),
    }
    for name, case in runs.items():
        if "error" in case:
            rows.append([name, "failed: " + case["error"][-80:]])
            continue
        rows.append([
            name, f"{case['tried']}/{result['space']}", f"{case['seconds']:.1f}", case["winner"],
            f"{case['winner_s'] * 1e6:.1f}",
            f"{case['winner_over_exhaustive']:.4f}" if "winner_over_exhaustive" in case else "",
            f"{case['percent_of_cublas']:.1f}" if "percent_of_cublas" in case else "",
        ])  # fmt: skip
    header = ["search", "tried", "tuning (s)", "winner", "winner (us)", "x exhaustive's",
              "% of cuBLAS"]  # fmt: skip
    return format_table(header, rows)


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "case":
        print(json.dumps(_case(rest[0], "--smoke" in rest)))
    elif kind == "exhaustive":  # python -m bench.search exhaustive OUT.json: the offline run
        logging.basicConfig(level=logging.INFO)  # where a long run is: compiles, the tuning
        Path(rest[0]).write_text(json.dumps(_case("exhaustive", False), indent=1))
