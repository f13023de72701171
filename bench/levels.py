"""Tuning levels: what each level costs (tuning time) and loses (winner's time) against ``full``.

Every example function of ``examples/`` (``example(small) -> (tuned_kernel, args)``, and
``example_*``) is measured. An example whose variants carry no priorities gets them here by
their distance from its defaults, the values of the module globals its kernel reads (what its
author would launch untuned):
priority = -(number of parameters that differ from their default), so ``minimal`` tries the
default variant alone (launched unmeasured), ``balanced`` adds the variants that change one
parameter, ``extensive`` those that change two, and ``full`` tries them all. Parameters with no
module global (launch-only ones) never count as differing. Examples with priorities of their
own keep them.

For each level (``full`` first, so that any one-time cost left lands on it, not on the cheaper
levels) the example's module is loaded afresh, so that the level's tuning compiles its
variants anew, and the wall time of ``tuned.tune(*args)`` (compile, clone, measure) with an
empty tune cache of its own is the level's cost. Before that the example is tuned once and
thrown away (start-up costs), and after it every variant is timed by the careful measurement
(``measuring.true_times``): a level's loss is its winner's careful time over ``full``'s
winner's.
"""

from __future__ import annotations

import inspect
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numbatune as nt
from bench import measuring
from numbatune import demo
from numbatune.config import LEVELS
from numbatune.demo import format_table


def prioritise(tuned: nt.TunedKernel) -> str:
    """Give the variants priorities by distance from the defaults, unless they have their own.

    Returns which priorities the variants carry: "own" or "distance from defaults".
    """
    variants = tuned.variants
    if any(callable(v.priority) or v.priority != 0 for v in variants):
        return "own"
    defaults = tuned.py_func.__globals__
    for variant in variants:
        variant.priority = -sum(
            1
            for name, value in variant.params.items()
            if name in defaults and defaults[name] != value
        )
    return "distance from defaults"


def _fresh(path: Path, name: str) -> nt.TunedKernel:
    """The tuned kernel ``name`` of the module at ``path``, loaded anew (nothing compiled)."""
    module = demo.load_module(path)
    for value in vars(module).values():
        if isinstance(value, nt.TunedKernel) and value.name == name:
            return value
    raise LookupError(f"bench: no tuned kernel {name!r} in {path}")


def _level(path: Path, name: str, level: str, args: tuple[Any, ...]) -> dict[str, Any]:
    tuned = _fresh(path, name)
    priorities = prioritise(tuned)
    measuring.synchronize()
    # A cache of its own: the memory cache of the throwaway tuning (and of the other levels),
    # which a kernel loaded afresh shares, would serve this one's tuning.
    with tempfile.TemporaryDirectory(prefix="numbatune-levels-") as cache:
        started = time.perf_counter()
        with measuring.configured(level=level, cache_dir=Path(cache)):
            report = tuned.tune(*args)
        measuring.synchronize()
        seconds = time.perf_counter() - started
    return {
        "level": level,
        "priorities": priorities,
        "tuning_s": seconds,
        "source": report.source,
        # Variants tried: measured or failed, or the one launched unmeasured.
        "tried": 1
        if report.source == "single"
        else sum(r.median_s is not None or r.error is not None for r in report.results),
        "failed": sum(r.error is not None for r in report.results),
        "compiles": tuned.stats["compiles"],
        "winner_index": report.best_index,
        "winner": report.winner.label,
    }


def _example(example: demo.Example, smoke: bool) -> dict[str, Any]:
    path = Path(inspect.getfile(example))  # its module's file, loaded afresh for each level
    tuned, args = example(smoke)
    tuned.tune(*args)  # throwaway: start-up costs of this kernel and these argument types
    levels = [_level(path, tuned.name, level, args) for level in reversed(LEVELS)]
    true = measuring.true_times(tuned, args)
    best = min(t for t in true if t is not None)
    full_s = true[levels[0]["winner_index"]]
    for row in levels:
        row["winner_s"] = true[row["winner_index"]]
        row["vs_full"] = row["winner_s"] / full_s
        row["vs_best"] = row["winner_s"] / best
    return {
        "module": path.stem,
        "example": example.__name__,
        "kernel": tuned.name,
        "variants": len(tuned.variants),
        "levels": levels[::-1],
    }


def run(smoke: bool, examples_dir: Path | None = None) -> dict[str, Any]:
    """Measure every level on every example of ``examples_dir`` (default: examples/)."""
    try:
        directory = examples_dir or demo.find_examples_dir()
    except FileNotFoundError as error:
        return {"examples": [], "missing": str(error)}
    examples = [_example(example, smoke) for example in demo.load_examples(directory)]
    return {"examples": examples, "summary": _summary(examples)}


def _summary(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: total tuning time and the geometric mean and worst of the losses."""
    summary = []
    for index, level in enumerate(LEVELS):
        rows = [e["levels"][index] for e in examples]
        ratios = [r["vs_full"] for r in rows]
        summary.append(
            {
                "level": level,
                "tuning_s": sum(r["tuning_s"] for r in rows),
                "tried": sum(r["tried"] for r in rows),
                "geomean_vs_full": math.exp(sum(map(math.log, ratios)) / len(ratios))
                if ratios
                else None,
                "worst_vs_full": max(ratios, default=None),
            }
        )
    return summary


def table(result: dict[str, Any]) -> str:
    """One row per example and level, then one per level over all examples."""
    if "missing" in result:
        return result["missing"]
    rows = [
        [
            f"{e['kernel']} ({e['variants']})" if r["level"] == LEVELS[0] else "",
            r["level"],
            f"{r['tried']}" + (" (unmeasured)" if r["source"] == "single" else ""),
            f"{r['tuning_s']:.2f}",
            r["winner"],
            f"{r['winner_s'] * 1e6:.1f}",
            f"{r['vs_full']:.3f}",
            f"{r['vs_best']:.3f}",
        ]
        for e in result["examples"]
        for r in e["levels"]
    ]
    rows += [
        [
            "all" if s["level"] == LEVELS[0] else "",
            s["level"],
            str(s["tried"]),
            f"{s['tuning_s']:.2f}",
            "",
            "",
            "-"
            if s["geomean_vs_full"] is None
            else f"{s['geomean_vs_full']:.3f} (worst {s['worst_vs_full']:.3f})",
            "",
        ]
        for s in result["summary"]
    ]
    header = ["example (variants)", "level", "tried", "tuning (s)", "winner", "winner (us)"]
    return format_table([*header, "x full", "x best"], rows)
