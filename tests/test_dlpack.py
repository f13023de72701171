"""Arrays read in C, through the DLPack C exchange API or by attribute (CuPy's), give the
kernel exactly the parameters that reading them through their library's Python API gives (the
oracles :func:`_numba_view` and :func:`_memref`), and arrays of another signature are refused.

These run with no GPU: torch's CPU tensors publish the same exchange API as its CUDA tensors,
arrays with CuPy's attributes are made over NumPy's memory (:class:`AttributeArray`), and the
fast path's code is generated and called with the driver launch replaced by a capture.
"""

import dataclasses
import struct
import types

import numpy as np
import pytest
from numba.core import types as numba_types
from numba.np import numpy_support

import numbatune as nt
from numbatune import _native, arraykinds, arrays, devices, native
from numbatune.arrays import buffer_of
from numbatune.cache.tunecache import WinnerTable
from numbatune.compilers import numba_parameters
from numbatune.compilers.base import ArrayParameters, ArrayStructure, LaunchTarget
from numbatune.keys import KeyParts, default_key, default_key_part
from numbatune.launch import fastpath
from numbatune.launch.layout import ArgumentPlan
from numbatune.streams.monitor import Monitor
from tests.test_streams import RecordingEvents

torch = pytest.importorskip("torch")

#: The structure indices the C extension's reads take.
NUMBA, MEMREF = (native.STRUCTURES.index(s.value) for s in ArrayStructure)

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
          "complex64", "complex128"]  # fmt: skip


def _views(dtype):
    """Tensors of each rank and layout numba types: C, Fortran order, strided, 0-d, empty."""
    base = torch.arange(6 * 10 * 3).reshape(6, 10, 3).to(getattr(torch, dtype))
    return {
        "1d": base[:, 0, 0].contiguous(),
        "1d strided": base[:, 0, 0].contiguous()[::2],
        "2d C": base[:, :, 0].contiguous(),
        "2d F": base[:, :, 0].contiguous().t(),
        "2d strided": base[:, :, 0].contiguous()[1::2, ::3],
        "3d C": base.contiguous(),
        "3d strided": base[:, ::2, 1:],
        "0d": base[0, 0, 0].clone(),
        "empty": base[:0, :, 0],
    }


def _numba_type(value):
    """How numba types a device array like ``value`` (numba's own typing needs a GPU)."""
    if isinstance(value, tuple):
        return numba_types.Tuple([_numba_type(item) for item in value])
    if isinstance(value, bool | np.bool_):
        return numba_types.boolean
    if isinstance(value, AttributeArray):
        return numba_types.Array(numpy_support.from_dtype(value.dtype), value.ndim, value.layout)
    if not isinstance(value, torch.Tensor):
        return numba_types.float64
    dtype = numpy_support.from_dtype(torch.empty(0, dtype=value.dtype).numpy().dtype)
    return numba_types.Array(dtype, value.dim(), arrays.read(value)[2])


def _natural_layout(fields):
    """(offset, size) of each parameter, each at its natural alignment, as the driver lays
    them out."""
    layout, position = [], 0
    for letter in fields:
        size = struct.calcsize(letter)
        position = -(-position // size) * size
        layout.append((position, size))
        position += size
    return layout


def _general_path(args, stream):
    raise AssertionError("the fast path handed the call to the general path")


def memref_parameters(argtype, value):
    """The parameters of a compiler whose kernels take arrays as memref descriptors
    (numba-cuda-mlir's), its other parameters as numba's."""
    found = numba_parameters.parameters(argtype, value)
    if isinstance(found, ArrayParameters):
        return dataclasses.replace(found, structure=ArrayStructure.MEMREF)
    return found


def _without_a_driver(monkeypatch):
    """Fast paths made from here on launch by capturing the packed parameters (into the
    returned list) instead of calling the driver, the stream order's events standing in for
    the driver's."""
    launched = []
    monkeypatch.setattr(_native, "launch", lambda *call: launched.append(call[3]) or 0)
    events = RecordingEvents()  # (the fake streams' handles never reach a driver)
    events.released.set()  # the device passes each event at once
    monkeypatch.setattr(fastpath, "monitor", Monitor(events))
    monkeypatch.setattr(fastpath, "cuda", types.SimpleNamespace(
        current_context=lambda: types.SimpleNamespace(handle=0)))  # fmt: skip
    return launched


def _fast_path(
    example,
    monkeypatch,
    winners=None,
    parameters=numba_parameters.parameters,
    launch=lambda *a: (1, 1),
):
    """The fast path generated for arguments like ``example``, launching the ``winners`` of
    their keys with the ``launch`` function's configuration, with the launch capturing the
    packed parameters (into the returned list) instead of calling the driver, and the stream
    order's events standing in for the driver's; ``parameters`` says how arguments become
    parameters."""
    plan = ArgumentPlan(parameters)
    for index, value in enumerate(example):
        assert plan.add(f"a{index}", _numba_type(value), value)
    plan.close()
    launched = _without_a_driver(monkeypatch)
    hooks = fastpath.Hooks("copy", launch, None, _general_path, None, None)
    layout = _natural_layout(plan.fields)
    winners = WinnerTable() if winners is None else winners
    path = fastpath._generate(plan, layout, example, winners, hooks, None, False)
    path._functions[0] = 1
    return path, launched


def _parameters(path, launched, args):
    """The parameters the fast path packs for ``args``, or None when it refuses them."""
    winner = types.SimpleNamespace(index=0, params={})
    return launched.pop() if path.launch_winner(args, winner, None) else None


def test_the_c_extension_reads_torch_tensors_through_dlpack():
    # (the C extension loads where no CUDA driver does, as in CI)
    assert _native.dlpack_api(torch.Tensor) != 0
    assert _native.dlpack_api(int) == 0  # a class with no C exchange API


def _numba_view(array):
    """numba's kernel parameters of a tensor or :class:`AttributeArray`, from torch's or
    NumPy's Python API (the oracle of the C reads): meminfo and parent 0, size, itemsize, data
    pointer, shape and strides in bytes (those of a C-contiguous array from its shape, as numba
    computes them: a dimension of size 1 may have any stride)."""
    if isinstance(array, torch.Tensor):
        itemsize, shape, pointer = array.element_size(), tuple(array.shape), array.data_ptr()
        strides = tuple(stride * itemsize for stride in array.stride())
        size, contiguous = array.numel(), array.is_contiguous()
    else:
        host = array._host
        itemsize, shape, pointer = host.itemsize, host.shape, host.ctypes.data
        strides, size, contiguous = host.strides, host.size, host.flags.c_contiguous
    if contiguous:
        strides = tuple(itemsize * int(np.prod(shape[d + 1 :])) for d in range(len(shape)))
    return (0, 0, size, itemsize, pointer, *shape, *strides)


def _unpacked(packed, example):
    """The parameters packed for ``example``'s tensors (their int64 fields) and floats."""
    letters = "".join(
        "d" if isinstance(value, float) else f"{len(_numba_view(value))}q" for value in example
    )
    return struct.unpack(f"={letters}", packed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_reads_pack_the_parameters_of_the_python_reads(dtype, monkeypatch):
    for view_name, view in _views(dtype).items():
        example = (view, torch.zeros(3, dtype=torch.float32), 2.5)
        through_dlpack, launched = _fast_path(example, monkeypatch)
        assert "_torch_read" in through_dlpack.code
        packed = _parameters(through_dlpack, launched, example)
        expected = (*_numba_view(view), *_numba_view(example[1]), 2.5)
        assert _unpacked(packed, example) == expected, view_name


def test_tensors_of_a_torch_with_no_dlpack_exchange_api_are_left_to_numbas_launch(monkeypatch):
    """A torch older than 2.10 publishes no DLPack C exchange API: its tensors get no fast
    path (the caller then launches through numba, and says so)."""
    monkeypatch.setattr(_native, "dlpack_api", lambda cls: 0)
    tensor = torch.zeros(4)
    assert not ArgumentPlan(numba_parameters.parameters).add("a0", _numba_type(tensor), tensor)


def _memref(tensor):
    """A tensor's memref descriptor: its data pointer twice, offset 0, its shape and its
    strides in elements (those of a C-contiguous tensor from its shape, as the kernel sees
    them: a dimension of size 1 may have any stride)."""
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    if tensor.is_contiguous():
        strides = tuple(int(np.prod(shape[d + 1 :])) for d in range(len(shape)))
    return (tensor.data_ptr(),) * 2 + (0, *shape, *strides)


def test_a_fast_path_is_built_and_learns_variants_from_the_compilers_launch_targets(monkeypatch):
    example = (torch.zeros(8), torch.zeros(8), 2.5)
    plan = ArgumentPlan(numba_parameters.parameters)
    for index, value in enumerate(example):
        assert plan.add(f"a{index}", _numba_type(value), value)
    layout = _natural_layout(plan.fields)
    argtypes = tuple((t, t, t) for t in map(_numba_type, example))
    targets = {
        "first": LaunchTarget(argtypes, layout, 7, False, numba_parameters.parameters),
        "same": LaunchTarget(argtypes, layout, 8, False, numba_parameters.parameters),
        "other layout": LaunchTarget(argtypes, layout[1:], 9, False, numba_parameters.parameters),
        "cooperative": LaunchTarget(argtypes, layout, 10, True, numba_parameters.parameters),
        "refused": "a debug kernel",
    }
    compiler = types.SimpleNamespace(launch_target=lambda dispatcher, args: targets[dispatcher])
    monkeypatch.setattr(fastpath, "compiler_for", lambda dispatcher: compiler)
    launched = _without_a_driver(monkeypatch)
    hooks = fastpath.Hooks("copy", lambda *args: (1, 1), None, _general_path, None, None)
    assert fastpath.build("refused", example, WinnerTable(), hooks, None) is None
    path = fastpath.build("first", example, WinnerTable(), hooks, None)
    learnt = [path.learn(i, name, example) for i, name in enumerate(targets)]
    assert learnt == [True, True, False, False, False]
    assert path._functions == {0: 7, 1: 8}
    assert path.launch_winner(example, types.SimpleNamespace(index=1, params={}), None)
    assert len(launched) == 1


def test_a_by_shape_launch_function_runs_once_per_shape_value_and_variant_on_hits(monkeypatch):
    calls = []

    def grid(x, out, scale, *, BLOCK):
        calls.append((tuple(x.shape), scale, BLOCK))
        return (x.shape[0] + BLOCK - 1) // BLOCK, BLOCK

    example = (torch.zeros(100), torch.zeros(100), 2.5)
    path, _ = _fast_path(example, monkeypatch, launch=nt.by_shape(grid))
    path._functions[1] = 2
    configs = []
    path.launcher.launch = lambda *call: configs.append(call[1]) or 0
    small = types.SimpleNamespace(index=0, params={"BLOCK": 32})
    large = types.SimpleNamespace(index=1, params={"BLOCK": 64})
    calls_made = [
        (torch.zeros(100), torch.zeros(100), 2.5, small),
        (torch.ones(100), torch.zeros(100), 2.5, small),  # new arrays of the same shapes
        (torch.zeros(300), torch.zeros(300), 2.5, small),  # a new shape
        (torch.zeros(300), torch.zeros(300), 3.5, small),  # a new scalar value
        (torch.zeros(300), torch.zeros(300), 3.5, large),  # another variant
        (torch.zeros(100), torch.zeros(100), 2.5, small),  # seen before
    ]
    for *args, winner in calls_made:
        assert path.launch_winner(tuple(args), winner, None)
    assert calls == [((100,), 2.5, 32), ((300,), 2.5, 32), ((300,), 3.5, 32), ((300,), 3.5, 64)]
    assert configs == [grid(*args, **winner.params) for *args, winner in calls_made]


@pytest.mark.parametrize("dtype", DTYPES)
def test_memref_reads_pack_pointers_shape_and_strides_in_elements(dtype, monkeypatch):
    """A kernel that takes memref descriptors (numba-cuda-mlir's) gets them from the DLPack
    reads: data pointer twice, offset 0, shape, element strides."""
    for view_name, view in _views(dtype).items():
        example = (view, torch.zeros(3, dtype=torch.float32), 2.5)
        through_dlpack, launched = _fast_path(example, monkeypatch, parameters=memref_parameters)
        assert "_torch_read" in through_dlpack.code
        packed = _parameters(through_dlpack, launched, example)
        fields = 3 + 2 * view.dim()
        expected = _memref(view) + _memref(example[1]) + (2.5,)
        assert struct.unpack(f"={fields}q5qd", packed) == expected, view_name


def test_arrays_in_tuples_are_read_after_their_classes_are_checked(monkeypatch):
    pair = (torch.zeros(4), torch.ones(2, 3))
    example = (pair, torch.zeros(5), 1.0)
    through_dlpack, launched = _fast_path(example, monkeypatch)
    packed = _parameters(through_dlpack, launched, example)
    expected = (*_numba_view(pair[0]), *_numba_view(pair[1]), *_numba_view(example[1]), 1.0)
    assert _unpacked(packed, (*pair, *example[1:])) == expected
    not_a_tensor = ((np.zeros(4), pair[1]), torch.zeros(5), 1.0)
    assert _parameters(through_dlpack, launched, not_a_tensor) is None


@pytest.mark.parametrize(
    "other",
    [
        torch.zeros(8, dtype=torch.float64),  # another dtype
        torch.zeros(8, 2, dtype=torch.float32),  # another rank
        torch.zeros(16, dtype=torch.float32)[::2],  # strided, where the signature is C
        torch.zeros(4, 2, dtype=torch.float32).t()[0],  # the same, from a transpose
    ],
    ids=["dtype", "rank", "strided", "transposed"],
)
def test_arrays_of_another_signature_are_refused(other, monkeypatch):
    example = (torch.zeros(8, dtype=torch.float32), torch.zeros(3), 2.5)
    path, launched = _fast_path(example, monkeypatch)
    assert _parameters(path, launched, example) is not None
    assert _parameters(path, launched, (other, *example[1:])) is None


def _reader(tensor, layout="C", parts=None, offset=None):
    """The C extension's reader of one tensor like ``tensor``, with ``parts`` (a KeyParts) the
    source of its part of the key, or none, and ``offset`` its method giving its offset."""
    api = _native.dlpack_api(torch.Tensor)
    expected = native.EXPECTED.pack(*_native.describe(api, tensor)[:5], ord(layout), NUMBA, True)
    return _native.Reader(api, expected, (parts,), (1,), offset)


def test_a_reader_gives_the_extents_it_read_last_as_one_object_while_they_stay():
    """What a ``by_shape`` launch function's memo is keyed by on a hit: the last read's
    extents, the same tuple while they are the same (it then hashes and compares quickly), a
    new one when an array of another shape is read."""
    reader = _reader(torch.zeros(2, 3))
    reader.read((torch.zeros(2, 3),))
    first = reader.shapes
    reader.read((torch.ones(2, 3),))  # another tensor of the same shape
    assert reader.shapes is first and first == (2, 3)
    reader.read((torch.zeros(4, 5),))
    assert reader.shapes == (4, 5)
    assert reader.read((torch.zeros(4),)) is None  # another rank: refused, nothing read
    assert reader.shapes == (4, 5)


def test_a_read_asked_for_allocations_gives_where_each_tensors_allocation_starts():
    """What orders launches across streams: where each tensor's allocation starts, as the
    general path finds it (views at offsets into one storage share it), read only when asked;
    a reader that does not know the offset method gives None."""
    storage = torch.arange(16, dtype=torch.float32)
    for view in (storage, storage[3:7], storage.view(4, 4)[2]):
        read = _reader(view, offset=arraykinds.TORCH.offset_method).read
        assert read((view,), True)[-1] == (storage.data_ptr(),) == (buffer_of(view),)
        assert read((view,))[-1] is None
        assert read((view,), False)[-1] is None
        assert _reader(view).read((view,), True)[-1] is None
    tensor = storage[4:8].clone()
    read = _reader(tensor, offset=arraykinds.TORCH.offset_method).read
    assert read((tensor,), True)[-1] == (tensor.data_ptr(),)
    other = torch.arange(32, dtype=torch.float32)
    tensor.set_(other.untyped_storage(), 8, (4,))  # in place, onto another allocation
    assert read((tensor,), True)[-1] == (other.data_ptr(),) == (buffer_of(tensor),)
    tensor.resize_(1 << 16)  # in place, maybe into a new allocation
    assert read((tensor[:4],), True)[-1] == (buffer_of(tensor),)


def test_a_read_reads_an_arrays_allocation_again_only_for_another_array_or_data_pointer(
    attribute_arrays,
):
    """An array's allocation is kept while it is the same live array with the same data
    pointer; a new array, or one whose data moved, has it read again."""
    looked = []

    class Memory:
        def __init__(self, array):
            self.ptr, self.device_id, self._base = array._host.ctypes.data, 0, array._base

        @property
        def mem(self):
            looked.append(self._base.ctypes.data)
            return types.SimpleNamespace(ptr=self._base.ctypes.data)

    class Counted(AttributeArray):
        data = property(Memory)

    first, second = np.zeros(8, np.float32), np.zeros(8, np.float32)
    expected = native.EXPECTED.pack(2, 0, 1, 0, 32, ord("C"), NUMBA, False)
    source = (arraykinds.CUPY.attributes.names(), lambda: CURRENT, (np.dtype("float32"),))
    read = _native.Reader(source, expected, (None,), (1,)).read
    array = Counted(first)
    for _ in range(3):
        assert read((array,), True)[-1] == (first.ctypes.data,)
    assert looked == [first.ctypes.data]
    array._host, array._base = second, second  # (its data moved, as set_ moves a tensor's)
    assert read((array,), True)[-1] == (second.ctypes.data,)
    assert read((Counted(first[2:]),), True)[-1] == (first.ctypes.data,)
    assert looked == [first.ctypes.data, second.ctypes.data, first.ctypes.data]


def test_launches_over_views_of_one_tensor_on_two_streams_wait_for_each_other(monkeypatch):
    """Once launches are ordered across streams, a fast path notes where its tensors'
    allocations start, as the general path does: a launch over views of a tensor waits for an
    earlier launch over other views of it on another stream, not for one over another
    tensor."""
    first, second = torch.zeros(16), torch.zeros(16)
    example = (first[:8], first[8:], 2.5)
    winners = WinnerTable()
    path, _ = _fast_path(example, monkeypatch, winners=winners)
    winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
    events = fastpath.monitor.events
    path.call(example, 7)
    path.call((second[:8], second[8:], 2.5), 8)  # a second stream: every launch is ordered
    path.call(example, 7)
    del events.waits[:]
    path.call((first[8:], first[:8], 2.5), 8)
    assert (8, 7) in events.waits
    del events.waits[:]
    path.call((second[4:12], second[:8], 2.5), 7)
    assert (7, 8) in events.waits
    buffers = set(fastpath.monitor.order.last_use)
    assert buffers == {buffer_of(first), buffer_of(second)}


def test_arrays_on_another_device_are_refused():
    api, tensor = _native.dlpack_api(torch.Tensor), torch.zeros(4)
    device_type, device_id, ndim, code, bits, _ = _native.describe(api, tensor)
    assert (device_type, ndim, code, bits) == (1, 1, 2, 32)  # CPU, float32
    here = native.EXPECTED.pack(device_type, device_id, ndim, code, bits, ord("C"), NUMBA, True)
    on_a_gpu = native.EXPECTED.pack(2, device_id, ndim, code, bits, ord("C"), NUMBA, True)
    current, key, fields, _ = _native.Reader(api, here, (None,), (1,)).read((tensor,))
    assert current == 0  # (torch has no stream for the CPU)
    assert key == ()  # (no part of the key asked for)
    assert struct.unpack("=7q", fields)[2:] == (4, 4, tensor.data_ptr(), 4, 4)
    assert _native.Reader(api, on_a_gpu, (None,), (1,)).read((tensor,)) is None


def test_the_fast_paths_default_key_is_the_general_paths_with_mode_flags(monkeypatch):
    """The key the generated code computes from its reads equals :func:`default_key`: arrays'
    parts and booleans' values (mode flags), in order; a key tuned on the general path is a
    hit of the fast path, and the other mode is a new key."""
    for flag in (True, np.bool_(False)):
        example = (torch.zeros(5), flag, 2.5, torch.zeros(2, 3), (True, 1.0))
        winners = WinnerTable()
        path, launched = _fast_path(example, monkeypatch, winners)
        winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
        path.call(example, None)
        assert len(launched) == 1
        other_mode = (example[0], type(flag)(not flag), *example[2:])
        with pytest.raises(AssertionError, match="general path"):
            path.call(other_mode, None)


def test_a_read_gives_each_tensors_key_part_and_fields_as_they_are_now():
    """Reads hand out the objects of the last read again where nothing changed (the fast path
    compares its key with the last one by their parts' identity): never those of a tensor that
    changed in place, or of another tensor read at the same position."""
    tensor, other = torch.zeros(4), torch.ones(6)
    read = _reader(tensor, parts=KeyParts("float32", "C")).read

    def key_and_fields(value):
        _, key, fields, _ = read((value,))
        assert key == default_key((value,))
        return key, struct.unpack("=7q", fields)[2:]

    first, again = read((tensor,)), read((tensor,))
    assert first[1][0] is again[1][0] and first[2] is again[2]  # its key part, its fields
    assert key_and_fields(tensor)[1] == (4, 4, tensor.data_ptr(), 4, 4)
    assert key_and_fields(other)[1] == (6, 4, other.data_ptr(), 6, 4)
    tensor.resize_(8)  # in place: a new shape, and maybe a new allocation
    assert key_and_fields(tensor)[1] == (8, 4, tensor.data_ptr(), 8, 4)
    tensor.set_(other.untyped_storage(), 1, (5,))
    assert key_and_fields(tensor)[1] == (5, 4, other.data_ptr() + 4, 5, 4)


@pytest.mark.parametrize(
    ("parts", "runs", "error"),
    [
        ((None,), (2,), "runs of at least one array"),
        ((None,), (0, 1), "runs of at least one array"),
        ((None, None), (1,), "one expectation and key part per array"),
        (([],), (1,), "a key part's source is a KeyParts"),
    ],
    ids=["runs past the arrays", "an empty run", "two key parts", "a part's source"],
)
def test_a_reader_of_inconsistent_arguments_is_refused(parts, runs, error):
    api, tensor = _native.dlpack_api(torch.Tensor), torch.zeros(4)
    expected = native.EXPECTED.pack(*_native.describe(api, tensor)[:5], ord("C"), NUMBA, True)
    with pytest.raises((TypeError, ValueError), match=error):
        _native.Reader(api, expected, parts, runs)


def test_arrays_between_other_parameters_are_packed_in_runs_and_keyed_as_the_general_path(
    monkeypatch,
):
    """Tensors whose parameters lead up to each other come in one bytes value of the read,
    others (after a scalar, or inside a tuple) in their own; tensors inside tuples are no part
    of the default key."""
    pair = (torch.zeros(4), torch.ones(2, 3))
    example = (torch.zeros(5), torch.zeros(6), 1.5, torch.zeros(7)[::2], pair, torch.zeros(3))
    winners = WinnerTable()
    through_dlpack, launched = _fast_path(example, monkeypatch, winners=winners)
    # (0, 1), then (3, 4's two, 5): after 1.5
    runs = "_torch_f0, _torch_f1, _ = _torch_read"
    assert runs in through_dlpack.code
    packed = _parameters(through_dlpack, launched, example)
    tensors = (example[0], example[1], 1.5, example[3], *pair, example[5])
    expected = [_numba_view(t) if isinstance(t, torch.Tensor) else (t,) for t in tensors]
    assert _unpacked(packed, tensors) == sum(expected, ())
    winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
    other_pair = (example[0], example[1], 1.5, example[3], (torch.zeros(9), pair[1]), example[5])
    through_dlpack.call(other_pair, None)  # the same key: a hit
    assert launched


def test_a_winner_published_again_for_a_key_is_launched_from_the_next_call(monkeypatch):
    """The fast path keeps its last key's winner only while no winner is published (a retune
    replaces a key's winner in the table)."""
    example = (torch.zeros(5), torch.zeros(5), 2.5)
    winners = WinnerTable()
    path, _ = _fast_path(example, monkeypatch, winners=winners)
    functions = []
    path.launcher.launch = lambda function, *rest: functions.append(function) or 0
    path._functions.update({0: 100, 1: 101})
    key = default_key(example)

    def publish(index):
        winners[key] = types.SimpleNamespace(index=index, params={})
        winners.published += 1

    publish(0)
    path.call(example, None)
    path.call(example, None)
    publish(1)
    path.call(example, None)
    assert functions == [100, 100, 101]
    with pytest.raises(AssertionError, match="general path"):  # another key: not the kept one
        path.call((torch.zeros(9), torch.zeros(5), 2.5), None)


def test_a_launch_configuration_the_launch_cannot_take_is_refused_in_words(monkeypatch):
    """A launch function that returns what no launch takes (a negative grid, for arguments of
    a key tuned with a good one) gets the general path's error, which says what is wrong, not
    the C launcher's conversion error."""
    example = (torch.zeros(5), torch.zeros(5), 2.5)
    winners = WinnerTable()
    winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
    path, _ = _fast_path(example, monkeypatch, winners=winners, launch=lambda *a, **p: (-1, 32))

    def launch(*call):  # as the C launcher refuses it
        raise OverflowError("can't convert negative int to unsigned")

    path.launcher.launch = launch
    refused = r"copy: the launch function returned \(-1, 32\); expected"
    with pytest.raises(ValueError, match=refused):
        path.call(example, None)


def test_c_strides_of_rows_of_2_to_the_31_elements_or_more_are_numbas():
    """numba's strides of a C-contiguous array, made from its shape (empty: no memory)."""
    tensor = torch.empty(0, 2**31, dtype=torch.uint8)
    _, key, fields, _ = _reader(tensor, parts=KeyParts("uint8", "C")).read((tensor,))
    assert key == (((1, 2**31), "uint8", "C"),)
    assert struct.unpack("=9q", fields)[5:] == (0, 2**31, 2**31, 1)


class AttributeArray:
    """An array with the attributes CuPy's ndarray exposes its fields by, over a NumPy array's
    memory (its pointers are host addresses), its shape set in place as CuPy's is."""

    def __init__(self, host, device_id=0):
        self._host, self._device_id = host, device_id
        self._base = host if host.base is None else host.base

    @property
    def shape(self):
        return self._host.shape

    @shape.setter
    def shape(self, shape):
        view = self._host.view()
        view.shape = shape  # (NumPy's setter copies nothing, as CuPy's)
        self._host = view

    _shape = property(lambda self: list(self._host.shape))
    size = property(lambda self: self._host.size)
    strides = property(lambda self: self._host.strides)
    _strides = property(lambda self: list(self._host.strides))
    dtype = property(lambda self: self._host.dtype)
    ndim = property(lambda self: self._host.ndim)
    _c_contiguous = property(lambda self: self._host.flags.c_contiguous)
    _f_contiguous = property(lambda self: self._host.flags.f_contiguous)
    layout = property(lambda self: arrays.read(self)[2])

    @property
    def data(self):
        memory = types.SimpleNamespace(ptr=self._base.ctypes.data)
        return types.SimpleNamespace(ptr=self._host.ctypes.data, device_id=self._device_id,
                                     mem=memory)  # fmt: skip

    def reshape_in_place(self, shape):
        self.shape = shape
        return self

    def __getitem__(self, index):
        return AttributeArray(self._host[index], self._device_id)


#: The current stream of the attribute arrays' library.
CURRENT = types.SimpleNamespace(ptr=0x5000)


@pytest.fixture
def attribute_arrays(monkeypatch):
    """:class:`AttributeArray` as an array kind read as CuPy's (its current stream
    :data:`CURRENT`)."""
    kind = dataclasses.replace(
        arraykinds.CUPY,
        name="attribute_arrays",
        claims=lambda cls: cls is AttributeArray,
        stream=arraykinds.CurrentStream(lambda: lambda: CURRENT, lambda get, a: get().ptr),
    )
    monkeypatch.setattr(arraykinds, "KINDS", [kind, *arraykinds.KINDS])
    monkeypatch.setattr(arraykinds, "_kinds", {})
    return kind


def _attribute_path(example, monkeypatch, winners=None):
    """:func:`_fast_path` of arguments with attribute arrays (their library's current stream
    :data:`CURRENT`)."""
    return _fast_path(example, monkeypatch, winners)


def _attribute_views(dtype):
    """Arrays of each rank and layout numba types: C, Fortran order, strided, 0-d, empty."""
    base = np.arange(6 * 10 * 3).reshape(6, 10, 3).astype(dtype)
    return {
        "1d": AttributeArray(base[:, 0, 0].copy()),
        "1d strided": AttributeArray(base[:, 0, 0].copy())[::2],
        "1d reversed": AttributeArray(base[:, 0, 0].copy())[::-1],
        "2d C": AttributeArray(base[:, :, 0].copy()),
        "2d F": AttributeArray(np.asfortranarray(base[:, :, 0])),
        "2d strided": AttributeArray(base[:, :, 0].copy())[1::2, ::3],
        "3d C": AttributeArray(base.copy()),
        "3d strided": AttributeArray(base.copy())[:, ::2, 1:],
        "0d": AttributeArray(np.array(base[0, 0, 0])),
        "empty": AttributeArray(base[:0, :, 0].copy()),
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_reads_by_attribute_pack_the_parameters_of_the_python_reads(
    dtype, attribute_arrays, monkeypatch
):
    for view_name, view in _attribute_views(dtype).items():
        example = (view, AttributeArray(np.zeros(3, np.float32)), 2.5)
        in_c, launched = _attribute_path(example, monkeypatch)
        assert "_attribute_arrays_read" in in_c.code
        packed = _parameters(in_c, launched, example)
        expected = (*_numba_view(view), *_numba_view(example[1]), 2.5)
        assert _unpacked(packed, example) == expected, view_name


@pytest.mark.parametrize(
    "other",
    [
        AttributeArray(np.zeros(8, np.float64)),  # another dtype
        AttributeArray(np.zeros((8, 2), np.float32)),  # another rank
        AttributeArray(np.zeros(16, np.float32))[::2],  # strided, where the signature is C
        AttributeArray(np.zeros(8, np.float32), device_id=1),  # another device
    ],
    ids=["dtype", "rank", "strided", "device"],
)
def test_attribute_arrays_of_another_signature_are_refused(other, attribute_arrays, monkeypatch):
    monkeypatch.setattr(devices, "several", lambda: True)  # (the device is read and checked)
    example = (AttributeArray(np.zeros(8, np.float32)), AttributeArray(np.zeros(3)), 2.5)
    path, launched = _attribute_path(example, monkeypatch)
    assert _parameters(path, launched, example) is not None
    assert _parameters(path, launched, (other, *example[1:])) is None


def test_attribute_reads_follow_new_arrays_and_shapes_set_in_place(attribute_arrays, monkeypatch):
    """A read by attribute gives the general path's key and the library's current stream,
    whether the arrays are new objects or had their shapes set in place (CuPy's setter)."""
    example = (AttributeArray(np.zeros(12, np.float32)), AttributeArray(np.zeros(3)), 2.5)
    winners = WinnerTable()
    path, launched = _attribute_path(example, monkeypatch, winners=winners)
    winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
    streams = []
    launch = path.launcher.launch
    path.launcher.launch = lambda *call: streams.append(call[2]) or launch(*call)

    def launched_fields(args):
        path.call(args, None)
        assert streams.pop() == CURRENT.ptr
        return struct.unpack("=7q", launched.pop()[:56])[2:]

    assert launched_fields(example) == (12, 4, example[0].data.ptr, 12, 4)
    new_objects = (AttributeArray(np.ones(12, np.float32)), AttributeArray(np.ones(3)), 2.5)
    assert launched_fields(new_objects) == (12, 4, new_objects[0].data.ptr, 12, 4)
    example[0].shape = (3, 4)  # another rank: another signature
    assert _parameters(path, launched, example) is None
    example[0].shape = (12,)
    assert launched_fields(example) == (12, 4, example[0].data.ptr, 12, 4)
    shorter = AttributeArray(np.zeros(24, np.float32)).reshape_in_place((2, 12))[0]
    winners[default_key((shorter, *example[1:]))] = winners[default_key(example)]
    assert launched_fields((shorter, *example[1:])) == (12, 4, shorter.data.ptr, 12, 4)
    grown = AttributeArray(np.zeros(4, np.float32))
    with pytest.raises(AssertionError, match="general path"):
        path.call((grown, *example[1:]), None)  # another key


def test_the_last_read_in_c_composes_the_default_key_of_arrays_of_two_libraries(
    attribute_arrays, monkeypatch
):
    """With arrays of two libraries read in C, and a flag, the last read composes the whole
    key, the other read's parts and the flag among its own, as :func:`default_key` orders
    them: a key tuned on the general path is a hit, another shape is a new key."""
    example = (torch.zeros(5), AttributeArray(np.zeros(3, np.float32)), True, torch.zeros(2, 3))
    winners = WinnerTable()
    path, launched = _attribute_path(example, monkeypatch, winners=winners)
    assert "_hit(args, stream, _attribute_arrays_key, " in path.code  # (the torch parts its items)
    winners[default_key(example)] = types.SimpleNamespace(index=0, params={})
    path.call(example, 7)
    assert len(launched) == 1
    with pytest.raises(AssertionError, match="general path"):
        path.call((example[0], AttributeArray(np.zeros(5, np.float32)), *example[2:]), 7)


def test_a_read_by_attribute_asked_for_allocations_gives_where_each_arrays_allocation_starts(
    attribute_arrays,
):
    """CuPy's ``data.mem.ptr``, read in C when asked; None for all where one cannot be read
    (the general path's read in Python says why)."""
    base = np.zeros(16, np.float32)
    views = (AttributeArray(base)[4:8], AttributeArray(np.zeros(4, np.float32)))
    expected = native.EXPECTED.pack(2, 0, 1, 0, 32, ord("C"), NUMBA, False)
    source = (arraykinds.CUPY.attributes.names(), lambda: CURRENT, (np.dtype("float32"),) * 2)
    read = _native.Reader(source, expected * 2, (None, None), (2,)).read
    starts = read(views, True)[-1]
    assert starts == (base.ctypes.data, views[1].data.ptr) == tuple(map(buffer_of, views))
    assert read(views)[-1] is None

    class Unowned(AttributeArray):
        data = property(lambda self: types.SimpleNamespace(ptr=self._host.ctypes.data,
                                                           device_id=0))  # fmt: skip

    unowned = (views[0], Unowned(np.zeros(4, np.float32)))
    *_, starts = read(unowned, True)
    assert starts is None


def test_memo_reads_give_each_arrays_kept_parameters_key_part_and_allocation():
    """numba's arrays keep what a launch needs of them in their dict (a memo); a read in C
    takes it from there, has it made where it is not, hands out the last read's key and bytes
    again where they are equal, and refuses an array whose memo carries another token."""

    class Array:  # (stands for a numba device array: a memo kept in its dict)
        def __init__(self, n, pointer):
            self.n, self.pointer = n, pointer

    made = []

    def make(array):
        made.append(array)
        fields = struct.pack("<QQqqQqq", 0, 0, array.n, 4, array.pointer, array.n, 4)
        memo = array.__dict__["_memo"] = ("token", fields, array.pointer - 64)
        return memo

    parts = KeyParts("float32", "C")
    expected = native.EXPECTED.pack(0, 0, 1, 0, 0, 0, NUMBA, False)
    source = ("_memo", make, ("token", "token"))
    keyed = (parts, None)
    read = _native.Reader(source, expected * 2, keyed, (2,)).read
    x, y = Array(8, 4096), Array(3, 8192)
    _, key, fields, allocations = read((x, y), True)
    assert made == [x, y]
    assert key == (default_key_part(((8,), "float32", "C")),)
    assert fields == x._memo[1] + y._memo[1]
    assert allocations == (4096 - 64, 8192 - 64)
    _, again, same_fields, none = read((x, y))
    assert made == [x, y] and again[0] is key[0] and same_fields is fields and none is None
    x.n = 16
    del x._memo  # (made again: a new shape)
    assert read((x, y))[1] == (default_key_part(((16,), "float32", "C")),)
    y._memo = ("another token", *y._memo[1:])
    assert read((x, y)) is None


def test_a_reader_by_attribute_of_inconsistent_sources_is_refused():
    expected = native.EXPECTED.pack(2, 0, 1, 0, 32, ord("C"), NUMBA, False)
    names = arraykinds.CUPY.attributes.names()
    for source in [(names[:-1], lambda: CURRENT, (np.dtype("float32"),)),
                   (names, lambda: CURRENT, ()), "not a source"]:  # fmt: skip
        with pytest.raises(TypeError, match="a source is"):
            _native.Reader(source, expected, (None,), (1,))


def test_reads_by_attribute_call_getset_descriptors_and_follow_their_class():
    """Attributes that are getset descriptors (NumPy's here, Cython's properties in CuPy) are
    read through their getters, the others looked up; a class that changes is read anew, and
    arrays of at most one dimension are read by rank and size."""

    class HostArray(np.ndarray):
        _c_contiguous = property(lambda self: self.flags.c_contiguous)
        memory = property(lambda self: types.SimpleNamespace(ptr=self.ctypes.data, device=0))

    names = ("shape", "strides", "_c_contiguous", "dtype", "memory", "ptr", "device", "ptr",
             "ndim", "size", "allocation")  # fmt: skip

    def read_of(ndim):
        expected = native.EXPECTED.pack(2, 0, ndim, 0, 32, ord("C"), NUMBA, True)
        source = (names, lambda: CURRENT, (np.dtype("float32"),))
        read = _native.Reader(source, expected, (None,), (1,)).read
        return lambda array: (
            read((array,)) and struct.unpack(f"={5 + 2 * ndim}q", read((array,))[2])
        )

    matrix = np.zeros((3, 4), np.float32).view(HostArray)
    read = read_of(2)
    assert read(matrix)[2:] == (12, 4, matrix.ctypes.data, 3, 4, 16, 4)
    matrix.shape = (4, 3)  # in place
    assert read(matrix)[5:7] == (4, 3)
    assert read(matrix[:, ::2]) is None  # not C-contiguous
    vector = np.zeros(12, np.float32).view(HostArray)
    assert read_of(1)(vector)[2:] == (12, 4, vector.ctypes.data, 12, 4)
    assert read_of(1)(matrix) is None  # another rank
    assert read_of(0)(vector) is None
    HostArray.shape = property(lambda self: (2, 6))  # the class changes: its shape is this
    assert read(matrix)[5:7] == (2, 6)
