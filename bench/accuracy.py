"""Tuning accuracy: does the tuner pick the fastest variant?

For each kernel of the suite at each of its sizes, the tuner tunes the key as a user's first call
would (its own budget, early stop on), then a separate careful measurement times every variant
(``measuring.true_times``). The figure is the chosen variant's true time over the best variant's
true time: 1.0 is a perfect choice.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import kernels, measuring
from numbatune.demo import format_table


def ratio(chosen: int, true: list[float | None]) -> float:
    """The chosen variant's true time over the best true time."""
    chosen_time = true[chosen]
    if chosen_time is None:
        raise ValueError(f"bench: the chosen variant {chosen} has no true time")
    return chosen_time / min(t for t in true if t is not None)


def run(smoke: bool) -> dict[str, Any]:
    """Tune every kernel of the suite at every size and compare the choice with the truth."""
    keys = []
    for case in kernels.CASES:
        tuned = case.tuned(smoke)
        for size in case.sizes_for(smoke):
            args = case.arguments(size)
            report = tuned.tune(*args)
            true = measuring.true_times(tuned, args)
            best = min(range(len(true)), key=lambda i: true[i] if true[i] is not None else 1e30)
            keys.append(
                {
                    "kernel": case.name,
                    "size": size,
                    "variants": len(tuned.variants),
                    "chosen": tuned.variants[report.best_index].label,
                    "best": tuned.variants[best].label,
                    "ratio": ratio(report.best_index, true),
                    "tuner_median_s": [r.median_s for r in report.results],
                    "tuner_runs": [r.runs for r in report.results],
                    "true_median_s": true,
                }
            )
    ratios = [key["ratio"] for key in keys]
    return {
        "keys": keys,
        "mean_ratio": statistics.fmean(ratios),
        "worst_ratio": max(ratios),
        "targets": {"mean_ratio": 1.01, "worst_ratio": 1.03},
    }


def table(result: dict[str, Any]) -> str:
    """One row per key, then the mean and worst ratio."""
    rows = [
        [
            k["kernel"],
            *map(str, (k["size"], k["variants"])),
            k["chosen"],
            k["best"],
            f"{k['ratio']:.4f}",
        ]
        for k in result["keys"]
    ]
    text = format_table(["kernel", "size", "K", "chosen", "best", "true ratio"], rows)
    return f"{text}\nmean {result['mean_ratio']:.4f}, worst {result['worst_ratio']:.4f}"
