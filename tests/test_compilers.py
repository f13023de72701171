"""The compiler seam: the kernel object chooses its compiler, whose name and version are part
of the tuned kernel's identity. A fake compiler stands for a second one (numba-cuda-mlir, say)."""

from types import SimpleNamespace

import pytest
from numba import cuda

import numbatune as nt
from numbatune import compilers
from numbatune.compilers import NUMBA_CUDA, KernelCompiler, Unwrapped
from tests import kernels


class FakeKernel:
    """A kernel object of the fake compiler: it only wraps the Python function."""

    def __init__(self, function):
        self.function = function


class FakeBuilds:
    """The fake compiler's builds: it builds nothing; its environment is its identity."""

    def __init__(self, compiler):
        self._compiler = compiler

    def environment(self):
        return [self._compiler.identity()]

    def toolchain(self):
        return (self._compiler.identity(),)


class FakeCompiler(KernelCompiler):
    """What a second compiler implements; compiling and launching need a GPU here."""

    name = "fake-compiler"

    def __init__(self, version):
        self._version = version
        self.builds = FakeBuilds(self)

    @property
    def version(self):
        return self._version

    def claims(self, kernel):
        return isinstance(kernel, FakeKernel)

    def unwrap(self, kernel):
        return Unwrapped(kernel.function, {}, ())

    def specialise(self, function, original, options):
        return FakeKernel(function)

    def argument_types(self, kernel, args):
        return tuple(type(a) for a in args)

    def compiled(self, kernel, argtypes):
        raise NotImplementedError

    def add(self, kernel, argtypes, compiled, declared):
        raise NotImplementedError

    def launch_target(self, kernel, args):
        return "a fake compiler"

    def launch(self, kernel, args, config, stream):
        raise NotImplementedError

    def serialise(self, compiled):
        raise NotImplementedError

    def load(self, payload, cc):
        raise NotImplementedError

    def trial_payload(self, kernel, argtypes):
        raise NotImplementedError

    def run_trial(self, payload, args, config, cc):
        raise NotImplementedError


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(compilers, "COMPILERS", list(compilers.COMPILERS))
    compiler = FakeCompiler("1.0")
    compilers.register(compiler)
    return compiler


def _tuned(kernel):
    return nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=kernels.accumulate_launch)(kernel)


def test_the_kernel_object_chooses_its_compiler(fake):
    function = kernels.accumulate.py_func
    assert compilers.compiler_for(FakeKernel(function)) is fake
    assert compilers.compiler_for(function) is NUMBA_CUDA
    assert compilers.compiler_for(cuda.jit(function)) is NUMBA_CUDA
    with pytest.raises(TypeError, match=r"expected a numba.cuda.jit kernel .* got int"):
        compilers.compiler_for(3, "three")


def test_the_compilers_name_and_version_are_part_of_the_checksum(fake, monkeypatch):
    function = kernels.accumulate.py_func
    by_numba, by_fake = _tuned(function), _tuned(FakeKernel(function))
    assert by_fake.checksum() != by_numba.checksum()
    assert _tuned(FakeKernel(function)).checksum() == by_fake.checksum()
    monkeypatch.setattr(fake, "_version", "2.0")
    assert _tuned(FakeKernel(function)).checksum() != by_fake.checksum()


def _reports(error_at, error):
    """A stand-in for the driver's ``cuFuncGetParamInfo``: 8-byte parameters up to index
    ``error_at``, which it answers with ``error``."""

    def info(function, index):
        return (error, 0, 0) if index == error_at else (0, 8 * index, 8)

    return info


def test_numba_cuda_mlirs_parameter_layout_ends_where_the_driver_says_past_the_last(monkeypatch):
    driver = pytest.importorskip("cuda.bindings.driver")
    from numbatune.compilers import mlir_parameters

    invalid = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(driver, "cuFuncGetParamInfo", _reports(2, invalid))
    assert mlir_parameters.parameter_layout(0x1001) == [(0, 8), (8, 8)]


def test_a_driver_that_cannot_report_parameter_layouts_is_named_not_read_as_no_parameters(
    monkeypatch,
):
    """An older driver lacks cuFuncGetParamInfo: launching through numbatune says so, and the
    fast path leaves the kernel alone. Before, any error read as the end of the parameters, and
    a launch failed on a layout of none."""
    driver = pytest.importorskip("cuda.bindings.driver")
    from numba.cuda.cudadrv.driver import CudaAPIError

    from numbatune.compilers import mlir_parameters

    unsupported = driver.CUresult.CUDA_ERROR_NOT_SUPPORTED
    monkeypatch.setattr(driver, "cuFuncGetParamInfo", _reports(1, unsupported))
    with pytest.raises(CudaAPIError, match=r"cannot report .* parameter layout"):
        mlir_parameters.parameter_layout(0x1002)
    assert mlir_parameters.reported_layout(0x1003) is None


def test_a_device_function_is_refused_naming_it():
    device_function = cuda.jit(device=True)(kernels.accumulate.py_func)
    with pytest.raises(TypeError, match=r"autotune\(accumulate\): accumulate is a device function"):
        nt.autotune(variants=[{}], launch=kernels.accumulate_launch, name="accumulate")(
            device_function
        )


def test_numba_cudas_launch_target_gives_the_overloads_types_layout_and_handle(monkeypatch):
    """(The driver's parts faked: the simulator has no compiled overloads. Where the fast
    launch is unsupported, as under the simulator, it says why and reads nothing of the kernel:
    the reason is faked too, so that a GPU checks the same.)"""
    from numba.core import types as nb

    from numbatune.compilers import numba_cuda, numba_kernels, numba_parameters

    array = nb.Array(nb.float32, 1, "C")
    overload = SimpleNamespace(
        argument_types=(array, nb.float32), debug=False, extensions=[], cooperative=True
    )
    kernel = SimpleNamespace(overloads={(array, nb.float64): overload}, typeof_pyval=lambda a: a)
    function = object()
    monkeypatch.setattr(numba_parameters, "unsupported", lambda: "no fast launch here")
    assert NUMBA_CUDA.launch_target(kernel, ()) == "no fast launch here"
    monkeypatch.setattr(numba_parameters, "unsupported", lambda: None)
    monkeypatch.setattr(numba_kernels, "code_library", lambda compiled: SimpleNamespace(
        get_cufunc=lambda: function if compiled is overload else None))  # fmt: skip
    monkeypatch.setattr(numba_parameters, "parameter_layout", lambda f: f is function and [(0, 8)])
    monkeypatch.setattr(numba_parameters, "function_handle", lambda f: 0x1234 * (f is function))
    target = numba_cuda.NumbaCuda().launch_target(kernel, (array, nb.float64))
    assert target.argtypes == (
        (array, array, array),
        (nb.float64, nb.float32, nb.float32),  # a float64 passed as the float32 declared
    )
    assert (target.layout, target.handle, target.cooperative) == ([(0, 8)], 0x1234, True)
    assert target.parameters is numba_parameters.parameters
