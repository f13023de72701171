"""The cost of a cache hit, this tree against another numbatune tree, in one process.

Separate processes on the lent GPU differ by 10% or more in launch costs, more than a change to
the hit path may move it. Here both packages run in one process and take turns batch by batch
(the method and kernel of ``bench/dispatch_cost.py``), with one stream so far (and with
the driver launch stubbed out: the host code alone), then after a launch on a second stream
(hits on the arrays' own stream, and hits that wait); the driver's floor (:mod:`bench.floor`)
takes its turns in the first rounds. The other tree's package is copied
and renamed ``numbatune_other`` (its C extension built for the copy), each with its own cache
directory.

    git archive COMMIT | tar -x -C OTHER_DIR
    python3 -m bench.hit_versus OTHER_DIR [OUT.json]
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

import numbatune
from bench import floor
from bench.dispatch_cost import (
    FLOOR,
    SIZE,
    WIDE_ARRAYS,
    WIDE_SCALARS,
    _alternating,
    _array_kinds,
    _library_streams,
    launch_stubbed,
    per_call_us,
    wide_kernel,
)

OTHER = "numbatune_other"


#: Builds the copy's C extension in place, as setup.py builds numbatune's (trees that compile
#: it on first use, as ``_numbatune_launch``, build their own and leave this one unused).
_BUILD_EXTENSION = f"""
from glob import glob

from setuptools import Extension, setup

sources = sorted(glob("{OTHER}/_*.c"))
extension = Extension("{OTHER}._native", sources, libraries=["dl"])
setup(name="{OTHER}", ext_modules=[extension], script_args=["-q", "build_ext", "--inplace"])
"""


def _renamed_copy(tree: Path, into: Path) -> Path:
    """``tree``'s package copied under ``into`` as :data:`OTHER`, its imports renamed, its C
    extension built."""
    target = into / OTHER
    shutil.copytree(tree / "numbatune", target, ignore=shutil.ignore_patterns("*.so"))
    for path in [*target.rglob("*.py"), *target.rglob("*.c")]:
        text = path.read_text().replace("_numbatune_launch", "_numbatune_other_launch")
        path.write_text(re.sub(r"\bnumbatune\b", OTHER, text))
    subprocess.run([sys.executable, "-c", _BUILD_EXTENSION], cwd=into, check=True)
    return into


@cuda.jit
def scale(x, out, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i]


def _tuned(package: Any, kind: str) -> Any:
    """A tuned kernel of its own per array kind (tuned kernels of one code and settings share
    their fast paths, and a call would then look its path up by argument classes), with one
    variant: both trees launch the same kernel (with two, each tuning picked its own, and the
    trees' hits then launched different grids)."""
    return package.autotune(
        variants=package.product(BLOCK=[128]),
        launch=lambda x, out, a, *, BLOCK: (package.cdiv(x.shape[0], BLOCK), BLOCK),
        name=f"versus_scale_{kind}",
    )(scale)


def _tuned_wide(package: Any, kind: str) -> Any:
    """The bench's kernel of 18 arrays and 8 scalars, tuned by ``package`` (one variant)."""
    return package.autotune(
        variants=package.product(BLOCK=[128]),
        launch=lambda *args, BLOCK: (package.cdiv(args[WIDE_ARRAYS - 1].shape[0], BLOCK), BLOCK),
        name=f"versus_wide_{kind}",
    )(wide_kernel)


def _generated(tuned: Any) -> Callable[..., Any]:
    """The generated fast path a tuned kernel of either tree launches its hits with."""
    binder = getattr(tuned, "_binder", None)
    return next(iter(binder.paths.values())) if binder is not None else tuned._call


def _stubbed(tuned: Any, args: tuple[Any, ...]) -> Callable[[], Any]:
    """A hit with the driver launch replaced by a no-op: the host code alone."""
    call = launch_stubbed(_generated(tuned))
    return lambda: call(args, None)


def measure(other_tree: Path) -> dict[str, dict[str, Any]]:
    """The variant each tree's tuning picked for each array kind (``winners``: the two may
    differ), and the median us per hit, for each array kind and case, of this tree's package
    and the other's: first with one stream so far (and the host code alone, launch stubbed), then
    after each package launched on a second stream (hits on the arrays' own stream, and hits
    that alternate streams, so that each waits for the other: numba's blocking streams and, for
    CuPy and torch, their own non-blocking ones); both times also hits of a kernel of 18 arrays
    and 8 scalars."""
    with tempfile.TemporaryDirectory(prefix="numbatune-versus-") as scratch:
        sys.path.insert(0, str(_renamed_copy(other_tree, Path(scratch))))
        other = importlib.import_module(OTHER)
        packages = {"this tree": numbatune, "other tree": other}
        for name, package in packages.items():
            package.settings.cache_dir = Path(scratch) / f"cache-{name.split()[0]}"
        host = np.random.default_rng(0).random(SIZE, dtype=np.float32)
        a = np.float32(2)
        one: dict[tuple[str, str, str], Callable[[], Any]] = {}
        two: dict[tuple[str, str, str], Callable[[], Any]] = {}
        second_streams = []
        winners: dict[str, str] = {}
        for kind, make in _array_kinds().items():
            for name, package in packages.items():
                tuned, x, out = _tuned(package, kind), make(host), make(np.zeros_like(host))
                report = tuned.tune(x, out, a)  # each tree tunes: record what it picked
                winners[f"{kind}, {name}"] = report.winner.label
                tuned(x, out, a)  # a hit: makes the fast path
                one[kind, "hit", name] = lambda t=tuned, x=x, o=out: t(x, o, a)
                one[kind, "host code, launch stubbed", name] = _stubbed(tuned, (x, out, a))
                two[kind, "hit after 2 streams, own stream", name] = one[kind, "hit", name]
                two[kind, "the same, launch stubbed", name] = one[
                    kind, "host code, launch stubbed", name
                ]
                wide = _tuned_wide(package, kind)
                wide_args = (*(make(host.astype(np.float64)) for _ in range(WIDE_ARRAYS)),
                             *(float(k) for k in range(WIDE_SCALARS)))  # fmt: skip
                wide(*wide_args)  # tune, then hits
                one[kind, "26 arguments", name] = lambda w=wide, g=wide_args: w(*g)
                two[kind, "26 arguments, own stream", name] = one[kind, "26 arguments", name]
                streams = [cuda.stream(), cuda.stream()]
                two[kind, "hit that waits for another stream", name] = _alternating(
                    tuned, (x, out, a), streams
                )
                second_streams.append(partial(tuned, make(host), make(host), a, stream=streams[1]))
                if (own := _library_streams(kind)) is not None:
                    two[kind, "waits, the library's non-blocking streams", name] = _alternating(
                        tuned, (x, out, a), own
                    )
                    second_streams.append(partial(tuned, make(host), make(host), a, stream=own[1]))
        methods = floor.batched()  # the driver's floor, in the same rounds (where nvcc is found)
        if not isinstance(methods, str):
            one.update({(FLOOR, method, "C"): batch for method, batch in methods.items()})
        medians = per_call_us(one, batches=30, per_batch=300, warmup_s=2.0)
        for launch in second_streams:
            launch()  # a second stream: ordering is on from now on
        medians.update(per_call_us(two, batches=30, per_batch=300, warmup_s=2.0))
    result: dict[str, dict[str, Any]] = {"winners": winners}
    for (kind, case, name), us in medians.items():
        result.setdefault(f"{kind}: {case}", {})[name] = us
    return result


if __name__ == "__main__":
    measured = measure(Path(sys.argv[1]))
    print("winners:", measured.pop("winners"))
    for kind, row in measured.items():
        print(f"{kind:48}", "  ".join(f"{name} {us:6.2f} us" for name, us in row.items()))
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(measured, indent=1))
