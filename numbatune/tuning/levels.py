"""Tuning levels, priorities and pruning: which variants a key's tuning tries.

docs/howto/levels.md describes them. For each key the user's ``prune(key, variants)`` keeps
the variants worth trying; variants of equal ``Variant.priority`` (for the key) form groups,
highest first; the level (:data:`GROUPS_BY_LEVEL`) says how many are tuned together. Only where
every variant tried fails is the next group added and the set tuned again (cubecl's tune plans
go on likewise). A stored result is reused while it covers the variants the plan tries first
(:func:`reuse`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from numbatune.config import LEVELS
from numbatune.strategies import Strategy
from numbatune.tuning.results import TuneReport
from numbatune.variants import Variant, grouped

logger = logging.getLogger("numbatune")

#: How many priority groups each level benchmarks together; None: all of them.
GROUPS_BY_LEVEL: dict[str, int | None] = dict(zip(LEVELS, (1, 2, 3, None), strict=True))

#: ``prune(key, variants) -> variants``: the variants worth trying for a key.
Prune = Callable[[Hashable, list[Variant]], Sequence[Variant]]


def check_level(level: str | None, kernel_name: str) -> str | None:
    """Validate an ``autotune(level=...)`` argument: one of :data:`LEVELS`, or None."""
    if level is None or (isinstance(level, str) and level in GROUPS_BY_LEVEL):
        return level
    raise ValueError(
        f"autotune({kernel_name}): level must be one of {', '.join(LEVELS)} "
        f"(or None for the level setting, NUMBATUNE_LEVEL), got {level!r}"
    )


def check_prune(prune: Prune | None, kernel_name: str) -> Prune | None:
    """Validate an ``autotune(prune=...)`` argument: a function of (key, variants), or None."""
    if prune is None or callable(prune):
        return prune
    raise TypeError(
        f"autotune({kernel_name}): prune must be a function (key, variants) -> variants, "
        f"got {prune!r}"
    )


@dataclass(frozen=True)
class Plan:
    """The variants of one key's tuning: pruned, in priority groups, cut by the level."""

    level: str
    #: The variants left by the prune function, in groups of equal priority, highest first.
    groups: tuple[tuple[Variant, ...], ...]
    #: How many groups the level tunes together.
    count: int
    #: How many variants the prune function removed.
    pruned: int

    @property
    def first(self) -> list[Variant]:
        """The variants the level tries for certain."""
        return self.tries()[0]

    @property
    def allowed(self) -> list[Variant]:
        """Every variant the prune function kept."""
        return [variant for group in self.groups for variant in group]

    def keeping(self, keep: Callable[[Variant], bool], kernel_name: str) -> Plan:
        """This plan with only the variants ``keep`` accepts (those valid for a call's
        arguments); the groups left empty go, and at least one group is tuned."""
        groups = tuple(kept for group in self.groups if (kept := tuple(filter(keep, group))))
        if not groups:
            raise ValueError(
                f"{kernel_name}: no variant is valid for these arguments (the valid function "
                f"refused all {len(self.allowed)} that the plan tries)"
            )
        removed = len(self.allowed) - sum(map(len, groups))
        return Plan(self.level, groups, max(1, min(self.count, len(groups))), self.pruned + removed)

    def tries(self) -> list[list[Variant]]:
        """The variant sets to tune in turn (a later one only when every variant of the one before
        failed): the level's groups, then one more group each time."""
        return [
            [variant for group in self.groups[:end] for variant in group]
            for end in range(self.count, len(self.groups) + 1)
        ]


def plan(
    kernel_name: str,
    key: Hashable,
    variants: Sequence[Variant],
    level: str,
    prune: Prune | None = None,
) -> Plan:
    """Prune ``variants`` for ``key``, group them by priority and cut the groups by ``level``."""
    kept = list(variants) if prune is None else _pruned(kernel_name, key, variants, prune)
    groups = grouped(kept, lambda variant: variant.priority_for(key))
    ordered = tuple(tuple(groups[priority]) for priority in sorted(groups, reverse=True))
    count = min(GROUPS_BY_LEVEL[level] or len(ordered), len(ordered))
    return Plan(level, ordered, count, len(variants) - len(kept))


def _pruned(
    kernel_name: str, key: Hashable, variants: Sequence[Variant], prune: Prune
) -> list[Variant]:
    returned = prune(key, list(variants))
    if isinstance(returned, str | bytes | Mapping) or not isinstance(returned, Iterable):
        raise TypeError(
            f"{kernel_name}: prune must return a list of the variants to try, got {returned!r}"
        )
    kept = list(returned)
    known = set(variants)
    strangers = [v for v in kept if not isinstance(v, Variant) or v not in known]
    if strangers:
        raise ValueError(
            f"{kernel_name}: prune returned {strangers!r}, which are not variants of the "
            "kernel; return some of the variants it was given"
        )
    if not kept:
        raise ValueError(f"{kernel_name}: prune removed every variant for key {key!r}")
    chosen = set(kept)
    return [v for v in variants if v in chosen]  # the kernel's order, each once


def reuse(stored: TuneReport, planned: Plan, searched: bool = False) -> TuneReport | None:
    """A stored report as the answer for ``planned``, or None when it must be tuned again.

    It serves when it has a result for every variant the plan tries first, or when both it and
    this tuning come from a search (``searched``) and it searched one of the sets the plan
    tries (:func:`_searched_a_set_of`), whatever its strategy and budget. Where the prune
    function now removes its winner, the fastest of the stored variants it keeps wins (none
    timed: tuned again)."""
    known = {r.variant for r in stored.results if r.tried}
    covered = (
        searched
        and stored.strategy is not Strategy.EXHAUSTIVE
        and _searched_a_set_of(planned, stored.space, known)
    )
    if not covered and not all(variant in known for variant in planned.first):
        logger.info(
            "numbatune: stored result for key %r covers fewer variants than level %s tries "
            "first; tuning again",
            stored.key,
            planned.level,
        )
        return None
    allowed = set(planned.allowed)
    if stored.winner in allowed:
        return stored
    timed = [
        (result.median_s, index)
        for index, result in enumerate(stored.results)
        if result.median_s is not None and result.variant in allowed
    ]
    if not timed:
        return None
    return dataclasses.replace(stored, best_index=min(timed)[1])


def _searched_a_set_of(planned: Plan, space: int, tried: set[Variant]) -> bool:
    """Whether a search of ``space`` variants, of which it tried ``tried``, searched one of the
    sets ``planned`` tries (:meth:`Plan.tries`; each holds the first): the one of that size,
    which must hold every variant it tried.

    A stored search records its space's size, not its variants. A search of another set (of
    the top group before the priorities changed, or of the variants an earlier prune function
    kept) is told apart by the variants it tried that the set does not hold, or by a size no
    set has; one that tried only variants of the set of its size cannot be.
    """
    return any(
        len(variant_set) == space and tried <= set(variant_set) for variant_set in planned.tries()
    )
