"""What a large space costs before anything is measured (issue 22): building it with
``nt.product`` and a ``where=`` filter, decorating the kernel, its checksum, and a first tuning
that searches 8 of its variants. Host work only: the figures are the host's, on any machine.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import cuda

import numbatune as nt

A = B = C = D = E = 1


@cuda.jit
def _shifted(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i] * A + B + C + D + E


def _one(axes: int) -> dict[str, Any]:
    started = time.perf_counter()
    space = nt.product(
        **{name: range(10) for name in "ABCDE"[:axes]}, where=lambda A, B, **rest: A + B < 17
    )
    built = time.perf_counter()
    tuned = nt.autotune(variants=space, launch=lambda x, out: (1, 32), search="random", budget=8)(
        _shifted
    )
    decorated = time.perf_counter()
    tuned.checksum()
    summed = time.perf_counter()
    x, out = cuda.to_device(np.ones(32, np.float32)), cuda.to_device(np.zeros(32, np.float32))
    report = tuned.tune(x, out)
    searched = time.perf_counter()
    return {
        "variants": len(space),
        "product_s": built - started,
        "autotune_s": decorated - built,
        "checksum_s": summed - decorated,
        "first_search_s": searched - summed,
        "tried": report.tried,
    }


def run(smoke: bool) -> dict[str, Any]:
    """Spaces of 10^3 (smoke) or 10^4 and 10^5 combinations."""
    return {"spaces": [_one(axes) for axes in ((3,) if smoke else (4, 5))]}


def table(result: dict[str, Any]) -> str:
    from numbatune.demo import format_table

    rows = [
        [str(s["variants"]), f"{s['product_s']:.2f}", f"{s['autotune_s']:.2f}",
         f"{s['checksum_s']:.2f}", f"{s['first_search_s']:.2f}", str(s["tried"])]
        for s in result["spaces"]
    ]  # fmt: skip
    header = ["variants", "product (s)", "autotune (s)", "checksum (s)", "first search (s)",
              "tried"]  # fmt: skip
    return format_table(header, rows)
