"""Array kinds: a library's arrays are taken by adding one entry to the registry."""

import dataclasses

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import arraykinds, arrays
from numbatune.arraykinds import SIMULATOR, ArrayKind
from tests import kernels


class Wrapped:
    """A numba device array behind an object of another class, offering what the simulator's
    kernels (Python) read of it: ``shape`` and indexing."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def shape(self):
        return self.inner.shape

    def __getitem__(self, index):
        return self.inner[index]

    def __setitem__(self, index, value):
        self.inner[index] = value


class Boxed(Wrapped):
    """A device array of a library numbatune has no entry for: it wraps a numba device array
    and offers what the kernel reads and its host copy."""

    def __init__(self, inner, on_host=False):
        super().__init__(inner)
        self.on_host = on_host

    def __array__(self, dtype=None, copy=None):
        return self.inner.copy_to_host()


#: The one entry that makes Boxed arrays an array kind.
BOXED = ArrayKind(
    name="boxed",
    claims=lambda cls: cls is Boxed,
    read=lambda boxed: arraykinds.NUMBA.read(boxed.inner),
    itemsize=lambda boxed: boxed.inner.dtype.itemsize,
    buffer=lambda boxed: arraykinds.NUMBA.buffer(boxed.inner),
    device=lambda boxed: None,
    refusal=lambda boxed: "a boxed array in host memory" if boxed.on_host else None,
)


def _accumulating():
    """A tuned kernel that adds its first argument to its second."""
    return nt.autotune(variants=nt.product(BLOCK=[4, 8]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )


@pytest.fixture
def boxed_kind(monkeypatch):
    monkeypatch.setattr(arraykinds, "KINDS", list(arraykinds.KINDS))
    monkeypatch.setattr(arraykinds, "_kinds", {})
    arraykinds.register(BOXED)


def _boxed(values, on_host=False):
    return Boxed(cuda.to_device(np.asarray(values, np.float32)), on_host)


def test_an_array_of_a_kind_with_no_entry_is_refused_by_name():
    with pytest.raises(TypeError, match=r"argument 'a' .* must be a device array"):
        _accumulating()(_boxed(np.arange(12)), _boxed(np.zeros(12)))


@pytest.mark.skipif(not SIMULATOR, reason="Boxed runs in the simulator's Python kernels")
def test_one_entry_makes_a_new_array_kind_tune_launch_and_key_end_to_end(boxed_kind):
    x, out = _boxed(np.arange(12)), _boxed(np.zeros(12))
    tuned = _accumulating()
    report = tuned.tune(x, out)
    assert report.key == (((16,), "float32", "C"), ((16,), "float32", "C"))  # by its entry
    np.testing.assert_array_equal(np.asarray(out), 0.0)  # tuning ran on clones
    tuned(x, out)
    np.testing.assert_array_equal(np.asarray(out), np.arange(12))
    assert arrays.nbytes(x) == 48 and arrays.buffer_of(x) == arrays.buffer_of(x.inner)


def test_the_entrys_refusal_is_the_calls_error(boxed_kind):
    with pytest.raises(TypeError, match=r"argument 'out' is a boxed array in host memory"):
        _accumulating()(_boxed(np.arange(12)), _boxed(np.zeros(12), on_host=True))


def test_a_kind_needs_a_new_identifier_as_its_name(boxed_kind):
    with pytest.raises(ValueError, match="new identifier"):
        arraykinds.register(BOXED)
    with pytest.raises(ValueError, match="new identifier"):
        arraykinds.register(ArrayKind("two words", *[lambda value: None] * 5))


@pytest.mark.skipif(not SIMULATOR, reason="Boxed runs in the simulator's Python kernels")
def test_a_tuning_reads_each_array_argument_once(monkeypatch):
    """The call's arguments are read once: for the checks, the default key, the tuning's
    clones and the copies every run starts from."""
    reads = []
    counted = dataclasses.replace(
        BOXED, read=lambda boxed: reads.append(boxed) or BOXED.read(boxed)
    )
    monkeypatch.setattr(arraykinds, "KINDS", list(arraykinds.KINDS))
    monkeypatch.setattr(arraykinds, "_kinds", {})
    arraykinds.register(counted)
    x, out = _boxed(np.arange(12)), _boxed(np.zeros(12))
    report = _accumulating().tune(x, out)
    assert report.source is nt.Source.BENCHMARK
    assert len(reads) == 2 and {id(r) for r in reads} == {id(x), id(out)}


class DLPackOnly(Wrapped):
    """A device array that offers DLPack alone (no ``__cuda_array_interface__``), around a
    numba device array (under the simulator, whose device memory is host memory, ``__dlpack__``
    exports that) or a CUDA torch tensor."""

    def __init__(self, inner, device_type=2):
        super().__init__(inner)
        self.device_type = device_type

    def __dlpack__(self, **options):
        memory = self.inner._ary if SIMULATOR else self.inner
        return memory.__dlpack__(**({} if SIMULATOR else options))

    def __dlpack_device__(self):
        return self.device_type, 0  # 2: CUDA device memory


@pytest.mark.skipif(not SIMULATOR, reason="DLPackOnly is indexed by the simulator's kernels")
def test_an_array_that_offers_only_dlpack_tunes_launches_and_keys_end_to_end():
    x = DLPackOnly(cuda.to_device(np.arange(12, dtype=np.float32)))
    out = DLPackOnly(cuda.to_device(np.zeros(12, np.float32)))
    assert arrays.nbytes(x) == 48 and arraykinds.kind_of(DLPackOnly) is arraykinds.DLPACK
    tuned = _accumulating()
    report = tuned.tune(x, out)
    assert report.key == (((16,), "float32", "C"), ((16,), "float32", "C"))
    np.testing.assert_array_equal(out.inner.copy_to_host(), 0.0)  # tuning ran on clones
    tuned(x, out)
    np.testing.assert_array_equal(out.inner.copy_to_host(), np.arange(12))
    on_host = DLPackOnly(cuda.to_device(np.zeros(12, np.float32)), device_type=1)
    with pytest.raises(TypeError, match=r"argument 'out' is a DLPack array of device type 1"):
        tuned(x, on_host)


@pytest.mark.gpu
def test_a_torch_tensor_seen_only_through_dlpack_tunes_and_launches():
    torch = pytest.importorskip("torch")
    x = DLPackOnly(torch.arange(1000, dtype=torch.float32, device="cuda"))
    out = DLPackOnly(torch.zeros(1000, dtype=torch.float32, device="cuda"))
    tuned = _accumulating()
    report = tuned.tune(x, out)
    assert report.key == (((1024,), "float32", "C"), ((1024,), "float32", "C"))
    assert not out.inner.any()  # tuning ran on clones
    tuned(x, out)
    torch.cuda.synchronize()
    assert torch.equal(out.inner, x.inner)


@cuda.jit
def first_field(records, out):
    i = cuda.grid(1)
    if i < records.shape[0]:
        out[i] = records[i][0]


def test_record_arrays_of_one_size_and_other_fields_have_other_keys():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda records, out, *, BLOCK: (nt.cdiv(records.shape[0], BLOCK), BLOCK),
    )(first_field)
    out = cuda.to_device(np.zeros(8, np.float64))
    points = cuda.to_device(np.zeros(8, np.dtype([("x", np.float32), ("y", np.float32)])))
    pairs = cuda.to_device(np.zeros(8, np.dtype([("i", np.int32), ("j", np.int32)])))
    assert tuned.tune(points, out).source == "benchmark"
    report = tuned.tune(pairs, out)  # 8 bytes too: NumPy names both void64
    assert report.source == "benchmark" and report.key != tuned.tune(points, out).key


@pytest.mark.skipif(not SIMULATOR, reason="Boxed runs in the simulator's Python kernels")
def test_the_launch_function_is_called_with_the_callers_arrays_while_tuning(boxed_kind):
    """Tuning runs on clones (numba arrays), but the launch function is the user's code for
    their arrays: a torch user's ``x.numel()``, here what only a Boxed array has."""
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[4, 8]),
        launch=lambda a, out, *, BLOCK: (nt.cdiv(a.inner.shape[0], BLOCK), BLOCK),
    )(kernels.accumulate)
    x, out = _boxed(np.arange(12)), _boxed(np.zeros(12))
    report = tuned.tune(x, out)
    assert all(r.median_s is not None for r in report.results), [r.error for r in report.results]
    tuned(x, out)
    np.testing.assert_array_equal(np.asarray(out), np.arange(12))
