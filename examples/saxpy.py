"""saxpy, out = a * x + y, tuned over block size, items per thread and vector width.

A thread loads all of its ITEMS * VEC elements of x and y before it stores any of out: out may
alias x or y, so the compiler keeps a load after a store behind it, and a thread that stored
each element before loading the next had two loads in flight at a time. numba reads float32
arrays four bytes at a time whatever VEC is (it cannot tell the compiler that their addresses
are 16-byte aligned), so VEC sets which elements a thread takes (adjacent ones, or BLOCK apart)
rather than the width of its loads; the bytes in flight come from ITEMS * VEC loads a thread.
Run it: python examples/saxpy.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda, float32

BLOCK = 256  # threads per block
ITEMS = 1  # runs of VEC elements per thread, strided by BLOCK runs so that accesses coalesce
VEC = 1  # adjacent elements per run (the vector width)


@nt.autotune(
    variants=nt.product(
        BLOCK=[128, 256, 512, 1024],
        ITEMS=[1, 2, 4, 8],
        VEC=[1, 2, 4],
        where=lambda BLOCK, ITEMS, VEC: ITEMS * VEC <= 16,
    ),
    # At least one block: a grid of 0 blocks is not a launch CUDA accepts (empty arrays).
    launch=lambda a, x, y, out, *, BLOCK, ITEMS, VEC: (
        max(1, nt.cdiv(x.shape[0], BLOCK * ITEMS * VEC)),
        BLOCK,
    ),
)
@cuda.jit
def saxpy(a, x, y, out):
    xs = cuda.local.array((ITEMS, VEC), float32)  # registers: indexed by constants only
    ys = cuda.local.array((ITEMS, VEC), float32)
    first = (
        nt.nonnegative(cuda.blockIdx.x) * BLOCK * ITEMS + nt.nonnegative(cuda.threadIdx.x)
    ) * VEC
    n = x.shape[0]
    for k in nt.static_range(ITEMS):  # every load issued before any store (out may alias x)
        for v in nt.static_range(VEC):
            i = first + k * BLOCK * VEC + v
            if i < n:
                xs[k, v] = x[i]
                ys[k, v] = y[i]
    for k in nt.static_range(ITEMS):
        for v in nt.static_range(VEC):
            i = first + k * BLOCK * VEC + v
            if i < n:
                out[i] = a * xs[k, v] + ys[k, v]


def example(small: bool = False):
    """The tuned kernel and arguments to tune it on (small: sizes for the simulator)."""
    n = 300 if small else 1 << 28
    rng = np.random.default_rng(0)
    x = cuda.to_device(rng.random(n, dtype=np.float32))
    y = cuda.to_device(rng.random(n, dtype=np.float32))
    return saxpy, (np.float32(2.0), x, y, cuda.device_array(n, np.float32))


def reference(a, x, y, out):
    """What saxpy computes, on the host."""
    return a * x.copy_to_host() + y.copy_to_host()


def work(a, x, y, out):
    """Bytes moved: x and y read, out written, each once."""
    return {"bytes": x.nbytes + y.nbytes + out.nbytes}


def baseline(a, x, y, out):
    """torch.add(y, x, alpha=a, out=out), which reads two arrays and writes one as saxpy does,
    for comparison (bench/ceilings.py)."""
    import torch

    xs, ys, outs = (torch.as_tensor(v, device="cuda") for v in (x, y, out))
    alpha = float(a)
    return "torch.add(y, x, alpha=a)", lambda: torch.add(ys, xs, alpha=alpha, out=outs)


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
