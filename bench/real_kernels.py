"""Real kernels: public numba-cuda kernels of real projects (``bench/real/``), each launched as
its project launches it and as a tuned kernel, call against call, host time included.

For each kernel: two copies of its inputs made alike; the same sequence of calls on each, the
project's launch on one and the tuned kernel on the other (tuned first, on the arguments of
a typical call), and their outputs compared. Then, on the project's copy, batches of calls
back to back, a synchronisation at the end of each: the wall time per call, in alternating
batches of the two sides, the median over the batches; and the device time per call, from
CUDA events around a batch queued while a kernel holds the device (so that the device runs
the batch without waiting for the host). The ratio is the original's time over the tuned one's.

On a GPU each kernel runs in a process of its own (a kernel that breaks the CUDA context takes
only its own result with it); under the simulator (``--smoke``) they run in this one.

    python bench/run.py OUT --only real_kernels        # all of them, results in OUT/results.json
    python -m bench.real_kernels --kernel stumpy       # one, its result printed as JSON
    python -m bench.real_kernels --compile-check       # no GPU needed: compiles for sm_90
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import math
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: bench/ is on the path, the repository is not
    sys.path.insert(0, str(ROOT))

from bench.real import KERNELS  # noqa: E402

MODULE = "bench.real_kernels"  # this module's name, also when run as __main__
SEED = 44
#: Seconds a kernel's process may take on a GPU (its first tune included) before it is stopped.
KERNEL_TIMEOUT_S = 150
#: The most calls a batch timed on the device queues behind the hold (well within the
#: driver's queue of pending launches, which would otherwise stall the host).
DEVICE_CALLS = 256
#: The compute capability the compile check compiles for (an H100's).
CHECK_CC = (9, 0)


@dataclass(frozen=True)
class Plan:
    """How much of each measurement a run makes."""

    #: Calls each side makes from its copy of the inputs before the outputs are compared.
    check_calls: int
    #: Calls of each side that estimate its time per call (and warm it up).
    pilot_calls: int
    #: The wall time a batch of back-to-back calls aims at, and the bounds on its calls.
    batch_s: float
    min_calls: int
    max_calls: int
    #: Batches of each side, alternating which goes first.
    rounds: int
    #: Batches of each side timed on the device (0: none, as under the simulator).
    device_rounds: int


GPU_PLAN = Plan(
    check_calls=16,
    pilot_calls=5,
    batch_s=0.08,
    min_calls=8,
    max_calls=1000,
    rounds=7,
    device_rounds=3,
)
SMOKE_PLAN = Plan(
    check_calls=1, pilot_calls=0, batch_s=0.0, min_calls=1, max_calls=1, rounds=1, device_rounds=0
)
SIDES = ("original", "tuned")


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"bench.real.{name}")


def measure(name: str, smoke: bool) -> dict[str, Any]:
    """Check and time one kernel (``bench/real/NAME.py``) in this process."""
    import numpy as np

    from bench import measuring

    module = _module(name)
    plan = SMOKE_PLAN if smoke else GPU_PLAN
    size = module.SIZES["smoke" if smoke else "full"]
    ours, theirs = (module.make_inputs(size, np.random.default_rng(SEED)) for _ in range(2))
    started = time.perf_counter()
    report = module.TUNED.tune(*module.arguments(ours, 1))
    tune_s = time.perf_counter() - started
    correct, mismatch = _check(module, theirs, ours, plan.check_calls)
    del ours  # the timing runs on the project's copy
    measuring.synchronize()
    wall, calls = _wall_times(module, theirs, plan)
    medians = {side: float(np.median(times)) for side, times in wall.items()}
    device = _device_times(module, theirs, plan, calls, medians)
    return {
        "source": module.SOURCE,
        "kind": module.KIND,
        "size": size,
        "correct": correct,
        "mismatch": mismatch,
        "calls_per_batch": calls,
        "wall_us": {side: 1e6 * medians[side] for side in SIDES},
        "wall_us_per_batch": {side: [1e6 * t for t in wall[side]] for side in SIDES},
        "ratio": medians["original"] / medians["tuned"],
        "device_us": device,
        "device_ratio": (
            device["original"] / device["tuned"] if None not in device.values() else None
        ),
        "winner": report.winner.label,
        "tuning": {
            "seconds": tune_s,
            "variants": len(module.TUNED.variants),
            "tried": report.tried,
            "compiles": report.compiles,
            "compile_s": report.compile_s,
            "benchmark_s": report.benchmark_s,
            "not_timed": {
                r.variant.label: f"{r.status}: {r.error or r.mismatch}"[:300]
                for r in report.results
                if r.tried and r.median_s is None
            },
        },
    }


def _launcher(module: ModuleType, side: str) -> Callable[[Any, tuple[Any, ...]], None]:
    """A function of (inputs, args) that makes one call of ``side``: the project's launch, or
    the tuned kernel's (each behind one Python call, so that neither pays for one more)."""
    if side == "original":
        return module.original
    kernel = module.TUNED
    return lambda inputs, args: kernel(*args)


def _check(module: ModuleType, theirs: Any, ours: Any, calls: int) -> tuple[bool, str | None]:
    """The same ``calls`` calls of each side on its own copy of the inputs; whether the outputs
    agree (within the module's tolerance), and where they differ if not."""
    import numpy as np

    from bench import measuring

    for side, inputs in (("original", theirs), ("tuned", ours)):
        launch = _launcher(module, side)
        for call in range(calls):
            launch(inputs, module.arguments(inputs, call))
    measuring.synchronize()
    expected, got = module.outputs(theirs), module.outputs(ours)
    for name, value in expected.items():
        try:
            np.testing.assert_allclose(got[name], value, **module.TOLERANCE)
        except AssertionError as error:
            return False, f"{name}: {str(error).strip()}"[:2000]
    return True, None


def _wall_times(module: ModuleType, inputs: Any, plan: Plan) -> tuple[dict[str, list[float]], int]:
    """Seconds per call of each side in each of ``plan.rounds`` batches, and the calls per
    batch. The calls continue the sequence the check started (STUMPY's next rows)."""
    numbers = itertools.count(plan.check_calls)

    def batch(side: str, calls: int) -> float:
        return _batch_s(module, inputs, side, [next(numbers) for _ in range(calls)])

    calls = plan.min_calls
    if plan.pilot_calls:
        pilot = max(batch(side, plan.pilot_calls) for side in SIDES)
        wanted = math.ceil(plan.batch_s / pilot) if pilot > 0 else plan.max_calls
        calls = 2 * math.ceil(min(max(wanted, plan.min_calls), plan.max_calls) / 2)  # colours
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(plan.rounds):
        for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
            times[side].append(batch(side, calls))
    return times, calls


def _batch_s(module: ModuleType, inputs: Any, side: str, numbers: list[int]) -> float:
    """Wall seconds per call of ``side``'s calls ``numbers``, back to back, synchronised after."""
    from bench import measuring

    launch = _launcher(module, side)
    argsets = [module.arguments(inputs, number) for number in numbers]
    measuring.synchronize()
    started = time.perf_counter()
    for args in argsets:
        launch(inputs, args)
    measuring.synchronize()
    return (time.perf_counter() - started) / len(argsets)


def _device_times(
    module: ModuleType, inputs: Any, plan: Plan, calls: int, wall: dict[str, float]
) -> dict[str, float | None]:
    """Each side's median device microseconds per call over ``plan.device_rounds`` batches of
    up to DEVICE_CALLS calls (None when not measured: under the simulator, or when the host
    never got ahead of the device)."""
    import numpy as np

    result: dict[str, float | None] = {side: None for side in SIDES}
    if plan.device_rounds == 0:
        return result
    calls = min(calls, DEVICE_CALLS)
    numbers = itertools.count(10**6)
    for side in SIDES:
        samples = []
        for _ in range(plan.device_rounds):
            batch = [next(numbers) for _ in range(calls)]
            us = _device_batch_us(module, inputs, side, batch, 1.5 * calls * wall[side] + 0.002)
            if us is not None:
                samples.append(us)
        result[side] = float(np.median(samples)) if samples else None
    return result


def _device_batch_us(
    module: ModuleType, inputs: Any, side: str, numbers: list[int], hold_s: float
) -> float | None:
    """Device microseconds per call of a batch queued while a kernel holds the device for
    about ``hold_s`` (None if the host fell behind the hold three times, the hold doubled
    each time)."""
    from numba import cuda

    from numbatune.tuning import bench as stopwatch

    launch = _launcher(module, side)
    argsets = [module.arguments(inputs, number) for number in numbers]
    held, start, end = cuda.event(), cuda.event(), cuda.event()
    for _ in range(3):
        cuda.synchronize()
        stopwatch._hold_device(0, hold_s)
        held.record()
        start.record()
        for args in argsets:
            launch(inputs, args)
        end.record()
        ahead = not held.query()  # the device still held: the batch ran back to back
        end.synchronize()
        if ahead:
            return 1e3 * cuda.event_elapsed_time(start, end) / len(argsets)
        hold_s *= 2
    return None


def run(
    smoke: bool,
    progress: Callable[[dict[str, Any]], None] | None = None,
    names: tuple[str, ...] = KERNELS,
) -> dict[str, Any]:
    """Measure the kernels ``names``, calling ``progress`` with the results so far after each;
    a kernel that fails is recorded with its error and the others go on."""
    results: dict[str, Any] = {"kernels": {}}
    for name in names:
        started = time.perf_counter()
        try:
            row = _measure_here(name) if smoke else _measure_apart(name)
        except Exception:
            row = {"error": traceback.format_exc()[-4000:]}
        row["seconds"] = time.perf_counter() - started
        results["kernels"][name] = row
        if progress is not None:
            progress(results)
    return results


def _measure_here(name: str) -> dict[str, Any]:
    """:func:`measure` under the simulator, in this process; skipped where the simulator cannot
    run the kernel. The simulator's warnings about numba's random generator, which it runs in
    Python (object mode, overflowing integers), are left out."""
    from numba.core.errors import NumbaWarning

    unable = getattr(_module(name), "SIMULATOR_CANNOT", None)
    if unable:
        return {"skipped": unable}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return measure(name, smoke=True)


def _measure_apart(name: str) -> dict[str, Any]:
    """:func:`measure` in a process of its own (a GPU run), stopped after KERNEL_TIMEOUT_S."""
    from bench import measuring

    return measuring.run_module(MODULE, ["--kernel", name], {}, KERNEL_TIMEOUT_S)


def table(result: dict[str, Any]) -> str:
    """One row per kernel: microseconds per call of each side (host time included, and on the
    device), the ratio, the winner, and whether the outputs agreed."""
    from numbatune.demo import format_table

    rows = []
    for name, row in result["kernels"].items():
        if "error" in row:
            rows.append([name, *"-----", "FAILED: " + row["error"].strip().splitlines()[-1]])
            continue
        if "skipped" in row:
            rows.append([name, *"-----", "skipped: " + row["skipped"]])
            continue
        wall, device = row["wall_us"], row["device_us"]
        rows.append(
            [
                name,
                f"{wall['original']:.1f}",
                f"{wall['tuned']:.1f}",
                f"{row['ratio']:.3f}x",
                _us(device["original"]) + " / " + _us(device["tuned"]),
                row["winner"],
                "yes" if row["correct"] else "NO",
            ]
        )
    header = ["kernel", "original us/call", "tuned us/call", "ratio", "device us (orig / tuned)",
              "winner", "correct"]  # fmt: skip
    return format_table(header, rows)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@contextlib.contextmanager
def _no_device() -> Iterator[None]:
    """numba compiles for CHECK_CC without a GPU: kernels with declared signatures, which numba
    compiles when they are decorated, too; and the modules' inputs are host arrays (whose
    numba types are those of device arrays)."""
    import numba.cuda.random
    import numpy as np
    from numba import cuda
    from numba.cuda import dispatcher

    from numbatune.compilers import numba_build as build

    device = SimpleNamespace(compute_capability=CHECK_CC, MULTIPROCESSOR_COUNT=132)

    def host_states(n: int, seed: int, subsequence_start: int = 0, stream: Any = 0) -> Any:
        states = np.empty(n, dtype=numba.cuda.random.xoroshiro128p_dtype)
        numba.cuda.random.init_xoroshiro128p_states_cpu(states, seed, subsequence_start)
        return states

    patches = [
        (dispatcher._Kernel, "bind", lambda kernel: None),  # loading it needs a context
        (cuda, "to_device", lambda array, *args, **kwargs: np.array(array)),
        (cuda, "get_current_device", lambda: device),
        (numba.cuda.random, "create_xoroshiro128p_states", host_states),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        with build._target(CHECK_CC):
            yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def compile_check(name: str) -> dict[str, str]:
    """Compile kernel NAME for CHECK_CC without a GPU: the project's kernel and one kernel of
    each code its variants compile to, for the argument types of a typical call (or its
    declared signature). Each compile's outcome: ``ok (seconds)`` or the error."""
    import numba
    import numpy as np

    from numbatune.compilers import numba_build as build

    with _no_device():
        module = _module(name)
        inputs = module.make_inputs(module.SIZES["smoke"], np.random.default_rng(SEED))
        args = module.arguments(inputs, 1)
    template = module.TUNED._template
    argtypes = template.signatures[0] if template.signatures else tuple(map(numba.typeof, args))
    kernels = {"original": (template.function, template.jit_options)}
    for members in template.by_kernel(module.TUNED.variants):
        variant = members[0]
        label = f"{variant.label} (+{len(members) - 1} sharing it)"
        kernels[label] = (template.specialised_function(variant), template.build_options(variant))
    outcomes = {}
    for label, (function, options) in kernels.items():
        started = time.perf_counter()
        try:
            (built,) = build.build(function, options, argtypes, CHECK_CC)
            failure = getattr(built, "error", None)
            outcomes[label] = failure or f"ok ({time.perf_counter() - started:.1f} s)"
        except Exception as error:
            outcomes[label] = f"{type(error).__name__}: {error}"[:2000]
    return outcomes


def compile_check_all(names: tuple[str, ...] = KERNELS) -> dict[str, dict[str, str]]:
    """:func:`compile_check` of each kernel in a process of its own, the simulator off."""
    from bench import measuring

    results = {}
    for name in names:
        try:
            results[name] = measuring.run_module(
                MODULE, ["--compile-check-one", name], {"NUMBA_ENABLE_CUDASIM": "0"}
            )
        except RuntimeError as error:
            results[name] = {"process": str(error)[-2000:]}
        ok = all(v.startswith("ok") for v in results[name].values())
        print(f"{name}: {'ok' if ok else 'FAILED'}", json.dumps(results[name], indent=1))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.real_kernels", description=__doc__)
    parser.add_argument("--kernel", choices=KERNELS, help="measure one kernel, print its JSON")
    parser.add_argument("--smoke", action="store_true", help="under the simulator, tiny sizes")
    parser.add_argument(
        "--compile-check", nargs="*", choices=KERNELS, metavar="KERNEL",
        help="compile these kernels (all by default) for sm_90, no GPU needed",
    )  # fmt: skip
    parser.add_argument("--compile-check-one", choices=KERNELS, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.compile_check_one:
        print(json.dumps(compile_check(arguments.compile_check_one)))
        return 0
    if arguments.compile_check is not None:
        outcomes = compile_check_all(tuple(arguments.compile_check) or KERNELS)
        return 0 if all(v.startswith("ok") for r in outcomes.values() for v in r.values()) else 1
    if arguments.kernel:
        import numbatune

        numbatune.configure(cache_dir=None)  # every key tuned, none read from disk
        print(json.dumps(measure(arguments.kernel, arguments.smoke)))
        return 0
    parser.error("give --kernel or --compile-check (all: bench/run.py OUT --only real_kernels)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
