"""Stable decisions: the same keys tuned in fresh processes, ten times.

Each child process tunes every key of ``KEYS`` with no disk cache and prints the index of each
winner. The parent then times every variant of those keys carefully, and reports, per key, the
winners picked and how far the slowest of them is from the most picked one and from the best.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

#: (kernel, size) pairs tuned by every process: keys whose best variants lie close together.
KEYS = [("scale_add", 1 << 24), ("block_sum", 1 << 24)]
SMOKE_KEYS = [("scale_add", 64)]
PROCESSES, SMOKE_PROCESSES = 10, 2


def _child(smoke: bool) -> None:
    import numbatune
    from bench import kernels

    numbatune.configure(cache_dir=None)
    winners = {}
    for name, size in SMOKE_KEYS if smoke else KEYS:
        case = kernels.case(name)
        winners[f"{name}:{size}"] = case.tuned(smoke).tune(*case.arguments(size)).best_index
    print(json.dumps(winners))


def run(smoke: bool) -> dict[str, Any]:
    """Tune the keys in fresh processes and judge the winners against careful measurements."""
    from bench import kernels, measuring

    picks: dict[str, list[int]] = {}
    for _ in range(SMOKE_PROCESSES if smoke else PROCESSES):
        winners = measuring.run_module(__name__, ["--smoke"] if smoke else [], {})
        for key, index in winners.items():
            picks.setdefault(key, []).append(index)
    keys = []
    for name, size in SMOKE_KEYS if smoke else KEYS:
        case = kernels.case(name)
        tuned = case.tuned(smoke)
        true = measuring.true_times(tuned, case.arguments(size))
        chosen = picks[f"{name}:{size}"]
        most_picked = Counter(chosen).most_common(1)[0][0]
        best = min(t for t in true if t is not None)
        keys.append(
            {
                "kernel": name,
                "size": size,
                "winners": {tuned.variants[i].label: n for i, n in Counter(chosen).items()},
                "distinct_winners": len(set(chosen)),
                "worst_vs_most_picked": max(true[i] for i in chosen) / true[most_picked],
                "worst_vs_best": max(true[i] for i in chosen) / best,
                "true_median_s": true,
            }
        )
    return {
        "processes": SMOKE_PROCESSES if smoke else PROCESSES,
        "keys": keys,
        "worst_vs_most_picked": max(k["worst_vs_most_picked"] for k in keys),
        "target": 1.01,
    }


def table(result: dict[str, Any]) -> str:
    """One row per key: distinct winners, and how far apart they are."""
    from numbatune.demo import format_table

    rows = [
        [
            k["kernel"],
            str(k["size"]),
            str(k["distinct_winners"]),
            f"{k['worst_vs_most_picked']:.4f}",
            f"{k['worst_vs_best']:.4f}",
        ]
        for k in result["keys"]
    ]
    header = ["kernel", "size", "distinct winners", "worst/most picked", "worst/best"]
    return f"{result['processes']} processes\n" + format_table(header, rows)


if __name__ == "__main__":
    _child(smoke="--smoke" in sys.argv)
