"""A space's variants as points of a grid, for searches that step from a variant to its
neighbours (:mod:`numbatune.tuning.search`) or model the times over its positions
(:mod:`numbatune.tuning.surrogate`)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from numbatune.variants import Variant


class Grid:
    """A space's variants as points of a grid: one axis per parameter and jit option, its
    values in order (numbers ascending, others as first met). A parameter that the others
    determine (``THREADS = (BM // TM) * (BN // TN)``, say) is not an axis: stepping along it
    alone would never meet a variant. Such parameters are found from the last one back."""

    def __init__(self, space: Sequence[Variant]) -> None:
        axes: dict[tuple[str, str], dict[Any, Any]] = {}
        for variant in space:
            for kind, values in (("param", variant.params), ("jit", variant.jit)):
                for name, value in values.items():
                    axes.setdefault((kind, name), {}).setdefault(_value_key(value), value)
        positions = {
            axis: {key: index for index, key in enumerate(_ordered(values))}
            for axis, values in axes.items()
        }
        points = [
            tuple(positions[axis].get(_value_key(_value(v, axis)), -1) for axis in axes)
            for v in space
        ]
        free = _free_axes(points, len(axes))
        self._positions = [list(positions.values())[axis] for axis in free]
        self.longest_axis = max((len(p) for p in self._positions), default=0)
        self._point: dict[Variant, tuple[int, ...]] = {}
        self._at: dict[tuple[int, ...], Variant] = {}
        for variant, point in zip(space, points, strict=True):
            kept = tuple(point[axis] for axis in free)
            self._point[variant] = kept
            self._at.setdefault(kept, variant)

    def position(self, variant: Variant) -> tuple[int, ...]:
        """Where ``variant`` lies: its index along each axis."""
        return self._point[variant]

    def spread(
        self,
        variants: Sequence[Variant],
        count: int,
        randomness: random.Random,
        chosen: Sequence[Variant] = (),
    ) -> list[Variant]:
        """Up to ``count`` of ``variants`` spread over the grid, away from ``chosen`` too: each
        the one farthest from those picked before (greedy maximin over the positions, each axis
        scaled to one), the first at random when nothing is chosen. A search's first batch so
        sees every region of the space, which a random one leaves to chance."""
        count = min(count, len(variants))
        if count <= 0:
            return []
        scale = np.array([max(1, len(p) - 1) for p in self._positions], dtype=np.float64)
        points = np.array([self._point[v] for v in variants], dtype=np.float64) / scale
        distance = np.full(len(variants), np.inf)
        for variant in chosen:
            distance = np.minimum(distance, _distances(points, self._point[variant] / scale))
        picked: list[int] = []
        while len(picked) < count:
            first = not chosen and not picked
            index = randomness.randrange(len(variants)) if first else int(np.argmax(distance))
            picked.append(index)
            distance = np.minimum(distance, _distances(points, points[index]))
        return [variants[i] for i in picked]

    def neighbours(self, variant: Variant, step: int = 1) -> list[Variant]:
        """The variants that differ from ``variant`` along one axis, ``step`` positions away in
        either direction (or, where the space lacks that point, the nearest point beyond it)."""
        point = self._point[variant]
        found: list[Variant] = []
        for axis, length in enumerate(len(p) for p in self._positions):
            for direction in (-1, 1):
                position = point[axis] + direction * step
                while 0 <= position < length:
                    near = self._at.get((*point[:axis], position, *point[axis + 1 :]))
                    if near is not None:
                        found.append(near)
                        break
                    position += direction
        return found


_MISSING = object()


def _distances(points: np.ndarray, point: np.ndarray) -> np.ndarray:
    return np.linalg.norm(points - point, axis=1)


def _free_axes(points: Sequence[tuple[int, ...]], count: int) -> list[int]:
    """The axes left when each axis, from the last back, that the axes still kept determine
    (one value for each combination of theirs) is dropped."""
    kept = list(range(count))
    for axis in reversed(range(count)):
        others = [a for a in kept if a != axis]
        seen: dict[tuple[int, ...], int] = {}
        if all(seen.setdefault(tuple(p[a] for a in others), p[axis]) == p[axis] for p in points):
            kept = others
    return kept


def _value(variant: Variant, axis: tuple[str, str]) -> Any:
    kind, name = axis
    return (variant.params if kind == "param" else variant.jit).get(name, _MISSING)


def _value_key(value: Any) -> Any:
    """What tells a value apart from others on its axis (a hashable stand-in)."""
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


def _ordered(values: Mapping[Any, Any]) -> list[Any]:
    """The keys of an axis's values, numbers ascending when all are numbers."""
    keys = list(values)
    numbers = [values[k] for k in keys]
    if all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        return [k for _, k in sorted(zip(numbers, keys, strict=True), key=lambda pair: pair[0])]
    return keys
