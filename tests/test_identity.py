"""What makes two variants the same, and what makes a stored result stale (the checksum)."""

import textwrap

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import identity
from numbatune.cache import files
from numbatune.demo import load_module
from tests import kernels
from tests.test_precompile import CLI_MODULE


def test_variants_that_numba_types_alike_are_equal_and_hash_alike():
    plain, numpy = nt.Variant({"TPB": 16}), nt.Variant({"TPB": np.int64(16)})
    assert plain == numpy and hash(plain) == hash(numpy) and plain.label == numpy.label
    assert len({plain, numpy}) == 1
    assert nt.Variant({"TPB": 16}) != nt.Variant({"TPB": 16.0})  # int64 and float64 kernels
    assert nt.Variant({"TPB": 16}) != nt.Variant({"TPB": np.int32(16)})  # int64 and int32


def test_product_makes_the_variants_the_constructor_makes():
    made = nt.product(B=[np.int64(2), 4.0], A=["x"], jit={"fastmath": [True], "opt": [False]})
    by_hand = [
        nt.Variant({"B": 2, "A": "x"}, fastmath=True, opt=False),
        nt.Variant({"B": 4.0, "A": "x"}, fastmath=True, opt=False),
    ]
    assert made == by_hand and [hash(v) for v in made] == [hash(v) for v in by_hand]
    assert [v.label for v in made] == [v.label for v in by_hand]
    assert made[0].params == {"B": 2, "A": "x"} and type(made[0].params["B"]) is int
    assert made[0] != nt.Variant({"B": 2, "A": "x"}, fastmath=True)  # options count


def test_a_variant_listed_twice_in_two_spellings_is_refused():
    with pytest.raises(ValueError, match="listed twice"):
        nt.autotune(
            variants=[{"BLOCK": 2}, {"BLOCK": np.int64(2)}], launch=kernels.accumulate_launch
        )(kernels.accumulate)


def test_run_variant_finds_a_variant_spelled_with_numpy_integers():
    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )
    a, out = cuda.to_device(np.ones(4, np.float32)), cuda.to_device(np.zeros(4, np.float32))
    tuned.run_variant({"BLOCK": np.int64(4)}, a, out)
    assert out.copy_to_host().tolist() == [1, 1, 1, 1]


HELPERS = """
from numba import cuda

@cuda.jit(device=True)
def inner(x):
    return x + {inner}

@cuda.jit(device=True)
def outer(x):
    return inner(x) * 2
"""

KERNELS = """
import numbatune as nt
from numba import cuda
import helpers_{tag} as helpers
from helpers_{tag} import outer

BLOCK = 2

def launch(a, *, BLOCK):
    return nt.cdiv(a.shape[0], BLOCK), BLOCK

@nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=launch)
@cuda.jit
def by_name(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = outer(a[i])

@nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=launch)
@cuda.jit
def by_attribute(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = helpers.outer(a[i])

def factory(scale):
    helper = helpers.outer

    @cuda.jit
    def kernel(a):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] = helper(a[i]) * scale

    return nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=launch)(kernel)

by_closure = factory(1.0)
"""


def _checksums(tmp_path, monkeypatch, tag, inner):
    """The checksums of the three kernels of KERNELS, whose helpers add ``inner``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"helpers_{tag}.py").write_text(textwrap.dedent(HELPERS.format(inner=inner)))
    path = tmp_path / f"kernels_{tag}.py"
    path.write_text(textwrap.dedent(KERNELS.format(tag=tag)))
    module = load_module(path)
    kernels = (module.by_name, module.by_attribute, module.by_closure)
    return [k.checksum() for k in kernels], module


def test_editing_a_device_function_two_calls_deep_changes_every_checksum(tmp_path, monkeypatch):
    before, _ = _checksums(tmp_path, monkeypatch, "a", inner=1)
    after, _ = _checksums(tmp_path, monkeypatch, "b", inner=2)
    for old, new in zip(before, after, strict=True):
        assert old != new


def test_the_checksum_covers_closure_values_the_kernel_reads(tmp_path, monkeypatch):
    _, module = _checksums(tmp_path, monkeypatch, "c", inner=1)
    assert module.factory(1.0).checksum() == module.factory(1.0).checksum()
    assert module.factory(1.0).checksum() != module.factory(2.0).checksum()


def test_the_checksum_covers_numba_code_generation_settings(monkeypatch):
    from numba.cuda.core import config

    tuned = nt.autotune(variants=nt.product(BLOCK=[2]), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )

    def checksum():
        return tuned._template.checksum(tuned.variants, kernels.accumulate_launch)

    default = checksum()
    monkeypatch.setattr(config, "OPT", 0)
    assert checksum() != default


def test_kernels_of_the_same_code_in_two_modules_keep_their_results_under_their_own_names(
    tmp_path, numbatune_cache
):
    tuned = []
    for name in ("first_module", "second_module"):
        (tmp_path / f"{name}.py").write_text(CLI_MODULE)
        tuned.append(load_module(tmp_path / f"{name}.py").doubled)
    for kernel in tuned:
        kernel.tune(cuda.to_device(np.zeros(8, np.float32)))
    stored = {entry.function for entry in files.stored_entries(numbatune_cache)}
    assert stored == {kernel.function_id for kernel in tuned}


VARIANT_FUNCTIONS = """
import numbatune as nt
from numba import cuda


@cuda.jit(device=True)
def scale(x):
    return x * {factor}


@cuda.jit(device=True)
def scaled(x):
    return scale(x)


@cuda.jit(device=True)
def plus_one(x):
    return x + 1


OP = plus_one


@nt.autotune(variants=[{{"OP": plus_one}}, {{"OP": scaled}}], launch=lambda a, *, OP: (1, 8))
@cuda.jit
def apply(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = OP(a[i])
"""


def test_editing_a_device_function_only_a_variant_names_invalidates_the_stored_result(
    numbatune_cache, tmp_path, monkeypatch
):
    """The code of a device function a variant gives counts, at any depth (here: what it
    calls), for stored results and compiled kernels alike."""

    def tuned(factor):
        path, text = tmp_path / "variant_functions.py", VARIANT_FUNCTIONS.format(factor=factor)
        return kernels.load_written(path, text, monkeypatch).apply

    a = cuda.to_device(np.ones(8, np.float32))
    first = tuned(2)
    assert first.tune(a).source == "benchmark"
    assert tuned(2).tune(a).source == "disk"
    edited = tuned(10)
    assert edited.tune(a).source == "benchmark"
    plus_one, scaled = zip(kernels.store_keys(first), kernels.store_keys(edited), strict=True)
    assert plus_one[0] == plus_one[1] and scaled[0] != scaled[1]


DEEP_CONSTANT = """
import numbatune as nt
from numba import cuda
import {package}


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4]),
    launch=lambda a, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def shifted(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] += {package}.constants.N
"""

DEEP_FUNCTION = """
import numbatune as nt
from numba import cuda
import {package}

FACTOR = 1


@nt.autotune(variants=nt.product(FACTOR=[2, 3]), launch=lambda a: (1, 8))
@cuda.jit
def scaled(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = {package}.helpers.scaled(a[i])
"""


def _deep_kernels(tmp_path, monkeypatch, package, kernels_text):
    """``kernels_text``'s module, which reads attributes of ``package``'s modules
    (``package.constants.N``, ``package.helpers.scaled``)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / package).mkdir(exist_ok=True)
    (tmp_path / package / "__init__.py").write_text("from . import constants, helpers\n")
    (tmp_path / package / "constants.py").write_text("N = 10\n")
    (tmp_path / package / "helpers.py").write_text(
        "from numba import cuda\n\nFACTOR = 1\n\n\n@cuda.jit(device=True)\n"
        "def scaled(x):\n    return x * FACTOR\n"
    )
    path = tmp_path / f"kernels_{package}.py"
    return kernels.load_written(path, kernels_text.format(package=package), monkeypatch)


def test_a_module_attribute_read_two_modules_deep_is_in_the_checksum(
    numbatune_cache, tmp_path, monkeypatch
):
    def tune():
        module = _deep_kernels(tmp_path, monkeypatch, "deep_constant", DEEP_CONSTANT)
        return module, module.shifted.tune(cuda.to_device(np.ones(8, np.float32))).source

    module, source = tune()
    assert source == "benchmark"
    assert tune()[1] == "disk"
    monkeypatch.setattr(module.deep_constant.constants, "N", 99)
    assert tune()[1] == "benchmark"


def test_a_device_function_two_modules_deep_is_specialised_on_the_variant(tmp_path, monkeypatch):
    scaled = _deep_kernels(tmp_path, monkeypatch, "deep_function", DEEP_FUNCTION).scaled
    for factor in (2, 3):
        a = cuda.to_device(np.ones(8, np.float32))
        scaled.run_variant({"FACTOR": factor}, a)
        assert a.copy_to_host().tolist() == [factor] * 8


CONTAINED_FUNCTIONS = """
import numbatune as nt
from numba import cuda


@cuda.jit(device=True)
def add(x):
    return x + {step}


@cuda.jit(device=True)
def mul(x):
    return x * 2


OPS = None


@nt.autotune(variants=[{{"OPS": {value}}}], launch=lambda a: (1, 8))
@cuda.jit
def apply(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = OPS[0](a[i])
"""


@pytest.mark.parametrize("value", ["(add, mul)", "[mul, (add,)]", "{'first': [mul, add]}"])
def test_editing_a_device_function_inside_a_variant_container_changes_the_checksum(
    value, tmp_path, monkeypatch
):
    """A device function inside a tuple, list or dict a variant gives, at any depth, counts
    by its code, as one the variant gives itself does."""

    def checksum(step):
        text = CONTAINED_FUNCTIONS.format(step=step, value=value)
        path = tmp_path / "contained_functions.py"
        return kernels.load_written(path, text, monkeypatch).apply.checksum()

    assert checksum(1) == checksum(1)
    assert checksum(1) != checksum(2)


HELD_FUNCTIONS = """
import numbatune as nt
from numba import cuda


@cuda.jit(device=True)
def add(x):
    return x + {step}


OPS = (add,)


@nt.autotune(variants=nt.product(BLOCK=[8]), launch=lambda a, *, BLOCK: (1, BLOCK))
@cuda.jit
def apply(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = OPS[0](a[i])
"""


def test_editing_a_device_function_a_kernel_reads_from_a_global_tuple_changes_the_checksum(
    tmp_path, monkeypatch
):
    def checksum(step):
        text = HELD_FUNCTIONS.format(step=step)
        path = tmp_path / "held_functions.py"
        return kernels.load_written(path, text, monkeypatch).apply.checksum()

    assert checksum(1) == checksum(1)
    assert checksum(1) != checksum(2)


#: The device function a variant gives as OP (read by apply_op; None as written).
OP = None


@cuda.jit
def apply_op(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = OP(a[i])


def test_a_device_function_a_variant_gives_redefined_in_the_process_is_the_one_called():
    """A kernel tuned again with a device function of the same name but other code, given only
    by its variant, shares nothing in memory with the first: it calls the new code."""

    def tuned(op):
        return nt.autotune(variants=[{"OP": op}], launch=lambda a: (1, 8))(apply_op)

    @cuda.jit(device=True)
    def f1(x):
        return x + 1

    a = cuda.to_device(np.zeros(8, np.float32))
    tuned(f1)(a)
    assert a.copy_to_host().tolist() == [1] * 8

    @cuda.jit(device=True)
    def f1(x):
        return x + 2

    a = cuda.to_device(np.zeros(8, np.float32))
    tuned(f1)(a)
    assert a.copy_to_host().tolist() == [2] * 8


def test_launch_functions_wrapped_in_by_shape_are_told_apart_by_their_code():
    def key(launch):
        return identity.sharing_key("code", {}, (), [], launch, {})

    def one(x):
        return 1, 32

    def two(x):
        return 2, 32

    assert key(nt.by_shape(one)) == key(one)
    assert key(nt.by_shape(one)) != key(nt.by_shape(two))
