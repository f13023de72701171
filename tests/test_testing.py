"""numbatune.testing: the strategies draw the edges, and a Hypothesis test of a tuned kernel
written with them runs as a user would write it."""

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from numba import cuda

import numbatune as nt
from numbatune import testing
from numbatune.arrays import SIMULATOR
from tests.kernels import load_example

saxpy = load_example("saxpy").saxpy
#: What the Hypothesis test calls: under the simulator, where every thread is a Python thread,
#: the few variants that take every parameter value (each new size tunes them all).
saxpy_under_test = saxpy.with_variants(testing.covering_variants(saxpy)) if SIMULATOR else saxpy


def test_edge_sizes_surround_every_block_and_tile_size_of_the_variants():
    sizes = testing.edge_sizes(saxpy)
    for value in (128, 256, 512, 1024, 2, 4, 8):
        assert {value - 1, value, value + 1, 2 * value + 1} <= set(sizes)
    assert {0, 1, 3, 5, 7, 127} <= set(sizes)


@given(data=st.data())
@settings(max_examples=20, deadline=None)
def test_arrays_with_special_values_hold_only_what_was_asked(data):
    plain = data.draw(testing.host_arrays(np.float32, (8,)))
    assert np.isfinite(plain).all()
    special = data.draw(testing.host_arrays(np.float64, (16,), special_values=True))
    assert special.dtype == np.float64 and special.shape == (16,)


@pytest.mark.parametrize(
    "wanted",
    [
        lambda a: np.isnan(a).any(),
        lambda a: np.isinf(a).any(),
        lambda a: (np.signbit(a) & (a == 0)).any(),
        lambda a: ((a != 0) & (np.abs(a) < np.finfo(np.float32).tiny)).any(),
    ],
    ids=["nan", "infinity", "negative zero", "subnormal"],
)
def test_special_values_include_negative_zero_subnormals_infinities_and_nan(wanted):
    special = testing.host_arrays(np.float32, (16,), special_values=True)
    find(special, wanted, settings=settings(database=None, max_examples=500))
    with pytest.raises(NoSuchExample):
        find(testing.host_arrays(np.float32, (16,)), wanted, settings=settings(database=None))


@given(dtype=testing.dtypes("c"), data=st.data())
@settings(max_examples=40, deadline=None, derandomize=True)
def test_complex_arrays_without_special_values_have_finite_normal_parts(dtype, data):
    array = data.draw(testing.host_arrays(dtype, (16,)))
    parts = np.concatenate([array.real, array.imag])
    assert np.isfinite(parts).all()
    assert ((parts == 0) | (np.abs(parts) >= np.finfo(parts.dtype).tiny)).all()
    assert not np.signbit(parts[parts == 0]).any()


def test_dtypes_refuse_unknown_kinds():
    with pytest.raises(ValueError, match="kinds must be letters of 'fiucb'"):
        testing.dtypes("fx")


@given(
    n=st.sampled_from([n for n in testing.edge_sizes(saxpy) if n <= 70]),
    strided=st.booleans(),
    data=st.data(),
)
@settings(max_examples=8, deadline=None)
def test_a_user_hypothesis_test_of_saxpy_at_the_edges(n, strided, data):
    x = data.draw(testing.device_arrays(np.float32, (n,), strided=strided))
    y = data.draw(testing.device_arrays(np.float32, (n,)))
    out = cuda.device_array(n, np.float32)
    saxpy_under_test(np.float32(2.0), x, y, out)
    expected = np.float32(2.0) * x.copy_to_host() + y.copy_to_host()
    np.testing.assert_allclose(out.copy_to_host(), expected, rtol=1e-6)
    assert x.is_c_contiguous() != strided or n <= 1


def test_shapes_draw_sides_from_the_edge_sizes():
    shape = testing.shapes(saxpy, ndim=2, max_side=40).example()
    assert len(shape) == 2 and all(side in testing.edge_sizes(saxpy) for side in shape)
    assert nt.Check  # the public name the testing page points to


def test_covering_variants_take_every_value_of_every_parameter_in_few_variants():
    chosen = testing.covering_variants(saxpy)
    assert len(chosen) == 4  # BLOCK has four values; ITEMS four and VEC three ride along
    for name in ("BLOCK", "ITEMS", "VEC"):
        every = {v.params[name] for v in saxpy.variants}
        assert {v.params[name] for v in chosen} == every
    order = [saxpy.variants.index(v) for v in chosen]
    assert order == sorted(order)


def test_covering_variants_count_jit_options_as_parameters():
    softmax = load_example("softmax").softmax
    chosen = testing.covering_variants(softmax)
    assert {v.jit["fastmath"] for v in chosen} == {False, True}


def test_with_variants_tunes_only_the_given_variants_and_leaves_the_original_alone():
    every = list(saxpy.variants)
    chosen = testing.covering_variants(saxpy)
    small = saxpy.with_variants(chosen)
    benchmarks_before = saxpy.stats["benchmarks"]
    assert small.variants == chosen and len(chosen) < len(every)
    x = cuda.to_device(np.arange(70, dtype=np.float32))
    y = cuda.to_device(np.ones(70, dtype=np.float32))
    out = cuda.device_array(70, np.float32)
    report = small.tune(np.float32(2.0), x, y, out)
    assert [r.variant for r in report.results] == chosen
    assert report.winner in chosen
    small(np.float32(2.0), x, y, out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(70) + 1)
    assert saxpy.stats["benchmarks"] == benchmarks_before and saxpy.variants == every
    assert small.stats["benchmarks"] == 1


GPU_WORDS = """
import pytest


@pytest.mark.gpu
def test_marked():
    pass


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_parametrized(device):
    pass
"""


def test_only_tests_marked_gpu_are_skipped_not_those_with_gpu_in_their_names(pytester):
    pytester.makepyfile(test_words=GPU_WORDS)
    pytester.mkpydir("gpu")
    pytester.makepyfile(**{"gpu/test_in_a_gpu_folder": "def test_plain():\n    pass\n"})
    result = pytester.runpytest_subprocess("-p", "numbatune.pytest_plugin", "-rs")
    result.assert_outcomes(passed=3 if SIMULATOR else 4, skipped=1 if SIMULATOR else 0)
    if SIMULATOR:
        result.stdout.re_match_lines([r"SKIPPED .*test_words.py:\d+: needs a real CUDA GPU.*"])
