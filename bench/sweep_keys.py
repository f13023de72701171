"""Issue 23 on the H100: record the keys of five examples, then (after a sweep) check that an
imported export makes each a hit. ``record``: run each shape once (NUMBATUNE_RECORD and
NUMBATUNE_ON_MISS set by the caller); ``check EXPORT``: a fresh process imports EXPORT, calls
every shape, and prints each key's report source and the kernels' benchmark counts."""

import json
import sys
import time

import numpy as np
from numba import cuda

sys.path.insert(0, "examples")
import reduction
import saxpy
import softmax
import stencil
import transpose

import numbatune as nt


def matrix(shape):
    return cuda.to_device(np.ones(shape, np.float32))


CALLS = [
    *[
        (saxpy.saxpy, lambda n=n: (np.float32(2), matrix(n), matrix(n), matrix(n)))
        for n in (1 << 20, 1 << 22, 1 << 24, 1 << 26)
    ],
    *[
        (softmax.softmax, lambda s=s: (matrix(s), matrix(s)))
        for s in ((4096, 256), (4096, 1024), (16384, 1024), (1024, 4096))
    ],
    *[
        (stencil.laplace, lambda s=s: (matrix(s), matrix(s)))
        for s in ((512, 512), (1024, 1024), (2048, 2048), (4096, 1024))
    ],
    *[
        (transpose.transpose, lambda s=s: (matrix(s), matrix(s[::-1])))
        for s in ((1024, 1024), (2048, 2048), (4096, 1024), (1024, 4096))
    ],
    *[
        (reduction.row_sums, lambda s=s: (matrix(s), matrix(s[0])))
        for s in ((4096, 1024), (1024, 4096), (16384, 256), (1, 1 << 24))
    ],
]

if __name__ == "__main__":
    if sys.argv[1] == "check":
        nt.cache_import(sys.argv[2])
    started = time.perf_counter()
    sources = []
    for kernel, arguments in CALLS:
        args = arguments()
        kernel(*args)
        cuda.synchronize()
        if sys.argv[1] == "check":
            sources.append(str(kernel.tune(*args).source))
    kernels = {k.function_id: k.stats for k, _ in CALLS}
    print(
        json.dumps(
            {
                "calls": len(CALLS),
                "seconds": time.perf_counter() - started,
                "sources": sources,
                "stats": kernels,
            }
        )
    )
