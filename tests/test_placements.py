"""Copies of a tuning's arguments at several places in device memory, and the memory they may
take."""

import numpy as np
import pytest
from numba import cuda

from numbatune.arrays import Arguments, clone_value, restorer
from numbatune.tuning import placements

MB = 1 << 20


@pytest.mark.parametrize(
    ("size", "free", "expected"),
    [(0, 1 * MB, 1),  # no arrays: one copy
     (100 * MB, 64_000 * MB, placements.PLACEMENTS),
     (100 * MB, 1_200 * MB, 4),  # three more fit in a quarter of the free memory
     (100 * MB, 399 * MB, 1),  # none more does: the tuning's own copy only
     (1 * MB, float("inf"), placements.PLACEMENTS)],
)  # fmt: skip
def test_copies_beyond_the_first_take_at_most_a_quarter_of_the_free_memory(size, free, expected):
    assert placements.count(size, free) == expected


def test_the_copies_are_the_arguments_cloned_apart_and_put_back_as_the_caller_passed_them():
    a = cuda.to_device(np.arange(8, dtype=np.float32))
    pair = (cuda.to_device(np.ones(4, np.int32)), 3)
    arguments = Arguments.read((a, pair, 2.5))
    originals = tuple(clone_value(value) for value in arguments.values)
    clones = arguments.clone()
    first = placements.Copy(clones, restorer(clones, originals))
    made = placements.copies(arguments, first, originals)
    assert len(made) == placements.PLACEMENTS and made[0] is first
    buffers = {id(copy.args[0]) for copy in made} | {id(copy.args[1][0]) for copy in made}
    assert len(buffers) == 2 * placements.PLACEMENTS and id(a) not in buffers
    for copy in made:
        assert copy.args[2] == 2.5 and copy.args[1][1] == 3
        copy.args[0].copy_to_device(np.zeros(8, np.float32))  # (a run writes its copy)
        copy.restore()
        np.testing.assert_array_equal(copy.args[0].copy_to_host(), np.arange(8))
        np.testing.assert_array_equal(copy.args[1][0].copy_to_host(), np.ones(4))
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(8))
