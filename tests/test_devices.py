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


def _on_device(library, device, value):
    """A 1000-element float32 array of ``value`` on GPU ``device``, of ``library``."""
    host = np.full(1000, value, np.float32)
    if library == "numba":
        with cuda.gpus[device]:
            return cuda.to_device(host)
    module = pytest.importorskip(library)
    if library == "torch":
        return module.from_numpy(host).to(f"cuda:{device}")
    with module.cuda.Device(device):
        return module.asarray(host)


@pytest.mark.parametrize("library", ["numba", "torch", "cupy"])
def test_an_array_on_another_gpu_is_refused_by_name_and_left_as_it_was(library):
    _two_gpus()
    tuned = nt.autotune(variants=nt.product(BLOCK=[64, 128]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    here, there = _on_device(library, 0, 1.0), _on_device(library, 1, 1.0)
    out_there = _on_device(library, 1, 0.0)
    with cuda.gpus[0]:
        refused = "argument 'a' is on GPU 1, but the kernel launches on GPU 0"
        with pytest.raises(ValueError, match=refused):
            tuned(there, _on_device(library, 0, 0.0))  # a miss: refused before tuning
        out = _on_device(library, 0, 0.0)
        tuned(here, out)
        tuned(here, out)  # a hit: GPU 0's fast path
        with pytest.raises(ValueError, match="argument 'out' is on GPU 1"):
            tuned(here, out_there)  # the fast path hands it on, and it is refused
        cuda.synchronize()
    np.testing.assert_array_equal(kernels.to_host(out), 2.0)
    np.testing.assert_array_equal(kernels.to_host(out_there), 0.0)
