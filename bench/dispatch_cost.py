"""Dispatch cost on a cache hit: a tuned call against plain numba launches and Triton's autotune.

The kernel is ``out[i] = a * x[i]`` on two 1 Ki float32 arrays and one scalar: it runs for a
few microseconds, so what is measured is the host's cost per call. Each figure is the median
over batches of the time per call, a batch being many calls followed by one synchronisation.
All methods of all array kinds take turns batch by batch (A B C A B C ...), after a warm-up of
about two seconds, so that clock changes and other load on the host hit them all alike.

Four phases: one stream so far; after two streams; a kernel declared with a signature; the same
kernel compiled by numba-cuda-mlir, where it is installed, with its own arrays and the others.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType
from typing import Any

import numpy as np
from numba import cuda

import numbatune as nt
from bench import floor
from numbatune.arrays import SIMULATOR
from numbatune.rawstreams import stream_handle

#: How the hits whose launch function is wrapped in ``nt.by_shape`` are named.
BY_SHAPE = "launch by_shape"

#: The arrays' length, numba's launch's block and the tuned kernels' blocks: 1 Ki float32 on a
#: GPU; a few threads under the simulator, where each is a Python thread (the smoke run).
SIZE, BLOCK, BLOCKS = (32, 16, [8, 16]) if SIMULATOR else (1024, 256, [128, 256])


_SCALE_SOURCE = """
def scale(x, out, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i]
"""
_scale_namespace: dict[str, Any] = {"cuda": cuda}
exec(_SCALE_SOURCE, _scale_namespace)
#: The kernel, compiled by numba-cuda (and by numba-cuda-mlir in phase four, from its source).
scale = cuda.jit(_scale_namespace["scale"])


def _maybe_by_shape(launch: Callable[..., Any], by_shape: bool) -> Callable[..., Any]:
    return nt.by_shape(launch) if by_shape else launch


def tuned_scale(kind: str, kernel: Any = scale, by_shape: bool = False) -> nt.TunedKernel:
    """``kernel`` (``scale`` by default, or its numba-cuda-mlir build) tuned over two block
    sizes; one tuned kernel per array kind and compiler, as a program that uses one array
    library has (``by_shape``: its launch function wrapped in ``nt.by_shape``)."""
    return nt.autotune(
        variants=nt.product(BLOCK=BLOCKS),
        launch=_maybe_by_shape(
            lambda x, out, a, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK), by_shape
        ),
        name=f"bench_dispatch_{'' if kernel is scale else 'mlir_'}scale_{kind}"
        + "_by_shape" * by_shape,
    )(kernel)


def per_call_us(
    calls: dict[Any, Callable[[], Any]], batches: int, per_batch: int, warmup_s: float
) -> dict[Any, float]:
    """For each method, the median over ``batches`` of the wall time per call of a batch of
    ``per_batch`` calls and one synchronisation (:func:`per_round_us`)."""
    samples = per_round_us(calls, batches, per_batch, warmup_s)
    return {name: statistics.median(values) for name, values in samples.items()}


def per_round_us(
    calls: dict[Any, Callable[[], Any]], batches: int, per_batch: int, warmup_s: float
) -> dict[Any, list[float]]:
    """For each method, the wall time per call of each of its ``batches`` batches of
    ``per_batch`` calls and one synchronisation, one batch per round; the methods take turns
    batch by batch, in an order reversed every other round, so that no method always runs
    after the same one."""
    started = time.perf_counter()
    while time.perf_counter() - started < warmup_s:
        for call in calls.values():
            _batch(call, per_batch)
    cuda.synchronize()
    samples: dict[Any, list[float]] = {name: [] for name in calls}
    for round_ in range(batches):
        for name, call in list(calls.items())[:: -1 if round_ % 2 else 1]:
            started = time.perf_counter()
            _batch(call, per_batch)
            cuda.synchronize()
            samples[name].append((time.perf_counter() - started) / per_batch * 1e6)
    return samples


def _batch(call: Callable[[], Any], count: int) -> None:
    """``count`` calls of ``call``; in one call of its ``batch`` where it has one (the floor's
    launches, made in C: :class:`bench.floor.Batch`)."""
    if isinstance(call, floor.Batch):
        call.batch(count)
        return
    for _ in range(count):
        call()


#: The host's speed in issue 21's run: numba's ``cfg(...)`` took 27.8 us per call. The host of
#: a loan changes speed by up to 1.9x from one round to the next (docs/benchmarks.md, "The
#: machine"), moving numba's launch and numbatune's hit alike.
ISSUE_HOST_US = 28.0


def at_host_speed(
    samples: dict[Any, list[float]], host: Any, limit_us: float
) -> tuple[int, dict[Any, float]]:
    """The rounds in which method ``host`` (numba's own launch, the host's measure) took at
    most ``limit_us`` per call, and each method's median over those rounds (none without)."""
    rounds = [index for index, us in enumerate(samples[host]) if us <= limit_us]
    if not rounds:
        return 0, {}
    return len(rounds), {
        name: statistics.median(values[index] for index in rounds)
        for name, values in samples.items()
    }


#: The array kinds the bench launches with, where their library is installed.
_KINDS = ("numba", "cupy", "torch")


def _array_kinds() -> dict[str, Callable[[np.ndarray], Any]]:
    kinds: dict[str, Callable[[np.ndarray], Any]] = {"numba": cuda.to_device}
    if SIMULATOR:
        return kinds
    try:
        import cupy

        kinds["cupy"] = cupy.asarray
    except ImportError:
        pass
    try:
        import torch

        kinds["torch"] = lambda host: torch.from_numpy(host).cuda()
    except ImportError:
        pass
    return kinds


def _triton_hit() -> Callable[[], Any] | str:
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as error:
        return f"not run: {error}"

    @triton.autotune(
        configs=[triton.Config({"BLOCK_SIZE": b}) for b in (128, 256, 512, 1024)], key=["n"]
    )
    @triton.jit
    def triton_scale(x_ptr, out_ptr, a, n, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n
        tl.store(out_ptr + offsets, a * tl.load(x_ptr + offsets, mask=mask), mask=mask)

    x = torch.rand(SIZE, device="cuda")
    out = torch.empty_like(x)

    def call() -> None:
        triton_scale[lambda meta: (triton.cdiv(SIZE, meta["BLOCK_SIZE"]),)](x, out, 2.0, SIZE)

    call()  # tune: what is measured are cache hits
    return call


#: A STUMPY-shaped kernel: 18 arrays and 8 scalars (STUMPY's _compute_and_update_PI_kernel
#: takes 26 arguments); each element adds them up, so the kernel is tiny and the host decides.
WIDE_ARRAYS, WIDE_SCALARS = 18, 8
_WIDE_NAMES = [f"a{i}" for i in range(WIDE_ARRAYS - 1)] + ["out"]
_WIDE_SCALARS = [f"s{i}" for i in range(WIDE_SCALARS)]
_WIDE_SUM = " + ".join([f"a{k}[i]" for k in range(WIDE_ARRAYS - 1)] + _WIDE_SCALARS)
_WIDE_SOURCE = f"""
def wide({", ".join(_WIDE_NAMES + _WIDE_SCALARS)}):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = {_WIDE_SUM}
"""
_namespace: dict[str, Any] = {"cuda": cuda}
exec(_WIDE_SOURCE, _namespace)
wide_kernel = cuda.jit(_namespace["wide"])


def tuned_wide(kind: str, by_shape: bool = False) -> nt.TunedKernel:
    return nt.autotune(
        variants=nt.product(BLOCK=BLOCKS),
        launch=_maybe_by_shape(
            lambda *args, BLOCK: (nt.cdiv(args[WIDE_ARRAYS - 1].shape[0], BLOCK), BLOCK), by_shape
        ),
        name=f"bench_dispatch_wide_{kind}" + "_by_shape" * by_shape,
    )(wide_kernel)


def scale_declared(n, x, out, negate):
    i = cuda.grid(1)
    if i < n:
        out[i] = -2 * x[i] if negate else 2 * x[i]


#: As libraries declare kernels (STUMPY, numba's own benchmarks): layout 'A' arrays, Python ints
#: and bools converted to i8 and b1 (compiled when first used, as the other kernels are).
DECLARED = "void(i8, f8[:], f8[:], b1)"


def tuned_declared(kind: str) -> nt.TunedKernel:
    return nt.autotune(
        variants=nt.product(BLOCK=BLOCKS),
        launch=lambda n, x, out, negate, *, BLOCK: (nt.cdiv(n, BLOCK), BLOCK),
        name=f"bench_dispatch_declared_{kind}",
    )(cuda.jit(DECLARED)(scale_declared))


def _fast_path_parts(tuned: nt.TunedKernel, args: tuple[Any, ...]) -> dict[str, Any]:
    """The namespace of the fast path ``args`` take (its packing, function, launch)."""
    for state in tuned._shared.devices.values():
        path = state.paths.get(tuple(map(type, args)))
        if path is not None:
            return path.__globals__
    raise LookupError("no fast path")


@dataclass(frozen=True)
class _LaunchParts:
    """What a fast path launches a hit's winner with, taken from its namespace: the compiled
    function, the launch function and the winner's parameters, the parameters packed once (one
    call of the path captures them), and the C launch with its offsets, context and flag."""

    function: int
    config_function: Callable[..., Any]
    params: dict[str, Any]
    packed: bytes
    launch: Callable[..., int]
    offsets: bytes
    context: int
    cooperative: bool

    @classmethod
    def of(cls, parts: dict[str, Any], args: tuple[Any, ...]) -> _LaunchParts:
        launcher = parts["_hit"].__self__  # (the fast path's C Launcher)
        (function,) = launcher.functions.values()
        winner = next(iter(launcher.winners.values()))
        return cls(function, launcher.config, winner.params, _packed(parts, args),
                   launcher.launch, launcher.offsets, launcher.context,
                   launcher.cooperative)  # fmt: skip

    def run(self, config: Any, stream: int) -> int:
        """The driver's launch of the parameters packed once, with ``config`` on ``stream``."""
        return self.launch(self.function, config, stream, self.packed, self.offsets,
                           self.context, self.cooperative)  # fmt: skip


def _profile_calls(
    tuned: nt.TunedKernel, args: tuple[Any, ...], label: str
) -> dict[Any, Callable[[], Any]]:
    """Calls that split a hit's host time: the driver's launch alone (parameters packed once),
    the launch function alone, the read of the arrays through their library alone (torch's
    and CuPy's, one call of the C extension), the generated code with the launch stubbed
    out, and the floor (:func:`_floor`). What the driver, the launch function and the library
    take is what any launcher through those APIs pays; the rest of a hit is numbatune's."""
    parts = _fast_path_parts(tuned, args)
    launching = _LaunchParts.of(parts, args)
    config_function, params = launching.config_function, launching.params
    config = config_function(*args, **params)
    call = launch_stubbed(parts["call"])
    read = _read_alone(parts, args)
    return {
        (label, "driver launch alone (packed once)"): lambda: launching.run(config, 0),
        (label, "launch function alone"): lambda: config_function(*args, **params),
        (label, "generated code, launch stubbed"): lambda: call(args, None),
        (label, "the arrays' read alone (library API, in C)"): read,
        (label, "floor: read, launch function, launch"): _floor(launching, args, read),
    }


def _read_alone(parts: dict[str, Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    """The fast path's one call of the C extension that reads ``args``' arrays (the bench's
    arrays are all of one kind: one read)."""
    (read,) = [value for name, value in parts.items() if name.startswith("_k") and
               getattr(value, "__name__", "") == "read"]  # fmt: skip
    arrays = tuple(value for value in args if not isinstance(value, float | np.floating))
    return lambda: read(arrays)


def _floor(
    launching: _LaunchParts,
    args: tuple[Any, ...],
    read: Callable[[], Any],
    streams: list[Any] | None = None,
) -> Callable[[], None]:
    """What any launcher through these APIs pays for a hit, with nothing between the steps:
    the arrays' read, the launch function and the driver's launch of the parameters the fast
    path packs (packed once); with two ``streams`` (raw handles), calls alternate between them
    and each first makes its stream wait for the other's last launch (an event recorded and a
    wait queued, as the stream order does)."""
    config_function, params = launching.config_function, launching.params
    if streams is None:

        def call() -> None:
            read()
            launching.run(config_function(*args, **params), 0)

        return call
    from numbatune.streams.monitor import monitor

    events, flip = monitor.events, [0]
    event = events.create(timing=False, stream=streams[0])

    def alternating() -> None:
        flip[0] ^= 1
        stream, other = streams[flip[0]], streams[1 - flip[0]]
        read()
        config = config_function(*args, **params)
        events.record(event, other)
        events.wait_event(stream, event)
        launching.run(config, stream)

    return alternating


def launch_stubbed(path: Callable[..., Any]) -> Callable[..., Any]:
    """A generated fast path's function with its driver launch replaced by a no-op: its C
    Launcher's twin that launches through the no-op (a tree from before the Launcher: the
    launch its generated code calls)."""
    names = path.__globals__
    if "_hit" in names:
        twin = names["_hit"].__self__.with_launch(lambda *a: 0)
        names = {**names, "_hit": twin.hit, "_launch_winner": twin.launch_winner}
    else:
        names = {**names, "_launch": lambda *a: 0}
    return FunctionType(path.__code__, names)


def _packed(parts: dict[str, Any], args: tuple[Any, ...]) -> bytes:
    """The parameters the fast path packs for ``args`` (captured from one call)."""
    captured = []
    launcher = parts["_hit"].__self__
    original = launcher.launch

    def capture(*launch_arguments):
        captured.append(launch_arguments[3])  # (function, config, stream, parameters, ...)
        return original(*launch_arguments)

    launcher.launch = capture
    try:
        parts["call"](args, None)
    finally:
        launcher.launch = original
    return captured[0]


#: The array kind the bench files the driver's floor (:mod:`bench.floor`) under.
FLOOR = "driver floor (C)"


def _floor_calls(methods: dict[str, floor.Batch] | str, phase: str) -> dict[Any, Any]:
    """The driver's floor (:func:`bench.floor.batched`) as calls of a phase, timed in its
    rounds, or none where it cannot run."""
    if isinstance(methods, str):
        return {}
    return {(FLOOR, f"{method}, {phase}"): batch for method, batch in methods.items()}


def _phase_one(kinds, host, a, results, methods):
    """One stream so far: hits, numba's launches, Triton's hit, the wide kernel, a profile, the
    driver's floor."""
    grid = nt.cdiv(SIZE, BLOCK)
    configured = scale[grid, BLOCK]
    calls: dict[tuple[str, str], Callable[[], Any]] = _floor_calls(methods, "phase 1")
    tuned_kernels = {}
    for kind, make in kinds.items():
        x, out = make(host), make(np.zeros_like(host))
        tuned = tuned_kernels[kind] = tuned_scale(kind)
        tuned(x, out, a)  # tune: what follows are cache hits
        calls[kind, "numbatune hit"] = lambda t=tuned, x=x, out=out: t(x, out, a)
        shaped = tuned_kernels[kind, BY_SHAPE] = tuned_scale(kind, by_shape=True)
        shaped(x, out, a)
        calls[kind, f"numbatune hit, {BY_SHAPE}"] = lambda t=shaped, x=x, out=out: t(x, out, a)
        calls[kind, "numba k[grid, block](...)"] = lambda x=x, out=out: scale[grid, BLOCK](
            x, out, a
        )
        calls[kind, "numba cfg = k[grid, block]; cfg(...)"] = lambda x=x, out=out: configured(
            x, out, a
        )
        if not SIMULATOR:
            calls.update(_profile_calls(tuned, (x, out, a), kind))
        wide_args = tuple(make(host.astype(np.float64)) for _ in range(WIDE_ARRAYS))
        wide_args += tuple(float(k) for k in range(WIDE_SCALARS))
        wide = tuned_wide(kind)
        wide(*wide_args)
        calls[kind, "26 arguments: numbatune hit"] = lambda w=wide, g=wide_args: w(*g)
        shaped = tuned_wide(kind, by_shape=True)
        shaped(*wide_args)
        calls[kind, f"26 arguments: numbatune hit, {BY_SHAPE}"] = lambda w=shaped, g=wide_args: w(
            *g
        )
        calls[kind, "26 arguments: numba cfg(...)"] = (
            lambda g=wide_args, c=wide_kernel[grid, BLOCK]: c(*g)
        )
        if not SIMULATOR:
            calls.update(_profile_calls(wide, wide_args, f"{kind} 26 arguments"))
    triton = "not run: simulator" if SIMULATOR else _triton_hit()
    if callable(triton):
        calls["torch", "triton autotune hit"] = triton
    elif not SIMULATOR:
        results.setdefault("torch", {})["triton autotune hit"] = triton
    return calls, tuned_kernels


def _phase_two(kinds, host, a, tuned_kernels, methods):
    """After tuned launches on two streams: hits on the arrays' own stream, and hits that
    must wait for another stream (alternating numba's blocking streams, so each call waits; for
    CuPy and torch, their own non-blocking streams too, where the arrays are kept alive past
    each launch); on a GPU, both with the launch stubbed out too, and the driver's event record
    and wait alone; numba's pre-configured launch again, as this phase's measure of the host's
    speed; the driver's floor."""
    calls: dict[tuple[str, str], Callable[[], Any]] = _floor_calls(methods, "phase 2")
    checks = []
    for kind, make in kinds.items():
        tuned = tuned_kernels[kind]
        x, out = make(host), make(np.zeros_like(host))
        other_x, other_out = make(host), make(np.zeros_like(host))
        streams = [cuda.stream(), cuda.stream()]
        tuned(other_x, other_out, a, stream=streams[1])  # a second stream: ordering is on
        calls[kind, "hit, 2 streams used, own stream"] = lambda t=tuned, x=x, o=out: t(x, o, a)
        calls[kind, "hit that waits for another stream"] = _alternating(tuned, (x, out, a), streams)
        shaped = tuned_kernels[kind, BY_SHAPE]
        shaped(other_x, other_out, a, stream=streams[1])
        calls[kind, f"hit that waits for another stream, {BY_SHAPE}"] = _alternating(
            shaped, (x, out, a), streams
        )
        if (own := _library_streams(kind)) is not None:
            tuned(other_x, other_out, a, stream=own[1])
            calls[kind, "waits, the library's non-blocking streams"] = _alternating(
                tuned, (x, out, a), own
            )
        if not SIMULATOR:
            parts = _fast_path_parts(tuned, (x, out, a))
            stubbed = launch_stubbed(parts["call"])
            calls[kind, "own stream: generated code, launch stubbed"] = (
                lambda c=stubbed, x=x, o=out: c((x, o, a), None)
            )
            calls[kind, "waiting: generated code, launch stubbed"] = _alternating(
                lambda *args, stream, c=stubbed: c(args, stream), (x, out, a), streams
            )
            calls[kind, "waiting floor: read, launch function, event, launch"] = _floor(
                _LaunchParts.of(parts, (x, out, a)),
                (x, out, a),
                _read_alone(parts, (x, out, a)),
                [stream_handle(s) for s in streams],
            )
        checks.append((kind, x, out))
    pair = None if SIMULATOR else _event_pair()
    if pair is not None:
        calls["numba", "driver event record and stream wait alone"] = pair
    # The host's speed in this phase (the same launch as phase one's), for comparing the phases.
    calls[_HOST["phase 2"]] = _numba_launch(host, a)
    return calls, checks


def _phase_three(kinds, host):
    """A kernel declared with a signature: tuned hits against numba's launch of it (last: numba's
    launches of declared kernels leave this thread without a current context, which the
    driver's event calls of phase two's baseline need)."""
    grid = nt.cdiv(SIZE, BLOCK)
    numba_declared = cuda.jit(DECLARED)(scale_declared)[grid, BLOCK]
    calls: dict[tuple[str, str], Callable[[], Any]] = {}
    for kind, make in kinds.items():
        if kind not in ("numba", "torch"):
            continue
        args = (SIZE, make(host.astype(np.float64)), make(np.zeros(SIZE)), False)
        declared = tuned_declared(kind)
        declared(*args)
        calls[kind, "declared signature: numbatune hit"] = lambda d=declared, g=args: d(*g)
        calls[kind, "declared signature: numba cfg(...)"] = lambda g=args: numba_declared(*g)
    calls[_HOST["phase 3"]] = _numba_launch(host, np.float32(2.0))
    return calls


def _phase_four(
    kinds: dict[str, Callable[[np.ndarray], Any]], host: np.ndarray, a: Any
) -> dict[tuple[str, str], Callable[[], Any]] | str:
    """``scale`` compiled by numba-cuda-mlir: tuned hits with numba-cuda-mlir's own device
    arrays and with each other array kind, against numba-cuda-mlir's own pre-configured launch
    (which takes its own arrays and CuPy's, not torch's); or why it did not run."""
    try:
        from numba_cuda_mlir import cuda as mlir_cuda
    except ImportError as error:
        return f"not run: {error}"
    namespace: dict[str, Any] = {"cuda": mlir_cuda}
    exec(_SCALE_SOURCE, namespace)
    kernel = mlir_cuda.jit(namespace["scale"])
    configured = kernel[nt.cdiv(SIZE, BLOCK), BLOCK]
    makers = {"numba-cuda-mlir": mlir_cuda.to_device, **kinds}
    calls: dict[tuple[str, str], Callable[[], Any]] = {}
    for kind, make in makers.items():
        x, out = make(host), make(np.zeros_like(host))
        tuned = tuned_scale(kind, kernel)
        tuned(x, out, a)  # tune: what follows are cache hits
        label = f"mlir, {kind} arrays"
        calls[label, "numbatune hit"] = lambda t=tuned, x=x, out=out: t(x, out, a)
        if kind in ("numba-cuda-mlir", "cupy"):
            calls[label, "numba-cuda-mlir cfg(...)"] = lambda x=x, out=out: configured(x, out, a)
    calls[_HOST["phase 4"]] = _numba_launch(host, a)
    return calls


def _numba_launch(host: np.ndarray, a: Any) -> Callable[[], Any]:
    """numba's pre-configured launch of ``scale`` on new arrays of ``host``: each phase's
    measure of the host's speed (:data:`_HOST`), the same launch as phase one's."""
    x, out = cuda.to_device(host), cuda.to_device(np.zeros_like(host))
    configured = scale[nt.cdiv(SIZE, BLOCK), BLOCK]
    return lambda: configured(x, out, a)


def _library_streams(kind: str) -> list[Any] | None:
    """Two non-blocking streams of the array library ``kind`` (torch's own are), on which its
    arrays are kept alive past each launch (numbatune's deferred release); None for numba's
    arrays (numba makes blocking streams only)."""
    if kind == "torch":
        import torch

        return [torch.cuda.Stream(), torch.cuda.Stream()]
    if kind == "cupy":
        import cupy

        return [cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)]
    return None


def _alternating(
    launch: Callable[..., Any], args: tuple[Any, ...], streams: list[Any]
) -> Callable[[], None]:
    """``launch(*args, stream=...)`` on the two streams in turn."""
    flip = [0]

    def call() -> None:
        flip[0] ^= 1
        launch(*args, stream=streams[flip[0]])

    return call


def _event_pair() -> Callable[[], None] | None:
    """An event recorded on one stream and waited for on another, the two in turn, through the
    calls the stream order makes; None (with a line that says why) where the driver refuses
    them in this thread."""
    from numbatune.streams.monitor import monitor

    events = monitor.events
    streams = [cuda.stream(), cuda.stream()]
    handles = [stream_handle(s) for s in streams]

    event, flip = events.create(timing=False, stream=handles[0]), [0]

    def call() -> None:
        flip[0] ^= 1
        events.record(event, handles[flip[0]])
        events.wait_event(handles[1 - flip[0]], event)

    from numba.cuda.cudadrv.driver import CudaAPIError

    try:
        call()
    except CudaAPIError as error:
        print(f"driver event record and stream wait alone: not measured ({error})")
        return None
    return call


#: Each phase's measure of the host's speed: numba's pre-configured launch.
_HOST = {
    "phase 1": ("numba", "numba cfg = k[grid, block]; cfg(...)"),
    "phase 2": ("numba", "numba cfg(...), after two streams"),
    "phase 3": ("numba", "numba cfg(...), phase 3"),
    "phase 4": ("numba", "numba cfg(...), phase 4"),
}


def measure_dispatch(out_dir: Path | None = None, smoke: bool = False) -> dict[str, Any]:
    """Median microseconds per call for each way of launching, per array kind: with one
    stream so far, then after tuned launches on two streams; and the medians over the rounds
    in which the host ran at issue 21's speed (``at_host_speed``), with every round's time."""
    batches, per_batch, warmup_s = (2, 3, 0.0) if smoke else (30, 300, 2.0)
    host = np.random.default_rng(0).random(SIZE, dtype=np.float32)
    a = np.float32(2.0)
    kinds = _array_kinds()
    results: dict[str, Any] = {"size": SIZE, "batches": batches, "calls_per_batch": per_batch}
    fast: dict[str, Any] = {"host_limit_us": ISSUE_HOST_US, "rounds": {}}
    rounds: dict[str, Any] = {}
    methods = "not run: simulator" if SIMULATOR else floor.batched()
    results[FLOOR] = {"program": "not run: simulator" if SIMULATOR else
                      floor.run_program(batches, per_batch)}  # fmt: skip
    if isinstance(methods, str):
        results[FLOOR]["in the rounds"] = methods
    calls, tuned_kernels = _phase_one(kinds, host, a, results, methods)
    timing = (batches, per_batch, warmup_s)
    _record("phase 1", per_round_us(calls, *timing), results, fast, rounds)
    calls, checks = _phase_two(kinds, host, a, tuned_kernels, methods)
    _record("phase 2", per_round_us(calls, *timing), results, fast, rounds)
    _record("phase 3", per_round_us(_phase_three(kinds, host), *timing), results, fast, rounds)
    mlir = "not run: simulator" if SIMULATOR else _phase_four(kinds, host, a)
    if isinstance(mlir, str):
        results["numba-cuda-mlir"] = {"numbatune hit": mlir}
    else:
        _record("phase 4", per_round_us(mlir, *timing), results, fast, rounds)
    cuda.synchronize()
    results["results_checked"] = all(np.allclose(_host_copy(out), 2 * host) for _, _, out in checks)
    results["at_issue_host_speed"] = fast
    results["rounds"] = rounds
    results[_RATIOS] = to_the_floor(results)
    return results


_RATIOS = "to the floor"
#: The hits measured against the driver's floor, with the most each may cost as a multiple of
#: it: (array kind, method, phase whose floor it is measured against) -> target; each with its
#: launch function as written and wrapped in ``nt.by_shape`` (which a hit does not call).
FLOOR_TARGETS = {
    (kind, f"{method}{launch}", phase): target
    for launch in ("", f", {BY_SHAPE}")
    for kind, method, phase, target in [
        ("numba", "numbatune hit", "phase 1", 1.25),
        ("cupy", "numbatune hit", "phase 1", 1.35),
        ("torch", "numbatune hit", "phase 1", 1.35),
        *((kind, "hit that waits for another stream", "phase 2", 1.5) for kind in _KINDS),
        *((kind, "26 arguments: numbatune hit", "phase 1", 2.0) for kind in _KINDS),
    ]
}


def to_the_floor(results: dict[str, Any]) -> dict[str, Any]:
    """Each hit of :data:`FLOOR_TARGETS` measured, as a multiple of the median of the driver's
    ``cuLaunchKernel`` floor timed in the same rounds, with its target."""
    ratios: dict[str, Any] = {}
    for (kind, method, phase), target in FLOOR_TARGETS.items():
        hit = results.get(kind, {}).get(method)
        base = results.get(FLOOR, {}).get(f"cuLaunchKernel, packed once, {phase}")
        if isinstance(hit, float) and isinstance(base, float):
            ratio = hit / base
            ratios[f"{kind}: {method}"] = {"ratio": ratio, "target": target, "met": ratio <= target}
    return ratios


def _record(
    phase: str,
    samples: dict[tuple[str, str], list[float]],
    results: dict[str, Any],
    fast: dict[str, Any],
    rounds: dict[str, Any],
) -> None:
    """A phase's medians into ``results``, those at issue 21's host speed into ``fast``, its
    rounds into ``rounds``."""
    count, medians = at_host_speed(samples, _HOST[phase], ISSUE_HOST_US)
    fast["rounds"][phase] = count
    for (kind, method), values in samples.items():
        results.setdefault(kind, {})[method] = statistics.median(values)
        rounds.setdefault(kind, {})[method] = values
        if count:
            fast.setdefault(kind, {})[method] = medians[kind, method]


def _host_copy(array: Any) -> np.ndarray:
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "get"):
        return array.get()
    return array.cpu().numpy()


def _figure(value: Any) -> str:
    """A method's figure: microseconds, the floor program's medians, or why it did not run."""
    if isinstance(value, float):
        return f"{value:8.2f}"
    if isinstance(value, dict):  # the floor program's own timing
        timed = {name: part for name, part in value.items() if isinstance(part, dict)}
        return ", ".join(f"{name} {part['median_us']:.2f}" for name, part in timed.items())
    return str(value)


def table(result: dict[str, Any]) -> str:
    """One line per launch method and array kind, in microseconds per call: the median over
    all rounds, and over the rounds at issue 21's host speed; then each hit against the
    driver's floor."""
    fast = result.get("at_issue_host_speed", {})
    limit, counts = fast.get("host_limit_us"), fast.get("rounds", {})
    lines = [
        f"{'array kind':<22} {'launch':<44} us/call  rounds where numba cfg <= {limit} us: "
        + ", ".join(f"{phase} {count}" for phase, count in counts.items())
    ]
    for kind, methods in result.items():
        if isinstance(methods, dict) and kind not in ("at_issue_host_speed", "rounds", _RATIOS):
            for method, value in methods.items():
                figure = _figure(value)
                at_speed = fast.get(kind, {}).get(method)
                figure += f" {at_speed:8.2f}" if at_speed is not None else ""
                lines.append(f"{kind:<22} {method:<44} {figure}")
    for name, ratio in result.get(_RATIOS, {}).items():
        verdict = "met" if ratio["met"] else "NOT met"
        lines.append(
            f"{_RATIOS}: {name:<52} {ratio['ratio']:5.2f}x (target {ratio['target']}x: {verdict})"
        )
    lines.append(f"results checked: {result.get('results_checked')}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure_dispatch()))
