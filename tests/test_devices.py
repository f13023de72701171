"""A process that uses several GPUs: each device has its own winners, fast paths and cache
partition, and no compiled function of one is launched on another. Runs where two GPUs exist."""

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from tests import kernels

pytestmark = pytest.mark.gpu


def _two_gpus():
    if len(cuda.gpus) < 2:
        pytest.skip("needs two GPUs")


def test_each_device_tunes_and_launches_on_its_own():
    _two_gpus()
    tuned = nt.autotune(variants=nt.product(BLOCK=[64, 128]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    results = []
    for device in (0, 1, 0, 1):
        with cuda.gpus[device]:
            a = cuda.to_device(np.full(1000, device + 1, np.float32))
            out = cuda.to_device(np.zeros(1000, np.float32))
            tuned(a, out)
            tuned(a, out)  # the second call: this device's fast path
            results.append(out.copy_to_host())
    for device, out in zip((0, 1, 0, 1), results, strict=True):
        assert (out == 2 * (device + 1)).all()
    states = tuned._shared.devices
    assert len({id(state) for state in states.values()}) == 2
    partitions = {state.cache._directory for state in states.values()}
    assert len(partitions) == len({str(p) for p in partitions})
