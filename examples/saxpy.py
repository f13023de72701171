"""saxpy, out = a * x + y, tuned over block size, items per thread and vector width.

Run it: python examples/saxpy.py
"""

import numbatune as nt  # first: on a machine with no GPU it turns numba's simulator on

import numpy as np
from numba import cuda

BLOCK = 256  # threads per block
ITEMS = 1  # runs of VEC elements per thread, strided by BLOCK runs so that accesses coalesce
VEC = 1  # adjacent elements per run (the vector width)


@nt.autotune(
    variants=nt.product(BLOCK=[128, 256, 512, 1024], ITEMS=[1, 2, 4, 8], VEC=[1, 2, 4]),
    # At least one block: a grid of 0 blocks is not a launch CUDA accepts (empty arrays).
    launch=lambda a, x, y, out, *, BLOCK, ITEMS, VEC: (
        max(1, nt.cdiv(x.shape[0], BLOCK * ITEMS * VEC)),
        BLOCK,
    ),
)
@cuda.jit
def saxpy(a, x, y, out):
    first = (cuda.blockIdx.x * BLOCK * ITEMS + cuda.threadIdx.x) * VEC
    for k in range(ITEMS):
        for v in range(VEC):
            i = first + k * BLOCK * VEC + v
            if i < x.shape[0]:
                out[i] = a * x[i] + y[i]


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


if __name__ == "__main__":
    from numbatune import demo

    demo.main([example])
