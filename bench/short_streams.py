"""Short-lived streams: the stream order's state and the cost of a hit stay flat.

CuPy streams, then torch streams, are made by the thousand, each given one tuned launch over
arrays that two long-lived streams also use, and dropped. At each checkpoint the script prints
the records the stream monitor and its order keep, the process's resident memory, and the time
of a hit alternating between the two long-lived streams (the median over batches of 2,000
calls). On a GPU only::

    python3 -m bench.short_streams [COUNT]     # COUNT streams of each library (100,000)
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from bench.dispatch_cost import SIZE, tuned_scale
from numbatune.streams.monitor import monitor


def _state() -> dict[str, int]:
    """What the monitor and its order keep, and the resident memory (MiB)."""
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    order = monitor.order
    return {
        "monitor streams": len(monitor._streams),
        "order streams": len(order.streams),
        "buffers": len(order.last_use),
        "quick": len(order.quick),
        "retiring": len(monitor._retiring),
        "rss MiB": rss // 1024,
    }


def _hit_us(kernel: Any, x: Any, out: Any, streams: tuple[Any, Any], sync: Any) -> float:
    """The median time of a hit alternating between two streams, in microseconds."""
    samples = []
    for _ in range(7):
        sync()
        started = time.perf_counter()
        for call in range(2000):
            kernel(x, out, 2.0, stream=streams[call & 1])
        sync()
        samples.append((time.perf_counter() - started) / 2000 * 1e6)
    return statistics.median(samples)


def run(library: str, count: int) -> list[tuple[int, float, dict[str, int]]]:
    """``count`` short-lived streams of ``library`` ("cupy" or "torch"): each checkpoint's
    stream count, hit time and state."""
    if library == "cupy":
        import cupy

        x, out = cupy.ones(SIZE, cupy.float32), cupy.zeros(SIZE, cupy.float32)
        make = lambda: cupy.cuda.Stream(non_blocking=True)  # noqa: E731
        sync = cupy.cuda.Device().synchronize
    else:
        import torch

        x, out = torch.ones(SIZE, device="cuda"), torch.zeros(SIZE, device="cuda")
        make = torch.cuda.Stream
        sync = torch.cuda.synchronize
    kernel = tuned_scale(f"short_streams_{library}")
    kernel(x, out, 2.0)  # tuned here
    long_lived = (make(), make())
    rows = []
    for made in range(count + 1):
        if made % (count // 4) == 0:
            time.sleep(0.05)  # (the keeper's looks catch up)
            rows.append((made, _hit_us(kernel, x, out, long_lived, sync), _state()))
            print(library, *rows[-1], flush=True)
        stream = make()
        kernel(x, out, 2.0, stream=stream)
        del stream
    sync()
    assert float(out[0]) == 2.0
    return rows


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 100_000
    bounded = True
    for library in ("cupy", "torch"):
        rows = run(library, count)
        first, last = rows[0][1], rows[-1][1]
        most = max(row[2]["order streams"] for row in rows)
        print(f"{library}: hit {first:.2f} us first, {last:.2f} us last; at most {most} streams")
        bounded &= most < 1000
    print("bounded" if bounded else "NOT bounded")
    return 0 if bounded else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
