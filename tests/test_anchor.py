import struct

import numpy as np
import pytest

from numbatune import anchor
from numbatune.keys import KeyParts, default_key_part


@pytest.mark.parametrize(
    ("x", "expected"), [(0, 1), (1, 1), (2, 2), (3, 4), (1000, 1024), (1024, 1024), (1025, 2048)]
)
def test_anchor_rounds_up_to_a_power_of_two(x, expected):
    assert anchor(x) == expected


def test_anchor_other_base_and_clamps():
    assert anchor(10, base=3) == 27
    assert anchor(5000, max=4096) == 4096
    assert anchor(3, min=16) == 16


@pytest.mark.parametrize("bad", [-1, 1.5, "8", True])
def test_anchor_refuses_what_is_not_a_size(bad):
    with pytest.raises((TypeError, ValueError), match="anchor: x"):
        anchor(bad)


def test_anchor_refuses_a_base_below_two():
    with pytest.raises(ValueError, match="base"):
        anchor(8, base=1)


@pytest.mark.parametrize(
    ("bounds", "error", "message"),
    [
        ({"max": "a"}, TypeError, "anchor: max must be an integer or None, got 'a'"),
        ({"min": 2.5}, TypeError, "anchor: min must be an integer or None, got 2.5"),
        ({"max": 4, "min": 16}, ValueError, "anchor: min must not be larger than max"),
    ],
)
def test_anchor_refuses_bounds_that_are_not_integers_or_cross(bounds, error, message):
    with pytest.raises(error, match=f"^{message}"):
        anchor(8, **bounds)


def test_describe_reads_array_parts_of_keys_shortly():
    from numbatune.keys import describe

    key = (((1024,), "float32", "C"), ((16, 8), "float64", "F"))
    assert describe(key) == "(1024 float32 C, 16x8 float64 F)"
    assert describe(("user", 3)) == "('user', 3)"


def test_the_fast_paths_kept_key_parts_are_the_default_keys_parts_and_stay_bounded():
    known = KeyParts("float32", "C")
    part = known[1000, 3]
    assert part == default_key_part(((1000, 3), "float32", "C")) == ((1024, 4), "float32", "C")
    assert known.get((1000, 3)) is part
    for size in range(KeyParts.LIMIT + 10):
        known[(size,)]
    assert 0 < len(known) <= KeyParts.LIMIT


def test_the_c_default_key_is_the_python_oracles_with_equal_parts_one_object():
    """The C extension composes the default key (``_native.default_key``) as the oracle in
    tests/key_reference.py does: arrays' anchored parts and flags' values, in order, other
    arguments left out; equal parts are one object (a fast path compares them by identity)."""
    from numba import cuda

    from numbatune.keys import default_key
    from tests import key_reference

    a, b = cuda.device_array((1000, 3)), cuda.device_array(0, dtype=np.int8)
    cases = [
        (a, True, 2.5, b, np.bool_(False), 7, "text", (True, a)),
        (cuda.device_array(()), cuda.device_array((5, 1, 17), order="F")),
        (a[:, 1], None),
        (),
    ]
    for args in cases:
        key = default_key(args)
        assert key == key_reference.default_key(args)
        assert all(type(part) in (tuple, bool) for part in key)
    assert default_key((a,))[0] is default_key((cuda.device_array((1024, 4)),))[0]
    shape = (1000, 3)
    assert default_key_part((shape, "float32", "C"))[0] == (1024, 4) and shape == (1000, 3)
    for extents in [(0, 1, 2, 3), (2**62 + 1, 2**63 - 1)]:
        read = (extents, "int8", "A")
        assert default_key_part(read) == key_reference.key_part(read)


def test_a_reader_composes_the_whole_key_with_the_items_after_its_arrays():
    """Given ``key``, a C read's key holds its arrays' parts and the items after them (flags,
    other reads' parts) in the order ``key`` lists, as the default key holds them."""
    from numbatune import _native, native

    def make(array):
        fields = struct.pack("<QQqqQqq", 0, 0, array.n, 4, 64, array.n, 4)
        memo = array.__dict__["_memo"] = ("token", fields, 0)
        return memo

    class Array:
        def __init__(self, n):
            self.n = n

    expected = native.EXPECTED.pack(0, 0, 1, 0, 0, 0, 0, False)
    parts = KeyParts("float32", "C")
    reader = _native.Reader(
        ("_memo", make, ("token", "token")), expected * 2, (parts, parts), (2,), None, (1, 2, 0, 3)
    )
    x, y = Array(8), Array(3)
    _, key, _, _ = reader.read((x, y, True, "other"))
    assert key == (((4,), "float32", "C"), True, ((8,), "float32", "C"), "other")
    with pytest.raises(TypeError, match="2 arrays and 2 other items"):
        reader.read((x, y))
    with pytest.raises(ValueError, match="a key's element"):
        _native.Reader(("_memo", make, ("token",)), expected, (None,), (1,), None, (0,))
