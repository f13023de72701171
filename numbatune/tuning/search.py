"""Search strategies: which variants of a space a tuning measures, within a budget.

docs/concepts/search.md describes each strategy, the grid and the starting points. A strategy
proposes the next variants to compile and time, given the times measured so far, until the space
or the budget is spent; the tuner (:mod:`numbatune.tuning.tuner`) measures each proposal
together with the best variant so far, and the best of each becomes the new best. An exhaustive
search of more than :data:`WHOLE_UP_TO` variants measures chunks of :data:`CHUNK`: one
measurement of thousands of long kernels would fill CUDA's launch queue for minutes, and a
tuning cut short would keep nothing of it (:mod:`numbatune.cache.journal` keeps each chunk's).
Random choices come from a generator seeded with the ``search_seed`` setting and the key's text
(:func:`randomness_for`), so every process draws the same variants for a key.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Protocol

from numbatune.strategies import Strategy
from numbatune.tuning.grid import Grid
from numbatune.variants import Variant, grouped

#: An exhaustive search measures spaces of up to this many variants in one measurement.
WHOLE_UP_TO = 256
#: How many variants each measurement of a larger exhaustive search takes.
CHUNK = 64


class Proposer(Protocol):
    """A strategy at work: ``propose(times, best, count)`` returns the next variants to
    measure, at most ``count`` and at most ``batch`` (none it proposed before, none in
    ``times``), or an empty list when it has nothing more to try. ``times`` holds each
    measured variant's median (None: it failed), ``best`` the best so far."""

    #: The most variants it proposes at a time.
    batch: int

    def propose(
        self, times: Mapping[Variant, float | None], best: Variant | None, count: int
    ) -> list[Variant]: ...


def proposer(
    strategy: Strategy,
    space: Sequence[Variant],
    starts: Sequence[Variant],
    randomness: random.Random,
    batch: int,
) -> Proposer:
    """The proposer of ``strategy`` (not ``auto``) over ``space``, starting from ``starts`` (those
    in the space), at most ``batch`` variants at a time (``exhaustive``: as the module says)."""
    inside = set(space)
    firsts = list(dict.fromkeys(v for v in starts if v in inside))
    chosen = set(firsts)
    rest = [v for v in space if v not in chosen]
    if strategy is Strategy.EXHAUSTIVE:
        whole = len(space) <= WHOLE_UP_TO
        return _InOrder(list(space), len(space)) if whole else _InOrder(firsts + rest, CHUNK)
    if strategy is Strategy.RANDOM:
        randomness.shuffle(rest)
        return _InOrder(firsts + rest, batch)
    if strategy is Strategy.PATTERN:
        return _Pattern(space, firsts, randomness, batch)
    if strategy is Strategy.MODEL:
        from numbatune.tuning.surrogate import ModelSearch  # scikit-learn: only when asked for

        return ModelSearch(space, firsts, randomness, batch)
    raise ValueError(f"no proposer for {strategy}")


def siblings(
    space: Sequence[Variant], build_key: Callable[[Variant], Hashable]
) -> dict[Variant, tuple[Variant, ...]]:
    """Each variant of ``space`` with those built with it (the same ``build_key``: they differ
    only in a register cap, say), itself among them, in the space's order."""
    builds = grouped(space, build_key).values()
    return {variant: tuple(members) for members in builds for variant in members}


def with_siblings(
    proposal: Sequence[Variant],
    siblings: Mapping[Variant, Sequence[Variant]],
    measured: Mapping[Variant, object],
) -> list[Variant]:
    """``proposal`` with each variant's ``siblings`` beside it (those not ``measured``): a
    batch's compiles cost about as much with them as without, and a search learns more."""
    together = (sibling for v in proposal for sibling in siblings.get(v, (v,)))
    return [v for v in dict.fromkeys(together) if v not in measured]


def next_batch(
    proposer: Proposer,
    times: Mapping[Variant, float | None],
    best: Variant | None,
    count: int,
    siblings: Mapping[Variant, Sequence[Variant]],
    build_key: Callable[[Variant], Hashable],
) -> tuple[list[Variant], int]:
    """The next variants to measure, each with its ``siblings`` (:func:`with_siblings`), and
    how many builds they take: the proposer is asked for ``count`` variants, and again for the
    builds missing while what it gives (all it was asked for) comes to fewer than ``count``
    builds: two of its variants may be built together."""
    batch: dict[Variant, None] = {}
    builds: set[Hashable] = set()
    asked = count
    while asked > 0:
        proposed = proposer.propose(times, best, asked)
        for variant in with_siblings(proposed, siblings, times):
            batch[variant] = None
            builds.add(build_key(variant))
        if len(proposed) < asked:
            break
        asked = count - len(builds)
    return list(batch), len(builds)


def randomness_for(seed: int, key_text: str) -> random.Random:
    """The random generator of one key's search: the same in every process for the same seed
    and key (``random.Random`` hashes text seeds with SHA-512, not Python's salted hash)."""
    return random.Random(f"{seed}:{key_text}")


class _InOrder:
    """The given variants in order, ``batch`` at a time, less those measured, whatever the times."""

    def __init__(self, order: list[Variant], batch: int) -> None:
        self._left = deque(order)
        self.batch = batch

    def propose(
        self, times: Mapping[Variant, float | None], best: Variant | None, count: int
    ) -> list[Variant]:
        size = min(self.batch, count)
        proposal: list[Variant] = []
        while self._left and len(proposal) < size:
            variant = self._left.popleft()
            if variant not in times:
                proposal.append(variant)
        return proposal


class _Pattern:
    def __init__(
        self, space: Sequence[Variant], starts: list[Variant], randomness: random.Random, batch: int
    ) -> None:
        self._grid = Grid(space)
        self._space = space
        self._randomness = randomness
        self.batch = batch
        self._proposed: set[Variant] = set()
        self._starts = starts
        self._centre: Variant | None = None
        self._step = 1

    def propose(
        self, times: Mapping[Variant, float | None], best: Variant | None, count: int
    ) -> list[Variant]:
        size = min(self.batch, count)
        starting = not self._proposed
        self._proposed.update(times)  # measured: proposed here, beside another, or before
        if starting:  # the starting points, filled up at random
            first = self._taken(self._starts[:size])
            return first + self._taken(self._random(size - len(first)))
        near: list[Variant] = []
        if best is not None:
            if best != self._centre:
                self._centre, self._step = best, 1
            while self._step <= self._grid.longest_axis:
                near = self._untried_near(best, self._step)
                if near:
                    break
                self._step *= 2
        # A batch the best's neighbours leave room in takes the runners-up's neighbours, so
        # that every compile worker has a kernel to build.
        runners_up = sorted((v for v, t in times.items() if t is not None and v != best),
                            key=lambda v: times[v])  # fmt: skip
        for variant in runners_up:
            if len(near) >= size:
                break
            near = list(dict.fromkeys(near + self._untried_near(variant, 1)))
        proposal = self._taken(near[:size])
        return proposal + self._taken(self._random(size - len(proposal)))  # or a restart

    def _untried_near(self, variant: Variant, step: int) -> list[Variant]:
        return [v for v in self._grid.neighbours(variant, step) if v not in self._proposed]

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
