"""A tuned call gives exactly what numba's own launch gives, for every argument kind.

On a GPU the winner is launched by numbatune's fast launch where it has a plan for the
arguments and by numba where it has not; under the simulator always by numba. Either way, the
outputs and the shapes, strides and sizes the kernel sees must equal those of
``kernel[grid, block](*args)``.
"""

import contextlib
import logging
import struct
import threading

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR
from tests import kernels

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


@cuda.jit
def copy_1d(x, out, seen):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i]
    if i == 0:
        seen[0], seen[1], seen[2] = x.size, x.shape[0], x.strides[0]


@cuda.jit
def copy_2d(x, out, seen):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        out[i, j] = x[i, j]
    if i == 0 and j == 0:
        seen[0], seen[1], seen[2] = x.size, x.shape[0], x.shape[1]
        seen[3], seen[4] = x.strides[0], x.strides[1]


@cuda.jit
def copy_3d(x, out, seen):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        for k in range(x.shape[2]):
            out[i, j, k] = x[i, j, k]
    if i == 0 and j == 0:
        seen[0], seen[1], seen[2], seen[3] = x.size, x.shape[0], x.shape[1], x.shape[2]
        seen[4], seen[5], seen[6] = x.strides[0], x.strides[1], x.strides[2]


def _grid(x, out, seen):
    if x.ndim == 1:
        return nt.cdiv(max(x.shape[0], 1), 32), 32
    return (nt.cdiv(max(x.shape[0], 1), 4), nt.cdiv(max(x.shape[1], 1), 4)), (4, 4)


KERNELS = {1: copy_1d, 2: copy_2d, 3: copy_3d}
COPIES = {
    ndim: nt.autotune(variants=[{}], launch=_grid, name=f"copy_{ndim}d")(kernel)
    for ndim, kernel in KERNELS.items()
}


def _host(shape, dtype, seed=0):
    values = np.random.default_rng(seed).normal(size=(2, *shape)) * 50
    if np.dtype(dtype).kind == "c":
        return (values[0] + 1j * values[1]).astype(dtype)
    if np.dtype(dtype).kind == "u":
        values = np.abs(values)
    return values[0].astype(dtype)


def _views(host, device):
    """The caller's arrays: contiguous C, Fortran order, and strided views of each rank."""
    yield "1d", device(host[:, 0, 0].copy())
    yield "1d strided", device(host[:, 0, 0].copy())[::2]
    yield "2d C", device(host[:, :, 0].copy())
    yield "2d F", device(np.asfortranarray(host[:, :, 0]))
    yield "2d strided", device(host[:, :, 0].copy())[1::2, ::3]
    yield "3d C", device(host.copy())
    yield "3d strided", device(host.copy())[:, ::2, 1:]


def _device_makers():
    makers = {"numba": cuda.to_device}
    if not SIMULATOR:
        for library in ("cupy", "torch"):
            try:
                module = __import__(library)
            except ImportError:
                continue
            if library == "cupy":
                makers["cupy"] = module.asarray
            else:
                makers["torch"] = lambda host, torch=module: torch.from_numpy(host).cuda()
    return makers


@contextlib.contextmanager
def _only_the_fast_path(tuned):
    """A context in which a call of ``tuned`` that leaves its fast paths fails the test (on a
    GPU; the simulator has none)."""

    def general_path(*args):
        raise AssertionError(f"{tuned.name}: a call with a known key left the fast path")

    with pytest.MonkeyPatch.context() as patch:
        if not SIMULATOR:
            patch.setattr(tuned._winners, "launch", general_path)
        yield


def _run_both(x, dtype):
    """(output, seen) of the tuned call and of numba's launch, on fresh outputs. On a GPU the
    tuned call is made twice; the second, a cache hit, must take the fast path."""
    results = []
    for launch in ("tuned", "numba"):
        out = cuda.device_array(x.shape, dtype=dtype)
        seen = cuda.to_device(np.zeros(8, np.int64))
        if launch == "tuned":
            tuned = COPIES[len(x.shape)]
            tuned(x, out, seen)
            with _only_the_fast_path(tuned):
                tuned(x, out, seen)
        else:
            grid, block = _grid(x, out, seen)
            KERNELS[len(x.shape)][grid, block](x, out, seen)
        results.append((out.copy_to_host(), seen.copy_to_host()))
    return results


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("library", list(_device_makers()))
def test_arrays_of_every_dtype_rank_and_layout_match_numba(library, dtype, caplog):
    make = _device_makers()[library]
    host = _host((6, 10, 3), dtype)
    caplog.set_level(logging.DEBUG, logger="numbatune")
    for view_name, x in _views(host, make):
        (out, seen), (expected_out, expected_seen) = _run_both(x, dtype)
        np.testing.assert_array_equal(out, expected_out, err_msg=view_name)
        np.testing.assert_array_equal(out, kernels.to_host(x), err_msg=view_name)
        assert list(seen) == list(expected_seen), view_name
    if not SIMULATOR:
        assert "launched through numba" not in caplog.text


@cuda.jit
def store_scalars(out, a, b):
    out[0] = a
    out[1] = b


SCALARS = [
    (True, np.bool_(False)),
    (-3, np.int8(-7)),
    (np.int16(-300), np.int32(-70000)),
    (np.int64(-(2**40)), np.uint8(200)),
    (np.uint16(60000), np.uint32(4_000_000_000)),
    (np.uint64(2**63 + 5), 2**62),
    (np.float16(1.5), np.float32(-2.25)),
    (3.125, np.float64(1e300)),
    (1.5 - 2j, np.complex64(0.5 + 0.25j)),
    (np.complex128(-1e200 + 3j), 7j),
]


@pytest.mark.parametrize("a, b", SCALARS, ids=lambda v: type(v).__name__)
def test_scalars_of_every_type_match_numba(a, b, caplog):
    tuned = nt.autotune(variants=[{}], launch=lambda out, a, b: (1, 1))(store_scalars)
    caplog.set_level(logging.DEBUG, logger="numbatune")
    dtype = np.complex128 if isinstance(a, complex | np.complexfloating) else np.float64
    outputs = []
    for launch in (tuned, store_scalars[1, 1]):
        out = cuda.to_device(np.zeros(2, dtype))
        launch(out, a, b)
        outputs.append(out.copy_to_host())
    with _only_the_fast_path(tuned):
        tuned(out, a, b)
    np.testing.assert_array_equal(out.copy_to_host(), outputs[1])
    np.testing.assert_array_equal(outputs[0], outputs[1])
    if not SIMULATOR:
        assert "launched through numba" not in caplog.text


@cuda.jit
def sum_tuple(out, pair, scale):
    out[0] = (pair[0] + pair[1]) * scale


def test_tuples_and_changing_scalar_types_match_numba():
    tuned = nt.autotune(variants=[{}], launch=lambda out, pair, scale: (1, 1))(sum_tuple)
    calls = [
        ((1, 2), 3),
        ((1.5, 2.25), 3),  # same classes at the top, other element types: numba retypes
        ((1, 2.5), 2.0),
        ((np.float32(0.1), np.float32(0.2)), 10),
        ((2**63 + 1, 1), 1),  # beyond int64: numba types it uint64
        ((-4, 1), -1),
        ((1, 2), 2**63 + 3),
    ]
    for pair, scale in [*calls, *reversed(calls)]:  # then again, every signature's path made
        out, expected = cuda.to_device(np.zeros(1)), cuda.to_device(np.zeros(1))
        tuned(out, pair, scale)
        sum_tuple[1, 1](expected, pair, scale)
        assert out.copy_to_host()[0] == expected.copy_to_host()[0], (pair, scale)


def test_concurrent_callers_from_threads_get_their_own_results():
    tuned = COPIES[1]
    inputs = [cuda.to_device(np.full(40, i, np.float32)) for i in range(8)]
    outputs = [cuda.device_array(40, np.float32) for _ in inputs]
    # Made here, not in the threads: while a kernel runs, numba's simulator swaps this module's
    # `cuda` for its own fake one, which has no `to_device`.
    seen = [cuda.to_device(np.zeros(8, np.int64)) for _ in inputs]
    errors = []

    def call(i):
        try:
            for _ in range(5):
                tuned(inputs[i], outputs[i], seen[i])
        except Exception as error:  # reported below, in the main thread
            errors.append(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cuda.synchronize()
    assert not errors
    for i, out in enumerate(outputs):
        assert np.all(out.copy_to_host() == i)


def test_with_fast_launch_off_results_are_the_same():
    x = cuda.to_device(np.arange(20, dtype=np.float32))
    out = cuda.device_array(20, np.float32)
    nt.configure(fast_launch=False)
    try:
        tuned = nt.autotune(variants=[{}], launch=_grid)(copy_1d)
        tuned(x, out, cuda.to_device(np.zeros(8, np.int64)))
    finally:
        nt.configure(fast_launch=True)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(20, dtype=np.float32))


def test_a_by_shape_launch_function_is_called_once_per_shape_and_gives_the_same_results():
    calls = []

    def grid(x, out, seen, *, BLOCK):
        calls.append((x.shape, BLOCK))
        return nt.cdiv(max(x.shape[0], 1), BLOCK), BLOCK

    tuned = nt.autotune(
        variants=nt.product(BLOCK=[16, 32]), launch=nt.by_shape(grid), name="copy_by_shape"
    )(copy_1d)
    for n in (50, 50, 50, 70, 50):
        x = cuda.to_device(np.arange(n, dtype=np.float32))
        out = cuda.device_array(n, np.float32)
        seen = cuda.to_device(np.zeros(8, np.int64))
        tuned(x, out, seen)
        np.testing.assert_array_equal(out.copy_to_host(), x.copy_to_host())
        assert seen.copy_to_host()[:3].tolist() == [n, n, 4]
    # Each variant's configuration once per shape: tuning 50 and 70 met both variants.
    assert sorted(calls) == sorted([((n,), block) for n in (50, 70) for block in (16, 32)])


@pytest.mark.gpu
def test_fast_path_hits_do_not_call_a_by_shape_launch_function():
    calls = []

    def grid(x, out, seen):
        calls.append(x.shape)
        return _grid(x, out, seen)

    tuned = nt.autotune(variants=[{}], launch=nt.by_shape(grid), name="fast_by_shape")(copy_1d)
    x = cuda.to_device(np.arange(40, dtype=np.float32))
    out, seen = cuda.device_array(40, np.float32), cuda.to_device(np.zeros(8, np.int64))
    tuned(x, out, seen)
    assert calls == [(40,)]
    with _only_the_fast_path(tuned):
        for _ in range(3):
            out = cuda.device_array(40, np.float32)
            tuned(x, out, seen)
            np.testing.assert_array_equal(out.copy_to_host(), x.copy_to_host())
    assert calls == [(40,)]


def test_by_shape_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="by_shape: launch must be a launch function"):
        nt.by_shape(42)


@pytest.mark.gpu
def test_the_c_extensions_event_calls_pass_and_raise_the_drivers_failures():
    from numba.cuda.cudadrv.driver import CudaAPIError

    from numbatune import _native

    event = cuda.event(timing=False)
    event.record()
    event.synchronize()
    assert _native.query(int(event.handle)) == 0  # passed
    assert _native.record(int(event.handle), 0) is None
    assert _native.wait(0, int(event.handle)) is None
    with pytest.raises(CudaAPIError, match="cuEventRecord"):
        _native.record(0, 0)  # no event
    with pytest.raises(CudaAPIError, match="cuStreamWaitEvent"):
        _native.wait(0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("explicit", [False, True], ids=["current stream", "explicit stream"])
def test_torch_work_queued_before_a_tuned_call_is_seen_by_it(explicit):
    torch = pytest.importorskip("torch")
    producer, other = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 16, device="cuda")
    out = torch.empty_like(x)
    seen = torch.zeros(8, dtype=torch.int64, device="cuda")
    COPIES[1](x, out, seen)  # tuned: what follows is a cache hit
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(20_000_000)  # keeps the producer's stream busy for milliseconds
        x.fill_(3.0)
        if explicit:
            COPIES[1](x, out, seen, stream=other)
        else:
            COPIES[1](x, out, seen)
    torch.cuda.synchronize()
    assert bool((out == 3.0).all())


@pytest.mark.gpu
def test_torch_tensors_are_read_through_dlpack_with_torchs_current_stream():
    from numbatune import _native, native

    torch = pytest.importorskip("torch")
    api = _native.dlpack_api(torch.Tensor)
    assert api, f"torch {torch.__version__} publishes no DLPack C exchange API"
    x = torch.zeros(1 << 10, device="cuda")
    numba_structure = native.STRUCTURES.index("numba")
    expected = native.EXPECTED.pack(*_native.describe(api, x)[:5], ord("C"), numba_structure, True)
    read = _native.Reader(api, expected, (None,), (1,)).read
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        assert read((x,))[0] == stream.cuda_stream
    assert read((x,))[0] == torch.cuda.current_stream().cuda_stream
    out, seen = torch.empty_like(x), torch.zeros(8, dtype=torch.int64, device="cuda")
    COPIES[1](x, out, seen)
    signatures = COPIES[1]._device_state().signatures
    paths = [path for key, path in signatures.items() if key[0] is torch.Tensor and path]
    assert paths and all("_torch_read" in path.code for path in paths)


@pytest.mark.gpu
def test_cupy_arrays_are_read_in_c_with_cupys_current_stream_and_shape():
    from numbatune import _native, native
    from numbatune.arraykinds import CUPY

    cupy = pytest.importorskip("cupy")
    x = cupy.zeros(1 << 10, dtype=cupy.float32)
    numba_structure = native.STRUCTURES.index("numba")
    expected = native.EXPECTED.pack(2, x.device.id, 1, 0, 32, ord("C"), numba_structure, True)
    source = (CUPY.attributes.names(), CUPY.stream.getter(), (x.dtype,))
    read = _native.Reader(source, expected, (None,), (1,)).read
    stream = cupy.cuda.Stream()
    with stream:
        assert read((x,))[0] == stream.ptr
    assert read((x,))[0] == cupy.cuda.get_current_stream().ptr
    assert struct.unpack("=7q", read((x,))[2])[2:] == (1024, 4, x.data.ptr, 1024, 4)
    x.shape = (32, 32)  # CuPy's setter, in place: another rank
    assert read((x,)) is None
    x.shape = (1024,)
    assert struct.unpack("=7q", read((x,))[2])[2:] == (1024, 4, x.data.ptr, 1024, 4)
    assert read((x[::2],)) is None  # strided, where C is expected
    out, seen = cupy.empty_like(x), cupy.zeros(8, dtype=cupy.int64)
    COPIES[1](x, out, seen)
    signatures = COPIES[1]._device_state().signatures
    paths = [path for key, path in signatures.items() if key[0] is cupy.ndarray and path]
    assert paths and all("_cupy_read" in path.code for path in paths)


@pytest.mark.gpu
@pytest.mark.parametrize("dlpack", [True, False], ids=["read through DLPack", "read in Python"])
def test_a_host_tensor_after_device_tensors_is_refused_not_launched(dlpack, monkeypatch):
    torch = pytest.importorskip("torch")
    if not dlpack:  # (as torch before 2.10 is read: through its Python API)
        monkeypatch.setattr("numbatune.launch.layout._expected_in_c", lambda *arguments: None)
    copy = nt.autotune(variants=[{}], launch=_grid, name=f"copy_host_{dlpack}")(copy_1d)
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    out, seen = torch.empty_like(x), torch.zeros(8, dtype=torch.int64, device="cuda")
    copy(x, out, seen)  # tuned: the fast path of (tensor, tensor, tensor) exists
    with pytest.raises(TypeError, match="argument 'x' is a torch tensor on cpu"):
        copy(x.cpu(), out, seen)
    copy(x * 2, out, seen)
    torch.cuda.synchronize()  # the context is alive: nothing ran on a host pointer
    assert bool((out == x * 2).all())


@pytest.mark.gpu
def test_numba_arrays_of_every_rank_and_layout_match_numba_read_in_c():
    """numba's arrays are read from the memo each keeps, in one call of the C extension for all
    of them: the kernel sees what numba's launch gives it."""
    host = _host((6, 10, 3), "float32")
    for view_name, x in _views(host, cuda.to_device):
        ndim = len(x.shape)
        copy = nt.autotune(variants=[{}], launch=_grid, name=f"copy_memo_{ndim}d")(KERNELS[ndim])
        results = []
        for launch in (copy, copy, KERNELS[ndim][_grid(x, x, None)]):  # tune, hit, numba's
            out, seen = cuda.device_array_like(x), cuda.to_device(np.zeros(8, np.int64))
            launch(x, out, seen)
            results.append((out.copy_to_host(), list(seen.copy_to_host())))
        for out, seen in results[:2]:
            np.testing.assert_array_equal(out, results[2][0], err_msg=view_name)
            assert seen == results[2][1], view_name
        codes = [path.code for path in copy._device_state().signatures.values() if path]
        assert codes and all("_numba_read" in code for code in codes), view_name


def _stream_of_kind(kind, torch):
    if kind == "numba's own (blocking)":
        return cuda.stream()
    if kind == "torch's own (non-blocking)":
        return torch.cuda.Stream()
    return kernels.non_blocking_stream()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind", ["numba's own (blocking)", "torch's own (non-blocking)", "a raw non-blocking handle"]
)
def test_torch_work_on_the_default_stream_is_seen_by_a_tuned_call_on_another_stream(kind):
    """On a blocking stream the driver orders the call after the legacy default stream, and
    numbatune queues no wait of its own; on the others it must."""
    torch = pytest.importorskip("torch")
    x = torch.zeros(1 << 16, device="cuda")
    out = torch.empty_like(x)
    seen = torch.zeros(8, dtype=torch.int64, device="cuda")
    stream = _stream_of_kind(kind, torch)
    COPIES[1](x, out, seen, stream=stream)  # tuned: what follows is a cache hit
    torch.cuda.synchronize()
    assert torch.cuda.current_stream().cuda_stream == 0  # torch's default: the legacy stream
    torch.cuda._sleep(20_000_000)  # keeps the default stream busy for milliseconds
    x.fill_(3.0)
    COPIES[1](x, out, seen, stream=stream)
    torch.cuda.synchronize()
    cuda.synchronize()
    assert bool((out == 3.0).all())


@cuda.jit
def count_up(records):
    i = cuda.grid(1)
    if i < records.shape[0]:
        records[i]["count"] += 1


RECORDS = {
    # numba types arrays of a packed record dtype unaligned (on a GPU it compiles only records
    # whose fields happen to lie at aligned offsets)
    "packed": np.dtype([("position", np.float32, (2,)), ("count", np.int32)]),
    "aligned": np.dtype(
        [("flag", np.int8), ("position", np.float32, (2,)), ("count", np.int32)], align=True
    ),
}


@pytest.mark.parametrize("dtype", RECORDS.values(), ids=RECORDS.keys())
def test_record_arrays_take_the_fast_path_and_count_as_numba_does(dtype, caplog):
    caplog.set_level(logging.DEBUG, logger="numbatune")
    records = cuda.to_device(np.zeros(100, dtype))
    counted = nt.autotune(variants=[{}], launch=lambda r: (4, 32))(count_up)
    counted(records)
    with _only_the_fast_path(counted):
        counted(records)
    assert (records.copy_to_host()["count"] == 2).all()
    if not SIMULATOR:
        assert "launched through numba" not in caplog.text


@pytest.mark.gpu
def test_cooperative_kernels_take_the_fast_path():
    a = cuda.to_device(np.ones(500, np.float32))
    out = cuda.to_device(np.zeros(501, np.float32))
    total = nt.autotune(variants=[{}], launch=lambda a, out: (4, 128))(kernels.grid_total)
    total(a, out)
    with _only_the_fast_path(total):
        total(a, out)
    assert out.copy_to_host()[0] == 500


def test_calls_go_straight_to_a_kernels_one_fast_path_and_by_classes_once_it_has_two():
    from numbatune.binder import Binder

    taken = []
    binder = Binder(2, lambda args, stream: taken.append("general"))

    def ints(args, stream):
        taken.append("ints")

    def floats(args, stream):
        taken.append("floats")

    binder.point({(int, int): ints})
    assert binder.entry is ints  # no lookup: the path checks the classes itself
    binder.point({(int, int): ints, (float, float): floats})
    for args in [(1, 2), (1.0, 2.0), ("a", "b"), (1,)]:
        binder.entry(args, None)
    assert taken == ["ints", "floats", "general", "general"]


def test_calling_a_tuned_kernel_hands_the_arguments_and_stream_to_its_binders_entry():
    """The call of a tuned kernel (the C extension's) passes the argument tuple and the stream
    as given, None without one, to whatever entry the binder holds now."""
    from numbatune.binder import Binder, Called

    taken = []

    class Kernel(Called):
        def __init__(self):
            self._binder = Binder(2, lambda args, stream: taken.append(("general", args, stream)))

    kernel = Kernel()
    stream = object()
    kernel(1, 2.0)
    kernel(3, 4, stream=stream)
    kernel._binder.point({(int, int): lambda args, stream: taken.append(("ints", args, stream))})
    kernel(5, 6)
    assert taken == [
        ("general", (1, 2.0), None),
        ("general", (3, 4), stream),
        ("ints", (5, 6), None),
    ]
    with pytest.raises(TypeError, match="unexpected keyword argument 'steam'"):
        kernel(1, 2, steam=stream)
    assert len(taken) == 3  # (refused before the entry)


def test_packing_gives_the_last_bytes_again_only_for_the_same_objects():
    """The fast path's packing (the C extension's) packs anew for values that are other
    objects, even equal ones: 0.0 and -0.0 are equal but pack apart."""
    from numbatune import _native

    pack = _native.Packer(struct.Struct("<8sd").pack)
    fields, zero, negative_zero = b"12345678", 0.0, -0.0
    first = pack(fields, zero)
    assert first == b"12345678" + struct.pack("<d", 0.0)
    assert pack(fields, zero) is first
    assert pack(fields, negative_zero) == b"12345678" + struct.pack("<d", -0.0)
    with pytest.raises(struct.error):
        pack(fields, "not a number")
    assert pack(fields, zero) == first  # (a failed pack keeps nothing)


def test_a_fast_path_takes_only_arguments_of_exactly_its_classes():
    """The generated code's first check, in one call of the C extension."""
    from types import SimpleNamespace

    from numbatune import _native
    from numbatune.launch import codegen

    class Float(float):
        pass

    plan = SimpleNamespace(steps=[])
    lines = codegen._front(plan, 2, "return 'next'", "return 'other classes'")
    namespace = {"_same_classes": _native.same_classes, "_classes": (int, float)}
    exec("\n".join(["def front(args):", *lines, "    return a0, a1"]), namespace)
    assert namespace["front"]((1, 2.0)) == (1, 2.0)
    for args in [(1, Float(2.0)), (True, 2.0), (1.0, 2.0), (1,), (1, 2.0, 3), ()]:
        assert namespace["front"](args) == "other classes"


def test_declared_types_are_planned_as_numba_converts_arguments_to_them():
    from numba.core import types

    from numbatune.compilers.numba_parameters import planned_type

    c, f, strided = (types.Array(types.float64, 1, layout) for layout in "CFA")
    declared = types.Array(types.float64, 1, "A")
    assert planned_type(declared, c) == c  # an 'A' parameter takes any layout as it is
    assert planned_type(declared, strided) == strided
    assert planned_type(declared, f) == f
    assert planned_type(types.Array(types.float64, 1, "C"), strided) is None
    assert planned_type(declared, types.Array(types.float32, 1, "C")) is None
    assert planned_type(declared, types.Array(types.float64, 2, "C")) is None
    assert planned_type(types.int32, types.int64) == types.int32  # a Python int for i4
    assert planned_type(types.boolean, types.boolean) == types.boolean
    assert planned_type(types.float32, types.int64) == types.float32
    assert planned_type(types.int64, types.float64) is None  # numba truncates; not planned
    pair = types.UniTuple(types.int32, 2)
    assert planned_type(pair, types.UniTuple(types.int64, 2)) == pair
    assert planned_type(pair, types.UniTuple(types.int64, 3)) is None


@cuda.jit("void(i8, f8[:], f8[:], b1)")
def declared_negate(n, a, out, negate):
    i = cuda.grid(1)
    if i < n:
        out[i] = -a[i] if negate else a[i]


@pytest.mark.gpu
def test_kernels_declared_with_a_signature_take_the_fast_path(caplog):
    """Layout 'A' takes C-contiguous and strided arrays; Python int and bool become i8 and
    b1; no winner goes through numba's launch, and nothing warns."""
    caplog.set_level(logging.WARNING, logger="numbatune")
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[64, 128]),
        launch=lambda n, a, out, negate, *, BLOCK: (nt.cdiv(n, BLOCK), BLOCK),
    )(declared_negate)
    host = np.random.default_rng(3).normal(size=400)
    for a in (cuda.to_device(host[:200]), cuda.to_device(host)[::2]):
        out = cuda.to_device(np.zeros(200))
        for negate in (False, True):
            tuned(200, a, out, negate)
            with _only_the_fast_path(tuned):
                tuned(200, a, out, negate)
            expected = a.copy_to_host() * (-1 if negate else 1)
            np.testing.assert_array_equal(out.copy_to_host(), expected)
    assert "launched through numba" not in caplog.text


@cuda.jit("void(f4[:], f4)")
def declared_fill(out, value):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = value


@pytest.mark.gpu
def test_a_float32_parameter_out_of_range_is_launched_as_numba_launches_it():
    """numba converts 1e39 to a float32 infinity; the fast path's packing raised OverflowError
    on hits (first calls, on the general path, were right)."""
    tuned = nt.autotune(variants=nt.product(BLOCK=[32, 64]), launch=lambda out, value, *, BLOCK: (
        nt.cdiv(out.shape[0], BLOCK), BLOCK))(declared_fill)  # fmt: skip
    out = cuda.to_device(np.zeros(64, np.float32))
    for _ in range(3):
        tuned(out, 1e39)
    assert np.isinf(out.copy_to_host()).all()


@cuda.jit
def add_n(x, out, n):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i] + n


@pytest.mark.gpu
def test_a_valid_function_that_raises_on_a_hit_gives_the_general_paths_error():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[16, 32]),
        launch=lambda x, out, n, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
        valid=lambda x, out, n, *, BLOCK: 64 // n > 0,
    )(add_n)
    x, out = cuda.to_device(np.arange(32.0)), cuda.to_device(np.zeros(32))
    tuned(x, out, 1)
    with pytest.raises(nt.LaunchFunctionError, match=r"the valid function raised ZeroDivision"):
        tuned(x, out, 0)  # the same key: a hit, whose fast path asks valid


@pytest.mark.gpu
@pytest.mark.parametrize("make", ["mapped_array", "managed_array"])
def test_numbas_mapped_and_managed_arrays_are_taken(make):
    """They are NumPy arrays in host memory that the device reads too (their class has
    ``__cuda_array_interface__``), not host arrays to refuse."""
    x = getattr(cuda, make)(32, np.float64)
    x[:] = np.arange(32.0)
    out, seen = cuda.to_device(np.zeros(32)), cuda.to_device(np.zeros(3))
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[16, 32]), launch=lambda x, out, seen, *, BLOCK: (2, BLOCK)
    )(copy_1d)
    tuned(x, out, seen)
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(32.0))


@pytest.mark.gpu
def test_a_winner_that_cannot_take_the_fast_path_warns_once_with_the_reason(caplog):
    caplog.set_level(logging.WARNING, logger="numbatune")
    debug = cuda.jit(debug=True, opt=False)(copy_1d.py_func)
    tuned = nt.autotune(variants=[{}], launch=lambda x, out, seen: (1, 32))(debug)
    x = cuda.to_device(np.arange(32.0))
    out, seen = cuda.to_device(np.zeros(32)), cuda.to_device(np.zeros(3))
    for _ in range(3):
        tuned(x, out, seen)
    warned = [r for r in caplog.records if "launched through numba" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert "debug" in warned[0].getMessage()
