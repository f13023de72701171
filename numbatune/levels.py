"""Tuning levels, priorities and pruning: which variants a key's tuning tries.

For each key, the user's ``prune(key, variants)`` (if any) first keeps the variants worth
trying. Those are put in *priority groups*: variants of equal ``Variant.priority`` (computed for
the key when it is a function) form a group, and groups are ordered from the highest priority
down. The level decides how many groups are tuned together:

| level     | groups benchmarked together     |
| --------- | ------------------------------- |
| minimal   | the highest-priority group only |
| balanced  | the two highest groups          |
| extensive | the three highest groups        |
| full      | every group                     |

Only if every variant tried fails (to compile or to launch) is the next group added and the
set tuned again, one group at a time (cubecl's tune plans go on to the next group likewise);
tuning raises only when every variant has failed. A kernel whose variants all share one
priority (the default, 0) has a single group, so every level tries all its variants. A single
variant tried alone is not measured: it is run once on clones of the arguments to check that it
works, when other groups are left to fall back on.

A stored result is reused while it covers the variants that the current level and prune would
try first: a result tuned at ``minimal`` is tuned again when the level is raised to ``full``,
and a result tuned at ``full`` serves every level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numba import cuda

from numbatune import arrays, tuner
from numbatune.checks import Check
from numbatune.config import LEVELS
from numbatune.tuner import TuneReport, TuningError, VariantResult
from numbatune.variants import Variant

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
    groups: list[list[Variant]]
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

    def tries(self) -> list[list[Variant]]:
        """The variant sets to tune in turn: the level's groups, then one more group each time.

        A later set is tuned only when every variant of the one before failed.
        """
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
    groups: dict[int, list[Variant]] = {}
    for variant in kept:
        groups.setdefault(variant.priority_for(key), []).append(variant)
    ordered = [groups[priority] for priority in sorted(groups, reverse=True)]
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


def tune(
    kernel_name: str,
    key: Hashable,
    variants: Sequence[Variant],
    planned: Plan,
    args: tuple[Any, ...],
    prepare: tuner.Prepare,
    stream: Any,
    check: Check | None = None,
    names: Sequence[str] = (),
) -> TuneReport:
    """Tune the plan's variant sets in turn (:meth:`Plan.tries`) until one has a working variant.

    The report has one result per variant of ``variants``, in their order (so its
    ``best_index`` indexes them too); variants not tried (pruned, beyond the level's groups,
    or the only one tried, which is not measured) have no time and no error.
    """
    logger.info(
        "numbatune: tuning %s for key %r at level %s: %d of %d variants (%d pruned)",
        kernel_name,
        key,
        planned.level,
        len(planned.first),
        len(variants),
        planned.pruned,
    )
    *fallbacks, last = planned.tries()

    def measured(variant_set: Sequence[Variant]) -> TuneReport:
        report = tuner.tune(kernel_name, key, variant_set, args, prepare, stream, check, names)
        return _aligned(report, variants)

    for variant_set in fallbacks:
        if len(variant_set) == 1 and not _runs(kernel_name, variant_set[0], args, prepare, stream):
            continue
        try:
            return measured(variant_set)
        except TuningError:
            logger.info(
                "numbatune: every variant of %s tried for key %r failed; trying the next "
                "priority group too",
                kernel_name,
                key,
            )
    return measured(last)


def _runs(
    kernel_name: str, variant: Variant, args: tuple[Any, ...], prepare: tuner.Prepare, stream: Any
) -> bool:
    """Whether ``variant`` compiles and runs once on clones of ``args``.

    A lone variant is not measured, but one that fails gives way to the next priority group.
    """
    clones = arrays.clone_arguments(args, stream)
    try:
        prepare(variant, clones)(clones, stream)
        (stream or cuda.default_stream()).synchronize()  # a launch error shows here
    except Exception as error:
        logger.info(
            "numbatune: %s: %s failed (%s); trying the next priority group too",
            kernel_name,
            variant.label,
            error,
        )
        return False
    return True


def _aligned(report: TuneReport, variants: Sequence[Variant]) -> TuneReport:
    """``report`` with one result per variant of ``variants``, in order; untried ones empty."""
    measured = {result.variant: result for result in report.results}
    results = [measured.get(variant, VariantResult(variant, None)) for variant in variants]
    best = variants.index(report.best_variant)
    return TuneReport(report.key, best, report.source, results, report.checked)


def reuse(stored: TuneReport, planned: Plan) -> TuneReport | None:
    """A stored report as the answer for ``planned``, or None when it must be tuned again.

    It serves when it has a result (a time, an error or a mismatch) for every variant the plan
    tries first.
    Its winner stays the winner unless the prune function now removes it; then the fastest of
    the stored variants it keeps wins, and if it keeps no timed one the key is tuned again.
    """
    known = {r.variant for r in stored.results if r.median_s is not None or r.error or r.mismatch}
    if not all(variant in known for variant in planned.first):
        logger.info(
            "numbatune: stored result for key %r tried fewer variants than level %s asks; "
            "tuning again",
            stored.key,
            planned.level,
        )
        return None
    allowed = set(planned.allowed)
    if stored.best_variant in allowed:
        return stored
    timed = [
        (result.median_s, index)
        for index, result in enumerate(stored.results)
        if result.median_s is not None and result.variant in allowed
    ]
    if not timed:
        return None
    return TuneReport(stored.key, min(timed)[1], stored.source, stored.results, stored.checked)
