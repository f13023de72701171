"""numba code as people write it: factories, device functions reading tuned constants,
functools.partial launches, record-dtype RNG states, and clear errors where code cannot work."""

import functools
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

import numbatune as nt
from numbatune.arrays import SIMULATOR
from numbatune.demo import load_module
from numbatune.testing import assert_variants_agree
from tests import kernels

SCALE = 1


@cuda.jit(device=True)
def scaled(x):
    return x * SCALE


@cuda.jit(device=True)
def twice_scaled(x):
    return 2 * scaled(x)


@cuda.jit
def apply_scaled(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = twice_scaled(i)


def test_device_functions_at_any_depth_see_the_variants_constants():
    tuned = nt.autotune(variants=nt.product(SCALE=[2, 3]), launch=lambda out: (1, 8))(apply_scaled)
    for scale in (2, 3):
        out = cuda.to_device(np.zeros(8, np.int64))
        tuned.run_variant({"SCALE": scale}, out)
        assert out.copy_to_host().tolist() == [2 * scale * i for i in range(8)]
    out = cuda.to_device(np.zeros(8, np.int64))
    cuda.jit(apply_scaled.py_func)[1, 8](out)
    assert out.copy_to_host().tolist() == [2 * i for i in range(8)]


HELPERS = """
from numba import cuda

OFFSET = 0

@cuda.jit(device=True)
def shifted(x):
    return x + OFFSET
"""

KERNELS = """
import numbatune as nt
from numba import cuda
import shifting_helpers as helpers

OFFSET = 0

def make(extra):
    add = helpers.shifted

    @cuda.jit
    def by_closure(out):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = add(i) + extra

    return by_closure

@cuda.jit
def by_attribute(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = helpers.shifted(i)
"""


def test_device_functions_reached_through_a_module_or_a_closure_see_them_too(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "shifting_helpers.py").write_text(HELPERS)
    (tmp_path / "shifting_kernels.py").write_text(KERNELS)
    module = load_module(tmp_path / "shifting_kernels.py")
    for kernel in (module.by_attribute, module.make(0)):
        tuned = nt.autotune(variants=nt.product(OFFSET=[10, 20]), launch=lambda out: (1, 4))(kernel)
        out = cuda.to_device(np.zeros(4, np.int64))
        tuned.run_variant({"OFFSET": 20}, out)
        assert out.copy_to_host().tolist() == [20, 21, 22, 23]


def test_a_kernel_that_assigns_a_tuned_name_itself_is_refused_with_the_line():
    def fast_matmul(A, B, C):
        TPB = 16  # as two public copies of numba's fast_matmul do
        x = cuda.grid(1)
        C[x] = A[x] * TPB

    with pytest.raises(ValueError, match=r"fast_matmul assigns TPB at line \d+, a variant"):
        nt.autotune(variants=nt.product(TPB=[8, 16]), launch=kernels.matmul_launch)(fast_matmul)


def factory(scale):
    """A kernel made inside a function, as numba-cuda's transpose example does."""

    @cuda.jit
    def scaled_copy(a, out):
        i = cuda.grid(1)
        if i < a.shape[0]:
            out[i] = a[i] * scale

    return nt.autotune(
        variants=nt.product(BLOCK=[2, 4]),
        launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
    )(scaled_copy)


def test_a_kernel_made_again_on_every_call_is_tuned_once(monkeypatch):
    monkeypatch.setattr(nt.settings, "cache_dir", None)  # memory only: no disk to fall back on
    a, out = cuda.to_device(np.ones(8, np.float32)), cuda.to_device(np.zeros(8, np.float32))
    made = [factory(2.0) for _ in range(3)]
    for tuned in made:
        tuned(a, out)
    assert [tuned.stats["benchmarks"] for tuned in made] == [1, 0, 0]
    assert out.copy_to_host().tolist() == [2.0] * 8


def test_kernels_of_one_factory_with_other_values_are_other_kernels(numbatune_cache):
    a, out = cuda.to_device(np.ones(8, np.float32)), cuda.to_device(np.zeros(8, np.float32))
    double, triple = factory(2.0), factory(3.0)
    assert double.function_id != triple.function_id
    double(a, out)
    triple(a, out)
    assert out.copy_to_host().tolist() == [3.0] * 8
    assert double.stats["benchmarks"] == triple.stats["benchmarks"] == 1
    folders = {p.name for p in numbatune_cache.rglob("*") if (p / "cache.db").exists()}
    assert len(folders) == 2


def test_names_a_folder_cannot_hold_and_scripts_main_kernels_are_told_apart(tmp_path):
    from numbatune.identity import folder_name

    assert folder_name("m.ядро") != folder_name("m.核")
    script = "import numbatune, numba.cuda as c\n@c.jit\ndef kernel(x):\n    pass\n"
    script += "print(numbatune.identity.function_id(kernel.py_func))\n"
    ids = []
    for name in ("one.py", "two.py"):
        (tmp_path / name).write_text(script)
        done = subprocess.run(
            [sys.executable, str(tmp_path / name)], capture_output=True, text=True, check=True
        )
        ids.append(done.stdout.strip())
    assert ids[0].startswith("__main__.kernel") and ids[0] != ids[1]
    assert folder_name(ids[0]) != folder_name(ids[1])


class Grid:
    """A launch function as a callable object."""

    def __call__(self, a, out, *, BLOCK):
        return nt.cdiv(a.shape[0], BLOCK), BLOCK


def grid_of(a, out, *, BLOCK, spare):
    return nt.cdiv(a.shape[0], BLOCK * spare), BLOCK


@pytest.mark.parametrize("launch", [Grid(), functools.partial(grid_of, spare=1)])
def test_launch_functions_may_be_partials_or_callable_objects(launch):
    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=launch)(kernels.accumulate)
    a, out = cuda.to_device(np.ones(8, np.float32)), cuda.to_device(np.zeros(8, np.float32))
    tuned(a, out)
    assert out.copy_to_host().tolist() == [1.0] * 8


def test_a_launch_function_naming_a_parameter_no_variant_has_is_refused_when_defined():
    message = (
        r"^autotune\(apply_scaled\): the launch function's parameter SCALEE has no default, and "
        r"neither the kernel's arguments \(its first 1 positional parameters\) nor any variant "
        r"give it a value; the launch function takes \(out, \*, SCALEE\), the variants set "
        r"\['SCALE'\]$"
    )
    with pytest.raises(ValueError, match=message):
        nt.autotune(variants=nt.product(SCALE=[2, 3]), launch=lambda out, *, SCALEE: (1, 8))(
            apply_scaled
        )


@pytest.mark.parametrize(
    "launch",
    [
        lambda out, *, SCALE, spare=1: (1, 8 * spare),  # a default no variant sets: fine
        lambda out, SCALE: (1, 8),  # the variant's value by keyword
        lambda *args, **params: (1, 8),
    ],
    ids=["default", "positional", "varargs"],
)
def test_launch_functions_whose_parameters_all_get_values_are_accepted(launch):
    tuned = nt.autotune(variants=nt.product(SCALE=[2, 3]), launch=launch)(apply_scaled)
    out = cuda.to_device(np.zeros(8, np.float32))
    tuned(out)
    assert out.copy_to_host().tolist() in ([4.0 * i for i in range(8)], [6.0 * i for i in range(8)])


def test_a_variant_parameter_named_like_an_argument_is_refused():
    with pytest.raises(ValueError, match=r"variant parameters \['out'\] have the names of "):
        nt.autotune(variants=[{"BLOCK": 2, "out": 1}], launch=kernels.accumulate_launch)(
            kernels.accumulate
        )


def _accumulate():
    return nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )


def test_numbas_launch_forms_say_what_to_write_instead():
    tuned = _accumulate()
    with pytest.raises(TypeError, match=r"call it as accumulate\(\*args\).*launch=lambda a, out"):
        tuned[4, 32]
    with pytest.raises(TypeError, match=r"instead of accumulate\.forall\(n\)"):
        tuned.forall(8)


@pytest.mark.parametrize(("value", "kind"), [(None, "NoneType"), ("text", "str"), (1.5, "float")])
def test_what_is_not_an_array_is_refused_by_name(value, kind):
    out = cuda.to_device(np.zeros(4, np.float32))
    message = r"argument 'a' is read as a\.shape in the kernel, so it must be a device array "
    with pytest.raises(TypeError, match=message + rf".*got {kind}"):
        _accumulate()(value, out)


def test_tune_with_too_few_arguments_names_them():
    with pytest.raises(TypeError, match=r"accumulate\(\) takes 2 arguments \(a, out\), got 1"):
        _accumulate().tune(cuda.to_device(np.ones(4, np.float32)))


def test_a_string_of_variants_is_refused_by_name():
    with pytest.raises(TypeError, match="variants must be a list of dicts or Variants"):
        nt.autotune(variants="BLOCK", launch=kernels.accumulate_launch)(kernels.accumulate)


def test_an_exception_in_the_launch_function_is_attributed_to_it():
    def launch(a, out, *, BLOCK):
        return a.shape[0] // (BLOCK - BLOCK), BLOCK  # ZeroDivisionError

    tuned = nt.autotune(variants=[{"BLOCK": 2}], launch=launch)(kernels.accumulate)
    a, out = cuda.to_device(np.ones(4, np.float32)), cuda.to_device(np.zeros(4, np.float32))
    with pytest.raises(nt.LaunchFunctionError, match="launch function raised ZeroDivisionError"):
        tuned(a, out)


@cuda.jit(device=True)
def plus_one(x):
    return x + 1


@cuda.jit(device=True)
def plus_two(x):
    return x + 2


OPERATION = plus_one


@cuda.jit
def apply(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = OPERATION(i)


def test_device_functions_as_variant_values_have_labels_stable_across_processes():
    tuned = nt.autotune(
        variants=nt.product(OPERATION=[plus_one, plus_two]), launch=lambda out: (1, 4)
    )(apply)
    labels = [v.label for v in tuned.variants]
    assert labels == [
        "OPERATION=<device function tests.test_real_code.plus_one>",
        "OPERATION=<device function tests.test_real_code.plus_two>",
    ]
    out = cuda.to_device(np.zeros(4, np.int64))
    tuned.run_variant({"OPERATION": plus_two}, out)
    assert out.copy_to_host().tolist() == [2, 3, 4, 5]


def test_frozenset_keys_are_stored_under_the_same_text_whatever_the_hash_seed():
    script = "from numbatune.values import key_text; print(key_text(frozenset({'a','bb','c'})))"
    texts = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert texts == {"frozenset({'a', 'bb', 'c'})\n"}


@cuda.jit
def monte_carlo(states, out):
    """numba-cuda's Monte Carlo example: one RNG state (a record) per thread."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = xoroshiro128p_uniform_float32(states, i)


def test_record_dtype_rng_states_are_tuned_checked_and_compared():
    n = 16
    states = create_xoroshiro128p_states(n, seed=1)
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[4, 8]),
        # BLOCK=8: the kernel as written, check mode's reference, launches blocks of 8
        launch=lambda states, out, *, BLOCK=8: (nt.cdiv(out.shape[0], BLOCK), BLOCK),
        check=True,
    )(monte_carlo)
    out = cuda.to_device(np.zeros(n, np.float32))
    report = tuned.tune(states, out)
    assert all(r.median_s is not None for r in report.results)
    assert_variants_agree(tuned, states, out)
    tuned(states, out)
    values = out.copy_to_host()
    assert values.min() > 0 and values.max() < 1


PYTEST_FILE = """
import numpy as np
from numba import cuda
import numbatune as nt

BLOCK = 2


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4]),
    launch=lambda a, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def fill(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = 1


def test_first(numbatune_cache):
    assert fill.tune(cuda.to_device(np.zeros(8))).source == "benchmark"


def test_second(numbatune_cache):
    assert fill.tune(cuda.to_device(np.zeros(8))).source == "benchmark"
"""


def test_the_cache_fixture_isolates_module_level_kernels_between_tests(pytester):
    pytester.makepyfile(test_isolated=PYTEST_FILE)
    result = pytester.runpytest_subprocess("-p", "numbatune.pytest_plugin", "-q")
    result.assert_outcomes(passed=2)


@pytest.mark.gpu
def test_a_cooperative_kernel_is_tuned_called_and_tuned_again():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[64, 128]),
        launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
    )(kernels.grid_total)
    a = cuda.to_device(np.ones(1000, np.float32))
    out = cuda.to_device(np.zeros(1001, np.float32))
    tuned(a, out)
    assert tuned.tune(a, out).source == "memory"
    tuned(a, out)
    assert out.copy_to_host()[0] == 1000


@cuda.jit("void(float32[::1], float32[::1], float32)")
def declared_scale(a, out, factor):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] * factor


@pytest.mark.gpu
def test_an_explicit_signature_is_the_one_compiled():
    from numba.core import types

    tuned = nt.autotune(
        variants=nt.product(BLOCK=[64, 128]),
        launch=lambda a, out, factor, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
    )(declared_scale)
    a = cuda.to_device(np.ones(300, np.float32))
    out = cuda.to_device(np.zeros(300, np.float32))
    tuned(a, out, 2.5)  # a Python float, converted to float32 as numba's signature says
    assert out.copy_to_host().tolist() == [2.5] * 300
    declared = (types.float32[::1], types.float32[::1], types.float32)
    dispatcher = tuned._compiler.dispatcher(tuned.variants[0])
    assert list(dispatcher.overloads) == [declared]
    assert tuned.stats["compiles"] == 1


def stored_in_local_memory(value):
    """A plain Python helper (no cuda.jit) using cuda.*: it runs under the simulator only."""
    scratch = cuda.local.array(1, np.float32)
    scratch[0] = value
    return scratch[0]


@cuda.jit(device=True)
def scaled_through_a_helper(x):
    return stored_in_local_memory(x * SCALE)


@cuda.jit
def apply_helpers(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = stored_in_local_memory(i) + scaled_through_a_helper(i)


@pytest.mark.skipif(not SIMULATOR, reason="numba compiles no plain Python helper for a GPU")
def test_plain_helpers_see_the_simulators_cuda_in_every_variant_as_in_the_kernel():
    tuned = nt.autotune(variants=nt.product(SCALE=[2, 3]), launch=lambda out: (1, 8))(apply_helpers)
    for variant in tuned.variants:
        out = cuda.to_device(np.zeros(8, np.float32))
        tuned.run_variant(variant, out)
        expected = np.arange(8) * (1 + variant.params["SCALE"])
        np.testing.assert_array_equal(out.copy_to_host(), expected)
    apply_helpers[1, 8](out)  # the kernel as written, after its variants: unchanged
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(8) * (1 + SCALE))
