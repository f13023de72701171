"""Search strategies: which variants of a space a tuning measures, within a budget.

A strategy proposes the next variants to compile and time, given the times measured so far,
until the space or the budget (variants tried, or seconds) is spent. The tuner
(:mod:`numbatune.tuning.tuner`) measures each proposal together with the best variant so far,
so every decision compares times taken in the same interleaved rounds; the best of each
proposal becomes the new best. Strategies:

- ``exhaustive``: every variant, in one measurement (the only strategy before searches).
- ``random``: the starting points (below), then variants drawn at random without repeats.
- ``pattern``: a local search over the parameter grid (Helion's and Kernel Tuner's pattern
  search). Variants are points of a grid whose axes are the parameters and jit options, each
  axis's values in order (numbers ascending). It starts from the starting points, filled up with
  random variants; then it measures the untried neighbours of the best variant: the variants
  that differ from it in one parameter, by one step along that axis (the nearest value that the
  space holds, where a ``where=`` filter removed the next). When the best has no untried
  neighbours, the step doubles; when no step is left, a random batch restarts the search.
- ``auto`` (the default): ``exhaustive`` for spaces of up to
  :data:`~numbatune.strategies.EXHAUSTIVE_UP_TO` variants, ``pattern`` above.

The starting points are, in order: the kernel as written (its module's values), the variants
of the highest priority (when priorities differ), and the winners of the kernel's other keys,
nearest key first. Random choices come from a generator seeded with the ``search_seed`` setting
and the key's text, so the same key with the same seed draws the same variants in every
process (a pattern search then follows what it measures).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from numbatune.strategies import Strategy
from numbatune.variants import Variant


class Proposer(Protocol):
    """A strategy at work: ``propose(times, best)`` returns the next variants to measure
    (none it proposed before), or an empty list when it has nothing more to try. ``times``
    holds each measured variant's median (None: it failed), ``best`` the best so far."""

    def propose(
        self, times: Mapping[Variant, float | None], best: Variant | None
    ) -> list[Variant]: ...


def proposer(
    strategy: Strategy,
    space: Sequence[Variant],
    starts: Sequence[Variant],
    randomness: random.Random,
    batch: int,
) -> Proposer:
    """The proposer of ``strategy`` (not ``auto``) over ``space``, starting from ``starts``
    (those in the space), proposing at most ``batch`` variants at a time (all at once for
    ``exhaustive``)."""
    if strategy is Strategy.EXHAUSTIVE:
        return _Exhaustive(space)
    inside = set(space)
    firsts = list(dict.fromkeys(v for v in starts if v in inside))
    if strategy is Strategy.RANDOM:
        return _Random(space, firsts, randomness, batch)
    if strategy is Strategy.PATTERN:
        return _Pattern(space, firsts, randomness, batch)
    raise ValueError(f"no proposer for {strategy}")


def randomness_for(seed: int, key_text: str) -> random.Random:
    """The random generator of one key's search: the same in every process for the same seed
    and key (``random.Random`` hashes text seeds with SHA-512, not Python's salted hash)."""
    return random.Random(f"{seed}:{key_text}")


class _Exhaustive:
    def __init__(self, space: Sequence[Variant]) -> None:
        self._left = list(space)

    def propose(self, times: Mapping[Variant, float | None], best: Variant | None) -> list[Variant]:
        proposal, self._left = self._left, []
        return proposal


class _Random:
    def __init__(
        self, space: Sequence[Variant], starts: list[Variant], randomness: random.Random, batch: int
    ) -> None:
        chosen = set(starts)
        order = [v for v in space if v not in chosen]
        randomness.shuffle(order)
        self._left = starts + order
        self._batch = batch

    def propose(self, times: Mapping[Variant, float | None], best: Variant | None) -> list[Variant]:
        proposal, self._left = self._left[: self._batch], self._left[self._batch :]
        return proposal


class _Pattern:
    def __init__(
        self, space: Sequence[Variant], starts: list[Variant], randomness: random.Random, batch: int
    ) -> None:
        self._grid = Grid(space)
        self._space = space
        self._randomness = randomness
        self._batch = batch
        self._proposed: set[Variant] = set()
        self._starts = starts
        self._centre: Variant | None = None
        self._step = 1

    def propose(self, times: Mapping[Variant, float | None], best: Variant | None) -> list[Variant]:
        if not self._proposed:  # the starting points, filled up at random
            first = self._taken(self._starts[: self._batch])
            return first + self._taken(self._random(self._batch - len(first)))
        if best is not None:
            if best != self._centre:
                self._centre, self._step = best, 1
            while self._step <= self._grid.longest_axis:
                near = [
                    v for v in self._grid.neighbours(best, self._step) if v not in self._proposed
                ]
                if near:
                    return self._taken(near[: self._batch])
                self._step *= 2
        return self._taken(self._random(self._batch))  # a restart

    def _random(self, count: int) -> list[Variant]:
        """Up to ``count`` variants not proposed yet, at random."""
        left = len(self._space) - len(self._proposed)
        chosen: list[Variant] = []
        if left <= 4 * count:  # few left: draw from them directly
            pool = [v for v in self._space if v not in self._proposed]
            return self._randomness.sample(pool, min(count, len(pool)))
        while len(chosen) < count:
            candidate = self._space[self._randomness.randrange(len(self._space))]
            if candidate not in self._proposed and candidate not in chosen:
                chosen.append(candidate)
        return chosen

    def _taken(self, proposal: list[Variant]) -> list[Variant]:
        proposal = [v for v in dict.fromkeys(proposal) if v not in self._proposed]
        self._proposed.update(proposal)
        return proposal


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
