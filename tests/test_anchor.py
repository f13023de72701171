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
