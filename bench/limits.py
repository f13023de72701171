"""The stencil and transpose examples' variants, a few stencil variants with register caps, and
a numba copy laid out as the stencil, each checked and timed against torch's copy of the same
bytes in the same process.

    python3 bench/limits.py OUT_DIR EXAMPLES_DIR [OTHER_EXAMPLES_DIR ...]

EXAMPLES_DIR holds the examples' stencil.py and transpose.py (examples/, or other versions of
them); each OTHER_EXAMPLES_DIR (the examples of another commit, say) adds its two as cases
named after the folder, timed in the same process. Every variant runs once on random inputs of
an odd size (blocks, tiles and warps left part-filled) and is compared with the module's
reference (the copy with its input); then each is timed at the examples' full size: ten
launches back to back between two events (the device kept busy by one launch before the first
event, so that the host's launch cost stays out), the median of seven such rounds. torch's
copy_ of a float32 array of the same bytes is timed the same way before and after each case.
The copy case (:func:`copy`) moves each element as the stencil's variants load and store their
points, four bytes a load: what numba's loads reach, against torch's copy of 16 bytes a load.
Under numba's simulator (a machine with no GPU) only the checks run, at smaller sizes. Writes
OUT_DIR/limits.json and prints each case's fastest variants last, with their share of the
copy's rate.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

# numbatune before numba: without a GPU it turns numba's simulator on.
import numbatune as nt  # noqa: E402, I001
from numbatune.arrays import SIMULATOR  # noqa: E402
from numbatune.demo import example_module  # noqa: E402

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

FULL = 1 << 14  # the examples' size: 16384 x 16384 float32, 1 GiB read and 1 GiB written
#: Odd sizes for the checks: rows and columns that no block, tile or warp divides.
CHECK = (75, 70) if SIMULATOR else (1037, 2051)

BX, COLS, ROWS = 128, 4, 4  # the copy's block (one row of threads) and a thread's points


@cuda.jit(device=True)
def _moved(a, out, top, base, checked):
    """Copies a thread's COLS x ROWS elements of ``a`` (rows ``top`` on, columns ``base`` on, a
    warp apart) into ``out``, every load issued before the first store; bounds ``checked``."""
    values = cuda.local.array(COLS * ROWS, np.float32)
    for k in nt.static_range(ROWS):
        for j in nt.static_range(COLS):
            row, col = top + k, base + 32 * j
            inside = not checked or (row < a.shape[0] and col < a.shape[1])
            values[k * COLS + j] = a[row, col] if inside else np.float32(0)
    for k in nt.static_range(ROWS):
        for j in nt.static_range(COLS):
            row, col = top + k, base + 32 * j
            if not checked or (row < a.shape[0] and col < a.shape[1]):
                out[row, col] = values[k * COLS + j]


@nt.autotune(
    variants=[
        {"BX": bx, "COLS": c, "ROWS": r}
        for bx in (128, 256)
        for c in (1, 2, 4, 8)
        for r in (1, 2, 4)
        if 2 <= c * r <= 16
    ],
    launch=lambda a, out, *, BX, COLS, ROWS: (
        (nt.cdiv(a.shape[1], BX * COLS), nt.cdiv(a.shape[0], ROWS)),
        BX,
    ),
)
@cuda.jit
def copy(a, out):
    """out = a, each thread COLS columns (a warp apart) by ROWS rows, blocks inside ``a``
    without bounds checks."""
    tx = nt.nonnegative(cuda.threadIdx.x)
    top = nt.nonnegative(cuda.blockIdx.y) * ROWS
    first = nt.nonnegative(cuda.blockIdx.x) * (BX * COLS)
    base = first + (tx // 32) * (32 * COLS) + tx % 32
    if first + BX * COLS <= a.shape[1] and top + ROWS <= a.shape[0]:
        _moved(a, out, top, base, False)
    else:
        _moved(a, out, top, base, True)


def capped(stencil: ModuleType) -> list[nt.Variant]:
    """Stencil variants with register caps that ptxas meets without spilling (sm_90: more
    threads a multiprocessor, so more loads in flight)."""
    shuffles = [False] if SIMULATOR else [False, True]
    shapes = [(128, 4, 4, 64), (128, 4, 4, 48), (128, 2, 8, 48), (256, 4, 2, 48)]
    names = {"BX", "COLS", "ROWS", "SHUFFLE"}
    if not names <= set(stencil.laplace.variants[0].params):
        return []  # another version of the example
    return [
        nt.Variant({"BX": bx, "COLS": c, "ROWS": r, "SHUFFLE": s}, max_registers=cap)
        for bx, c, r, cap in shapes
        for s in shuffles
    ]


def cases(examples: list[Path]) -> Iterator[tuple[str, Any, Any]]:
    """(name, tuned kernel over the variants to try, its module) of each case."""
    for index, folder in enumerate(examples):
        suffix = "" if index == 0 else f" ({folder.name})"
        stencil = example_module(folder / "stencil.py")
        transpose = example_module(folder / "transpose.py")
        yield f"stencil{suffix}", stencil.laplace, stencil
        if index == 0 and (extra := capped(stencil)):
            yield "stencil capped", stencil.laplace.with_variants(extra), stencil
        yield f"transpose{suffix}", transpose.transpose, transpose
    yield "copy", copy, SimpleNamespace(reference=lambda a, out: a.copy_to_host())


def arrays(module: Any, shape: tuple[int, int], rng: np.random.Generator) -> tuple:
    """Random input of ``shape`` and a zeroed output of the module's kernel."""
    a = rng.random(shape, dtype=np.float32)
    out_shape = shape[::-1] if hasattr(module, "transpose") else shape
    return cuda.to_device(a), cuda.to_device(np.zeros(out_shape, np.float32))


def full_arrays() -> tuple:
    """Random FULL x FULL input and an output, drawn on the device."""
    import torch

    a = torch.rand(FULL, FULL, device="cuda")
    return cuda.as_cuda_array(a), cuda.as_cuda_array(torch.zeros_like(a))


def check(tuned: Any, module: Any, rng: np.random.Generator) -> dict[str, Any]:
    """Each variant's largest absolute error against the reference, at the odd size."""
    args = arrays(module, CHECK, rng)
    expected = module.reference(*args)
    tuned.tune(*args)  # compiles every variant (on a GPU, in worker processes)
    errors = {}
    for variant in tuned.variants:
        out = args[-1]
        out.copy_to_device(np.zeros(out.shape, np.float32))
        tuned.run_variant(variant, *args)
        errors[variant.label] = float(np.max(np.abs(out.copy_to_host() - expected)))
    return errors


def seconds(call: Callable[[], None], launches: int = 10, rounds: int = 7) -> float:
    """Median device time of ``call``: ``launches`` back to back between two events."""
    call()
    cuda.synchronize()
    times = []
    for _ in range(rounds):
        call()  # the device is busy with this one while the first event is queued
        start, stop = cuda.event(), cuda.event()
        start.record()
        for _ in range(launches):
            call()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3 / launches)
    return statistics.median(times)


def copy_seconds() -> float:
    """torch's copy_ of FULL x FULL float32 (the bytes the examples read, and write again)."""
    import torch

    source = torch.rand(FULL * FULL, device="cuda")
    destination = torch.empty_like(source)
    return seconds(lambda: destination.copy_(source))


def main(out_dir: Path, examples: list[Path]) -> None:
    rng = np.random.default_rng(1)
    result: dict[str, Any] = {"copy_s": [], "cases": {}}
    if not SIMULATOR:
        result["copy_s"].append(copy_seconds())
    for name, tuned, module in cases(examples):
        errors = check(tuned, module, rng)
        case: dict[str, Any] = {"errors": errors, "times_s": {}}
        result["cases"][name] = case
        bad = {label: error for label, error in errors.items() if not error <= 1e-5}
        print(f"{name}: {len(errors)} variants, wrong: {bad or 'none'}", flush=True)
        if not SIMULATOR:
            args = full_arrays()
            for variant in tuned.variants:
                call = functools.partial(tuned.run_variant, variant, *args)
                case["times_s"][variant.label] = seconds(call)
            del args
            result["copy_s"].append(copy_seconds())
        (out_dir / "limits.json").write_text(json.dumps(result, indent=1))
    if SIMULATOR:
        return
    torch_copy = statistics.median(result["copy_s"])
    print("copy_ of the same bytes: " + ", ".join(f"{t * 1e6:.1f}" for t in result["copy_s"]))
    for name, case in result["cases"].items():
        fastest = sorted((t, label) for label, t in case["times_s"].items())[:8]
        for t, label in fastest:
            print(f"{name:10} {t * 1e6:7.1f} us {100 * torch_copy / t:5.1f}% of copy  {label}")


if __name__ == "__main__":
    out_dir, *examples = (Path(arg) for arg in sys.argv[1:])
    out_dir.mkdir(parents=True, exist_ok=True)
    main(out_dir, examples)
