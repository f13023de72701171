"""The cost of a cache hit, this tree against another numbatune tree, in one process.

Separate processes on the lent GPU differ by 10% or more in launch costs, more than a change to
the hit path may move it. Here both packages run in one process and take turns batch by batch
(section 1's method and kernel, ``bench/dispatch_cost.py``): the other tree's package is copied
and renamed ``numbatune_other`` (its compiled launcher too), each with its own cache directory.

    git archive COMMIT | tar -x -C OTHER_DIR
    python3 -m bench.hit_versus OTHER_DIR [OUT.json]
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

import numbatune
from bench.dispatch_cost import SIZE, _array_kinds, per_call_us

OTHER = "numbatune_other"


def _renamed_copy(tree: Path, into: Path) -> Path:
    """``tree``'s package copied under ``into`` as :data:`OTHER`, its imports renamed."""
    target = into / OTHER
    shutil.copytree(tree / "numbatune", target)
    for path in [*target.rglob("*.py"), *target.rglob("*.c")]:
        text = path.read_text().replace("_numbatune_launch", "_numbatune_other_launch")
        path.write_text(re.sub(r"\bnumbatune\b", OTHER, text))
    return into


@cuda.jit
def scale(x, out, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i]


def _tuned(package: Any) -> Any:
    return package.autotune(
        variants=package.product(BLOCK=[128, 256]),
        launch=lambda x, out, a, *, BLOCK: (package.cdiv(x.shape[0], BLOCK), BLOCK),
    )(scale)


def measure(other_tree: Path) -> dict[str, dict[str, float]]:
    """Median us per hit, for each array kind, of this tree's package and the other's."""
    with tempfile.TemporaryDirectory(prefix="numbatune-versus-") as scratch:
        sys.path.insert(0, str(_renamed_copy(other_tree, Path(scratch))))
        other = importlib.import_module(OTHER)
        packages = {"this tree": numbatune, "other tree": other}
        for name, package in packages.items():
            package.settings.cache_dir = Path(scratch) / f"cache-{name.split()[0]}"
        host = np.random.default_rng(0).random(SIZE, dtype=np.float32)
        a = np.float32(2)
        calls = {}
        for kind, make in _array_kinds().items():
            for name, package in packages.items():
                tuned, x, out = _tuned(package), make(host), make(np.zeros_like(host))
                tuned(x, out, a)  # tunes
                calls[kind, name] = lambda t=tuned, x=x, o=out: t(x, o, a)
        medians = per_call_us(calls, batches=30, per_batch=300, warmup_s=2.0)
    result: dict[str, dict[str, float]] = {}
    for (kind, name), us in medians.items():
        result.setdefault(kind, {})[name] = us
    return result


if __name__ == "__main__":
    measured = measure(Path(sys.argv[1]))
    for kind, row in measured.items():
        print(f"{kind:6}", "  ".join(f"{name} {us:6.2f} us" for name, us in row.items()))
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(measured, indent=1))
