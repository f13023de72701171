"""Tuned kernels in CUDA graphs and torch.compile, on one GPU, in one process.

- Replay: a torch CUDA graph of ``LAUNCHES`` launches of a tuned kernel's hits against the same
  graph of the same numba kernel launched plain (``kernel[grid, block, stream]``) with the
  winner's block, each
  replayed ``REPLAYS`` times; device time per launch, from CUDA events around the replays.
- Compile: ``f(a)``, which makes ``out``, calls the tuned kernel on it and adds one, eager against
  ``torch.compile(f)`` (a graph break at the kernel), and the kernel as a torch custom op under
  ``torch.compile(f, fullgraph=True)`` and ``mode="reduce-overhead"`` (one CUDA graph); host
  time per call of ``CALLS`` calls, the device synchronised once at the end.

    python3 -m bench.graphs [OUT.json]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from numba import cuda

import numbatune as nt
from numbatune.torch import custom_op

SIZE = 1 << 16
LAUNCHES = 100
REPLAYS = 20
CALLS = 2000
ROUNDS = 5


@cuda.jit
def scale_add(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] += 2 * a[i]


def scale_add_launch(a: Any, out: Any, *, BLOCK: int) -> tuple[int, int]:
    return nt.cdiv(a.shape[0], BLOCK), BLOCK


tuned = nt.autotune(variants=nt.product(BLOCK=[128, 256, 512]), launch=scale_add_launch)(scale_add)


def _graph_of(launch: Callable[[], None]) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            launch()
    return graph


def _replay_us(graph: torch.cuda.CUDAGraph) -> float:
    """The best of ``ROUNDS``: device microseconds per launch over ``REPLAYS`` replays."""
    best = float("inf")
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPLAYS):
            graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / (REPLAYS * LAUNCHES))
    return best


def replay(a: torch.Tensor, out: torch.Tensor) -> dict[str, float]:
    best = tuned.warmup(a, out).best
    grid, block = scale_add_launch(a, out, **best)
    arrays = cuda.as_cuda_array(a), cuda.as_cuda_array(out)

    def plain_launch() -> None:
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        scale_add[grid, block, stream](*arrays)  # (it reads no parameter: the same code)

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # warm both on a side stream, as torch's documentation says
        tuned(a, out)
        plain_launch()
    torch.cuda.synchronize()
    return {
        "tuned_replayed_us_per_launch": _replay_us(_graph_of(lambda: tuned(a, out))),
        "plain_replayed_us_per_launch": _replay_us(_graph_of(plain_launch)),
    }


def _per_call_us(f: Callable[..., Any], *args: Any) -> float:
    for _ in range(20):
        f(*args)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CALLS):
            f(*args)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - started) * 1e6 / CALLS)
    return best


def compiled(a: torch.Tensor) -> dict[str, float]:
    op = custom_op(tuned, mutates_args=["out"], name="bench_scale_add")

    def with_kernel(a: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(a)
        tuned(a, out)
        return out + 1

    def with_op(a: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(a)
        op(a, out)
        return out + 1

    return {
        "eager_us_per_call": _per_call_us(with_kernel, a),
        "compiled_graph_break_us_per_call": _per_call_us(torch.compile(with_kernel), a),
        "eager_custom_op_us_per_call": _per_call_us(with_op, a),
        "compiled_fullgraph_us_per_call": _per_call_us(torch.compile(with_op, fullgraph=True), a),
        "compiled_reduce_overhead_us_per_call": _per_call_us(
            torch.compile(with_op, fullgraph=True, mode="reduce-overhead"), a
        ),
    }


def run(smoke: bool) -> dict[str, Any] | str:
    """Both measures on the GPU (``bench/run.py``'s ``graphs`` section); under the simulator
    there is no CUDA graph to capture."""
    if smoke or not torch.cuda.is_available():
        return "not run: needs a GPU and torch's CUDA build"
    a = torch.ones(SIZE, device="cuda")
    out = torch.zeros(SIZE, device="cuda")
    return {"device": torch.cuda.get_device_name(), "size": SIZE, **replay(a, out), **compiled(a)}


def table(result: dict[str, Any] | str) -> str:
    """One line per figure."""
    if isinstance(result, str):
        return result
    return "\n".join(
        f"{name:<40} {value:9.3f}" for name, value in result.items() if isinstance(value, float)
    )


def main(argv: list[str]) -> None:
    results = run(smoke=False)
    print(json.dumps(results, indent=1))
    if argv:
        with open(argv[0], "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
