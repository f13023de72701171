"""The ``model`` search: a random forest fitted to the times chooses which variants to measure next.

docs/concepts/search.md describes it: a first batch of the starting points, half the rest spread
over the grid and half at random; then the best's untried neighbours, and the untried variants of
lowest optimistic prediction (the trees' mean less their spread) of a forest fitted to the
logarithm of the times over the grid's positions, one in :data:`EXPLORE_ONE_IN` at random.
scikit-learn is an optional dependency: ``pip install 'numbatune[model]'``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import numpy as np

from numbatune.strategies import MODEL_NEEDS_SKLEARN
from numbatune.tuning.grid import Grid
from numbatune.variants import Variant

#: Trees of each forest.
TREES = 48
#: The most untried variants a proposal scores (a random sample of them, in larger spaces).
SCORED = 20_000
#: One in this many variants of each proposal is drawn at random.
EXPLORE_ONE_IN = 8


class ModelSearch:
    """The ``model`` strategy at work (a :class:`~numbatune.tuning.search.Proposer`)."""

    def __init__(
        self, space: Sequence[Variant], starts: list[Variant], randomness: random.Random, batch: int
    ) -> None:
        try:
            from sklearn.ensemble import RandomForestRegressor
        except ImportError as error:
            raise ImportError(MODEL_NEEDS_SKLEARN) from error
        self._forest = RandomForestRegressor
        self._grid = Grid(space)
        self._space = list(space)
        self._where = {v: self._grid.position(v) for v in self._space}
        self._starts = starts
        self._randomness = randomness
        self.batch = batch
        self._left = set(self._space)

    def propose(
        self, times: Mapping[Variant, float | None], best: Variant | None, count: int
    ) -> list[Variant]:
        size = min(self.batch, count)
        starting = len(self._left) == len(self._space)
        self._left.difference_update(times)  # measured: proposed here, beside another, or before
        if starting:  # the starting points, then half the rest spread
            first = self._taken(self._starts[:size])
            spread = (size - len(first)) // 2
            first += self._taken(self._grid.spread(self._space, spread, self._randomness, first))
            return first + self._taken(self._random(size - len(first)))
        if not self._left:
            return []
        room = size - size // EXPLORE_ONE_IN
        near = [] if best is None else [v for v in self._grid.neighbours(best) if v in self._left]
        chosen = self._taken(near[:room])
        if len(chosen) < room:
            chosen += self._taken(self._predicted_best(times, room - len(chosen)))
        return chosen + self._taken(self._random(size - len(chosen)))

    def _predicted_best(self, times: Mapping[Variant, float | None], count: int) -> list[Variant]:
        measured = [v for v in times if v in self._where]
        timed = [math.log(t) for t in times.values() if t is not None]
        if not measured or not timed:
            return self._random(count)
        failed = max(timed) + math.log(3)
        features = np.array([self._where[v] for v in measured], dtype=np.float64)
        target = np.array([math.log(t) if (t := times[v]) is not None else failed
                           for v in measured])  # fmt: skip
        forest = self._forest(n_estimators=TREES, random_state=self._randomness.randrange(2**31))
        forest.fit(features, target)
        candidates = [v for v in self._space if v in self._left]
        if len(candidates) > SCORED:
            candidates = self._randomness.sample(candidates, SCORED)
        points = np.array([self._where[v] for v in candidates], dtype=np.float64)
        trees = np.stack([tree.predict(points) for tree in forest.estimators_])
        optimistic = trees.mean(axis=0) - trees.std(axis=0)
        return [candidates[i] for i in np.argsort(optimistic, kind="stable")[:count]]

    def _random(self, count: int) -> list[Variant]:
        pool = [v for v in self._space if v in self._left]
        return self._randomness.sample(pool, min(count, len(pool)))

    def _taken(self, proposal: list[Variant]) -> list[Variant]:
        proposal = [v for v in dict.fromkeys(proposal) if v in self._left]
        self._left.difference_update(proposal)
        return proposal
