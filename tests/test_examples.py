"""Every variant of every example computes what the example's reference says, at small sizes.

Under numba's simulator, where every thread is a Python thread, the examples' variants are cut
to a few that take every value of every parameter (``covering_variants``); on a GPU all run.
"""

from pathlib import Path

import numpy as np
import pytest

import numbatune as nt
from numbatune.arrays import SIMULATOR
from numbatune.demo import examples_of
from numbatune.testing import assert_variants_agree, covering_variants
from tests.kernels import load_example

#: (module name, example function name) of every example of examples/.
EXAMPLES = [
    (path.stem, example.__name__)
    for path in sorted((Path(__file__).parents[1] / "examples").glob("*.py"))
    for example in examples_of(load_example(path.stem))
]
IDS = [f"{module}.{function}" for module, function in EXAMPLES]


def _example(module_name: str, function: str):
    """The example's module, loaded afresh, and its kernel and small arguments."""
    module = load_example(module_name)
    tuned, args = getattr(module, function)(small=True)
    if SIMULATOR:
        tuned = tuned.with_variants(covering_variants(tuned))
    return module, tuned, args


@pytest.mark.parametrize(("name", "function"), EXAMPLES, ids=IDS)
def test_every_variant_matches_the_reference_and_leaves_what_the_others_leave(name, function):
    """Each variant runs once (on copies of the arguments, by ``assert_variants_agree``): its
    output is the example's reference, and every array it leaves is the reference variant's."""
    module, tuned, args = _example(name, function)
    output = args[-1]
    output.copy_to_device(np.zeros(output.shape, output.dtype))
    expected = module.reference(*args)

    def every_array_after_checking_the_output(*host):
        np.testing.assert_allclose(host[-1], expected, rtol=1e-5)
        return tuple(value for value in host if isinstance(value, np.ndarray))

    assert_variants_agree(tuned, *args, outputs=every_array_after_checking_the_output)


@pytest.mark.parametrize(("name", "function"), EXAMPLES, ids=IDS)
def test_the_tuned_example_matches_its_reference(name, function, monkeypatch):
    module, tuned, args = _example(name, function)
    if SIMULATOR:  # the kernel as written, untuned: the tests beside it run the covering few
        monkeypatch.setattr(nt.settings, "on_miss", nt.OnMiss.NEAREST)
    tuned(*args)
    np.testing.assert_allclose(args[-1].copy_to_host(), module.reference(*args), rtol=1e-5)
