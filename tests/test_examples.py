"""Every variant of every example computes what the example's reference says, at small sizes."""

from pathlib import Path

import numpy as np
import pytest

from numbatune.testing import assert_variants_agree
from tests.kernels import load_example

EXAMPLES = sorted(
    path
    for path in (Path(__file__).parents[1] / "examples").glob("*.py")
    if "def example(" in path.read_text()
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_variant_of_the_example_matches_its_reference(path):
    module = load_example(path.stem)
    tuned, args = module.example(small=True)
    expected = module.reference(*args)
    output = args[-1]
    for variant in tuned.variants:
        output.copy_to_device(np.zeros(output.shape, output.dtype))
        tuned.run_variant(variant, *args)
        np.testing.assert_allclose(
            output.copy_to_host(), expected, rtol=1e-5, err_msg=variant.label
        )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_tuned_example_matches_its_reference(path):
    module = load_example(path.stem)
    tuned, args = module.example(small=True)
    tuned(*args)
    np.testing.assert_allclose(args[-1].copy_to_host(), module.reference(*args), rtol=1e-5)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_variants_of_every_example_agree(path):
    tuned, args = load_example(path.stem).example(small=True)
    assert_variants_agree(tuned, *args)
