"""numba-cuda-mlir's kernels (``from numba_cuda_mlir import cuda``) tuned as numba-cuda's are.

numba-cuda-mlir has no simulator: tuning and launching its kernels runs on a GPU (the tests
marked ``gpu``). What does not run a kernel runs anywhere it is installed: the compiler's
choice, options and identity, compiling without a GPU, and packing the kernel parameters.
"""

import json
import os
import struct
import subprocess
import sys
import types

import numpy as np
import pytest
from numba import cuda as numba_cuda

import numbatune as nt
from numbatune import arrays, compilers
from numbatune.arrays import SIMULATOR
from numbatune.compilers import NUMBA_CUDA, NUMBA_CUDA_MLIR, mlir_parameters
from numbatune.compilers.mlir_kernels import loads
from numbatune.launch.layout import ArgumentPlan, memref_array_memo

mlir = pytest.importorskip("numba_cuda_mlir")
from numba_cuda_mlir import cuda  # noqa: E402
from numba_cuda_mlir.numba_cuda import types as mlir_types  # noqa: E402

ITEMS = 1


def scale_add(a, out, bias):
    """out = 2 a + bias, ITEMS elements a thread."""
    first = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) * ITEMS
    for k in range(ITEMS):
        i = first + k
        if i < a.shape[0]:
            out[i] = 2.0 * a[i] + bias


def scale_add_launch(a, out, bias, *, BLOCK, ITEMS):
    return nt.cdiv(a.shape[0], BLOCK * ITEMS), BLOCK


def _tuned(kernel=None, blocks=(64, 256), **options):
    """The kernel tuned over ``blocks`` and 1, 2 or 4 items a thread (tests that count what
    a tuning did give blocks of their own: tuned kernels of the same code and variants share
    their compiled kernels and, on one device and cache, their winners)."""
    return nt.autotune(
        variants=nt.product(BLOCK=list(blocks), ITEMS=[1, 2, 4]), launch=scale_add_launch,
        **options,
    )(kernel or cuda.jit(scale_add))  # fmt: skip


def test_a_numba_cuda_mlir_kernel_is_numba_cuda_mlirs_to_compile():
    assert compilers.compiler_for(cuda.jit(scale_add)) is NUMBA_CUDA_MLIR
    assert compilers.compiler_for(numba_cuda.jit(scale_add)) is NUMBA_CUDA
    assert compilers.available()["numba-cuda-mlir"] == mlir.__version__
    with pytest.raises(TypeError, match=r"scale_add is a device function"):
        _tuned(cuda.jit(device=True)(scale_add))


def test_the_compiler_is_part_of_the_checksum():
    by_mlir, by_numba = _tuned(), _tuned(numba_cuda.jit(scale_add))
    assert by_mlir.checksum() != by_numba.checksum()
    assert _tuned().checksum() == by_mlir.checksum()
    assert f"numba-cuda-mlir {mlir.__version__}" in NUMBA_CUDA_MLIR.builds.environment()


def test_a_kernels_options_are_those_it_was_decorated_with():
    plain = NUMBA_CUDA_MLIR.unwrap(cuda.jit(scale_add))
    assert plain.jit_options == {} and plain.signatures == ()
    given = cuda.jit(fastmath=True, opt_level=2, max_registers=32, lineinfo=True)(scale_add)
    options = NUMBA_CUDA_MLIR.unwrap(given).jit_options
    assert options == {"fastmath": True, "opt_level": 2, "max_registers": 32, "lineinfo": True}
    again = NUMBA_CUDA_MLIR.specialise(scale_add, scale_add, options)
    assert NUMBA_CUDA_MLIR.unwrap(again).jit_options == options
    assert NUMBA_CUDA_MLIR.unwrap(cuda.jit(opt=False)(scale_add)).jit_options == {"opt": False}


def test_arrays_of_every_kind_are_typed_by_numbatune():
    torch = pytest.importorskip("torch")
    f32 = mlir_types.float32
    argtypes = NUMBA_CUDA_MLIR.argument_types(
        None, (torch.zeros(4, 3).t(), numba_cuda.device_array(5, np.float32), 1.5, (2, True))
    )
    assert argtypes == (
        mlir_types.Array(f32, 2, "F"),
        mlir_types.Array(f32, 1, "C"),
        mlir_types.float64,
        mlir_types.Tuple((mlir_types.int64, mlir_types.boolean)),
    )


def _argtypes():
    array = mlir_types.Array(mlir_types.float32, 1, "C")
    return (array, array, mlir_types.float64)


def test_variants_compile_to_cubins_without_a_gpu():
    """The build compile workers make (no driver: the compute capability is given)."""
    cubins = {}
    for items in (1, 4):
        variant = nt.Variant({"ITEMS": items})
        function = _tuned()._template.specialised_function(variant)
        (built,) = NUMBA_CUDA_MLIR.builds.build(function, {}, _argtypes(), (9, 0))
        kernel = loads(built.payload, (9, 0))
        assert kernel.name.startswith("_Z") and kernel.argtypes == _argtypes()
        assert built.toolchain == NUMBA_CUDA_MLIR.builds.toolchain()
        cubins[items] = kernel.cubin
        with pytest.raises(ValueError, match="no cubin for sm_80"):
            loads(built.payload, (8, 0))
    assert cubins[1] != cubins[4]


def scale_add_nonnegative(a, out, bias):
    """scale_add, indexed through numbatune's helper."""
    i = nt.nonnegative(cuda.blockIdx.x) * cuda.blockDim.x + nt.nonnegative(cuda.threadIdx.x)
    if i < a.shape[0]:
        out[i] = 2.0 * a[i] + bias


@cuda.jit(device=True)
def thread_index():
    """The thread's index in the grid, through numbatune's helper (it reads no variant
    parameter)."""
    return nt.nonnegative(cuda.blockIdx.x) * cuda.blockDim.x + nt.nonnegative(cuda.threadIdx.x)


def scale_add_thread_index(a, out, bias):
    """scale_add, indexed through a device function that calls numbatune's helper."""
    i = thread_index()
    if i < a.shape[0]:
        out[i] = 2.0 * a[i] + bias


@pytest.mark.parametrize("kernel", [scale_add_nonnegative, scale_add_thread_index])
def test_kernels_calling_numbatunes_helpers_compile_with_numba_cuda_mlirs_version_of_them(kernel):
    """nt.nonnegative is a numba-cuda device function: a numba-cuda-mlir kernel, and the
    device functions it calls, call the version numba-cuda-mlir compiles."""
    template = _tuned(cuda.jit(kernel))._template
    function = template.specialised_function(nt.Variant({"BLOCK": 64, "ITEMS": 1}))
    (built,) = NUMBA_CUDA_MLIR.builds.build(function, {}, _argtypes(), (9, 0))
    assert loads(built.payload, (9, 0)).name.startswith("_Z")


@numba_cuda.jit(device=True)
def numba_cuda_thread_index():
    """The thread's index in the grid, as a numba-cuda device function."""
    return numba_cuda.blockIdx.x * numba_cuda.blockDim.x + numba_cuda.threadIdx.x


def scale_add_numba_cuda_index(a, out, bias):
    """scale_add, indexed through a numba-cuda device function."""
    i = numba_cuda_thread_index()
    if i < a.shape[0]:
        out[i] = 2.0 * a[i] + bias


@pytest.mark.parametrize(
    ("make", "other"), [(cuda.jit, "numba-cuda"), (numba_cuda.jit, "numba-cuda-mlir")]
)
def test_a_kernel_that_calls_another_compilers_device_function_is_refused_in_one_line(make, other):
    """Each compiler types a call of the other's device function as an unknown object (every
    variant failed with an AssertionError of numba-cuda-mlir's type inference)."""
    mlir_index = cuda.jit(device=True)(numba_cuda_thread_index.py_func)
    kernel = scale_add_numba_cuda_index if other == "numba-cuda" else _calling(mlir_index)
    with pytest.raises(TypeError) as raised:
        _tuned(make(kernel))
    message = str(raised.value)
    assert "\n" not in message
    assert f"calls numba_cuda_thread_index, a {other} device function" in message


def _calling(index):
    """scale_add_numba_cuda_index calling ``index`` instead."""
    namespace = {**scale_add_numba_cuda_index.__globals__, "numba_cuda_thread_index": index}
    return types.FunctionType(scale_add_numba_cuda_index.__code__, namespace, "scale_add")


#: A kernel module: ``numbatune compile`` builds it for a device it does not have, and a fresh
#: process loads its winner from the disk cache and the kernel store.
MODULE = """
import numbatune as nt
import numpy as np
from numba_cuda_mlir import cuda

ITEMS = 1


@nt.autotune(
    variants=nt.product(BLOCK=[64, 128], ITEMS=[1, 2]),
    launch=lambda a, out, *, BLOCK, ITEMS: (nt.cdiv(a.shape[0], BLOCK * ITEMS), BLOCK),
)
@cuda.jit
def double(a, out):
    first = (nt.nonnegative(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x) * ITEMS
    for k in range(ITEMS):
        if first + k < a.shape[0]:
            out[first + k] = 2 * a[first + k]


def example(small=False):
    return double, (np.zeros(1024, np.float32), np.zeros(1024, np.float32))
"""


def test_numbatune_compile_builds_numba_cuda_mlir_kernels_for_a_device_it_does_not_have(
    tmp_path, capsys
):
    from numbatune import cli

    (tmp_path / "doubling.py").write_text(MODULE)
    status = cli.main(["compile", "--cc", "9.0", "--cache-dir", str(tmp_path / "cache"),
                       "--workers", "1", str(tmp_path / "doubling.py")])  # fmt: skip
    printed = capsys.readouterr()
    assert status == 0, printed.err
    # BLOCK is the launch's alone: two kernels serve the four variants
    assert "4 variants for sm_90: 2 kernels built, 0 variants failed" in printed.err
    assert any((tmp_path / "cache" / "kernels" / "sm_90").rglob("*"))


def test_compile_workers_build_kernels_and_the_device_functions_they_call():
    """Kernels cross to workers forked from a server that imported numba-cuda-mlir (it
    compiled nothing: MLIR's threads would not cross a fork), device functions with them."""
    from numbatune.compile.compiler import build_task, worker_pool

    twice = cuda.jit(device=True)(lambda x: 2.0 * x)

    def helped(a, out, bias):
        i = cuda.grid(1) * ITEMS
        if i < a.shape[0]:
            out[i] = twice(a[i]) + bias

    template = _tuned(cuda.jit(helped))._template
    tasks = [
        build_task(template, [[nt.Variant({"ITEMS": items})]], _argtypes(), (9, 0))
        for items in (1, 2)
    ]
    pool = worker_pool(2, NUMBA_CUDA_MLIR)
    try:
        outcomes = pool.run(tasks, 300)
    finally:
        pool.close()
    kernels = [loads(outcome.value[0].payload, (9, 0)) for outcome in outcomes]
    assert kernels[0].cubin != kernels[1].cubin


def test_arguments_are_packed_as_memref_descriptors_at_the_drivers_offsets():
    strided = types.SimpleNamespace(  # a float32 3 x 4 matrix, rows 8 elements apart
        __cuda_array_interface__={
            "data": (4096, False),
            "shape": (3, 4),
            "strides": (32, 4),
            "typestr": "<f4",
        }
    )
    matrix = mlir_types.Array(mlir_types.float32, 2, "A")
    packings = tuple(
        mlir_parameters.packing(t) for t in (matrix, mlir_types.boolean, mlir_types.float32)
    )
    found = mlir_parameters.fields(packings, (strided, True, 0.5))
    layout = [(8 * i, 8) for i in range(7)] + [(56, 1), (60, 4)]
    data, offsets = mlir_parameters.pack(found, layout)
    assert struct.unpack("<7q?3xf", data) == (4096, 4096, 0, 3, 4, 8, 1, True, 0.5)
    assert struct.unpack("<9q", offsets) == tuple(offset for offset, _ in layout)
    with pytest.raises(RuntimeError, match="layout is not the one numbatune packs"):
        mlir_parameters.pack(found, [*layout[:-1], (60, 8)])
    with pytest.raises(TypeError, match="numbatune does not pass arguments of its type"):
        mlir_parameters.fields((None,), (1j,))


def _own_array(shape, strides, pointer):
    """numba-cuda-mlir's own float32 device array at ``pointer``, over no memory (made without a
    GPU: nothing reads its elements)."""
    from numba_cuda_mlir.numba_cuda.cudadrv import devicearray, driver

    memory = driver.MemoryPointer(None, driver.binding.CUdeviceptr(pointer), size=4096)
    return devicearray.DeviceNDArray(shape, strides, np.float32, gpu_data=memory)


def test_numba_cuda_mlirs_own_arrays_are_planned_for_the_fast_path_as_the_launch_packs_them():
    """Its own arrays take the fast path, read once per array, as numba-cuda's arrays do (and
    not through ``__cuda_array_interface__`` on every call, by the general path)."""
    strided = _own_array((3, 4), (32, 4), 0x7F00_0000_1000)  # rows 8 elements apart
    dense = _own_array((4, 2), (8, 4), 0x7F00_0000_2000)
    assert arrays.read(strided) == ((3, 4), "float32", "A")
    assert arrays.read(dense) == ((4, 2), "float32", "C")
    assert arrays.buffer_of(strided) == 0x7F00_0000_1000
    plan = ArgumentPlan(mlir_parameters.parameters)
    for index, array in enumerate((strided, dense)):
        argtype = NUMBA_CUDA_MLIR.argument_types(None, (array,))[0]
        assert plan.add(f"a{index}", argtype, array)
        _, memref, buffer = memref_array_memo(array)
        packed = mlir_parameters.fields((mlir_parameters.packing(argtype),), (array,))
        assert memref == struct.pack("<7q", *(value for _, value in packed))
        assert buffer == arrays.buffer_of(array)
    assert struct.unpack("<7q", memref_array_memo(strided)[1])[3:] == (3, 4, 8, 1)


@pytest.mark.skipif(not SIMULATOR, reason="a GPU runs numba-cuda-mlir's kernels")
def test_under_numbas_simulator_a_call_says_numba_cuda_mlir_has_none():
    a = numba_cuda.to_device(np.ones(8, np.float32))
    with pytest.raises(Exception, match="numba-cuda-mlir has no simulator"):
        _tuned()(a, numba_cuda.device_array(8, np.float32), 1.0)


# -- on a GPU ---------------------------------------------------------------------------------

N = 1 << 16


def _arrays(library):
    host = np.random.default_rng(0).random(N, dtype=np.float32)
    if library == "numba":
        return numba_cuda.to_device(host), numba_cuda.device_array(N, np.float32)
    if library == "numba-cuda-mlir":
        return cuda.to_device(host), cuda.device_array(N, np.float32)
    module = pytest.importorskip(library)
    if library == "torch":
        return module.from_numpy(host).cuda(), module.empty(N, device="cuda")
    return module.asarray(host), module.empty(N, np.float32)


def _host(array):
    return (
        array.cpu().numpy()
        if hasattr(array, "cpu")
        else np.asarray(array.copy_to_host() if hasattr(array, "copy_to_host") else array.get())
    )


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["numba", "numba-cuda-mlir", "cupy", "torch"])
def test_a_tuned_kernel_computes_what_numpy_does_and_hits_on_its_fast_path(library):
    from tests.test_launch import _only_the_fast_path

    tuned = _tuned()
    a, out = _arrays(library)
    report = tuned.tune(a, out, 1.5, force=True)
    assert report.source == "benchmark"
    assert [r.error for r in report.results] == [None] * 6
    tuned(a, out, 1.5)
    numba_cuda.synchronize()
    np.testing.assert_allclose(_host(out), 2.0 * _host(a) + 1.5, rtol=1e-6)
    with _only_the_fast_path(tuned):
        tuned(a, out, 2.5)
    numba_cuda.synchronize()
    np.testing.assert_allclose(_host(out), 2.0 * _host(a) + 2.5, rtol=1e-6)


@pytest.mark.gpu
def test_each_key_is_tuned_once_and_remembered():
    tuned = _tuned(blocks=(32, 128))
    a, out = _arrays("numba")
    small, small_out = numba_cuda.to_device(np.ones(100, np.float32)), a[:100]
    tuned(a, out, 0.0)
    tuned(small, small_out, 0.0)
    tuned(a, out, 0.0)
    assert tuned.stats["benchmarks"] == 2
    large, little = tuned.tune(a, out, 0.0), tuned.tune(small, small_out, 0.0)
    assert large.source == little.source == "memory" and large.key != little.key


@pytest.mark.gpu
def test_variants_compile_in_worker_processes(monkeypatch):
    from numbatune.compile.compiler import Compiler

    monkeypatch.setattr(nt.settings, "compile_workers", 4)
    in_workers = []
    compile_in_workers = Compiler._compile_in_workers

    def counted(compiler, pool, builds, *rest):
        in_workers.append(len(builds))
        return compile_in_workers(compiler, pool, builds, *rest)

    monkeypatch.setattr(Compiler, "_compile_in_workers", counted)
    report = _tuned(blocks=(96, 192)).tune(*_arrays("numba"), 1.0)
    assert in_workers == [3] and report.compiles == 3


@pytest.mark.gpu
def test_check_mode_compares_every_variant_with_the_reference():
    def wrong_for_4(a, out, bias):
        first = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) * ITEMS
        for k in range(ITEMS):
            i = first + k
            if i < a.shape[0]:
                out[i] = 2.0 * a[i] + bias + (1.0 if ITEMS == 4 else 0.0)

    tuned = _tuned(
        cuda.jit(wrong_for_4), check=nt.Check(reference=lambda a, out, bias: 2 * a + bias)
    )
    report = tuned.tune(*_arrays("numba"), 1.0)
    assert report.checked
    for result in report.results:
        assert (result.mismatch is not None) == (result.variant.params["ITEMS"] == 4)


SCRIPT = """
import json
import numbatune
import numpy as np
from numba import cuda
import mlirkernel

a = cuda.to_device(np.arange(1000, dtype=np.float32))
out = cuda.device_array(1000, np.float32)
report = mlirkernel.double.tune(a, out)
mlirkernel.double(a, out)
print(json.dumps({"source": report.source, "stats": mlirkernel.double.stats,
                  "ok": bool((out.copy_to_host() == 2 * np.arange(1000)).all())}))
"""


@pytest.mark.gpu
def test_a_fresh_process_answers_from_disk_and_loads_the_winner_from_the_kernel_store(tmp_path):
    (tmp_path / "mlirkernel.py").write_text(MODULE)
    env = {
        **os.environ,
        "NUMBATUNE_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                              text=True, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["source"] == "benchmark" and first["ok"]
    assert second["source"] == "disk" and second["ok"]
    assert second["stats"] == {"compiles": 0, "loaded": 1, "benchmarks": 0}


@pytest.mark.gpu
def test_a_kernel_built_without_a_gpu_serves_numba_cuda_mlirs_own_launch_too():
    """A kernel numbatune adds to a dispatcher (built in a worker, or from the kernel store) is
    one numba-cuda-mlir's own launch takes, without compiling it again."""
    function = _tuned()._template.specialised_function(nt.Variant({"ITEMS": 1}))
    (built,) = NUMBA_CUDA_MLIR.builds.build(function, {}, _argtypes(), (9, 0))
    dispatcher = cuda.jit(function)
    NUMBA_CUDA_MLIR.add(dispatcher, _argtypes(), loads(built.payload, (9, 0)), 0)
    host = np.arange(N, dtype=np.float32)
    a, out = cuda.to_device(host), cuda.device_array(N, np.float32)
    dispatcher[nt.cdiv(N, 128), 128](a, out, 1.0)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * host + 1)
    assert len(dispatcher.overloads) == 1


def test_the_launch_target_gives_the_overloads_types_layout_and_function(monkeypatch):
    """(The driver's parts faked: under the simulator nothing loads.)"""
    from numbatune.compilers import numba_cuda_mlir
    from numbatune.compilers.mlir_kernels import CompiledKernel

    f4, f8, i4, i8 = mlir_types.float32, mlir_types.float64, mlir_types.int32, mlir_types.int64
    compiled = CompiledKernel(b"", "k", (9, 0), (), True, (f4, i4))
    compiled.function = lambda: 0x99
    kernel = types.SimpleNamespace(
        overloads={(f8, i8): compiled}, _can_compile=True, _requires_launch_config=False
    )
    assert NUMBA_CUDA_MLIR.launch_target(kernel, (2.5, 3)) == numba_cuda_mlir.NO_SIMULATOR
    monkeypatch.setattr(numba_cuda_mlir, "SIMULATOR", False)
    monkeypatch.setattr(mlir_parameters, "reported_layout", lambda f: f == 0x99 and [(0, 4)])
    target = NUMBA_CUDA_MLIR.launch_target(kernel, (2.5, 3))
    assert target.argtypes == ((f8, f4, f4), (i8, i4, i4))
    assert (target.layout, target.handle, target.cooperative) == ([(0, 4)], 0x99, True)
    assert target.parameters is mlir_parameters.parameters
