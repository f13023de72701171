"""Tuning one key: compile the variants, time them on clones of the arguments, pick the fastest.

The caller's arrays are never written: every variant runs on clones, made once before timing.
A variant that fails to compile or launch is recorded with its error and left out; only when
every variant fails does tuning raise, with one message that names them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from numbatune import arrays, bench, checks
from numbatune.checks import Check, Mismatch
from numbatune.progress import Progress
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")

#: Launches one variant on the given arguments, on the given stream.
Launcher = Callable[[tuple[Any, ...], Any], None]
#: Compiles a variant for the types of the arguments and returns its launcher.
Prepare = Callable[[Variant, tuple[Any, ...]], Launcher]

_MAX_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class VariantResult:
    """How one variant fared while tuning a key."""

    variant: Variant
    #: Median time of one launch in seconds; None if the variant failed or was not timed.
    median_s: float | None
    spread_s: float | None = None
    runs: int = 0
    #: Why the variant failed, or None.
    error: str | None = None
    #: In check mode, where its outputs differed from the reference's (it could not win).
    mismatch: Mismatch | None = None

    @property
    def params(self) -> dict[str, Any]:
        """The variant's compile-time parameters."""
        return self.variant.params


@dataclass(frozen=True)
class TuneReport:
    """The outcome of tuning one key, as returned by ``tuned.tune(...)``."""

    key: Hashable
    #: Index of the winner in ``results`` (and in the decorator's variant list).
    best_index: int
    #: Where the answer came from: "benchmark", "memory", "disk", "single" when the kernel
    #: has one variant and nothing was measured, or "untuned" when tuning is off (the ``tune``
    #: setting) and nothing was stored.
    source: str
    results: list[VariantResult] = field(repr=False)
    #: Whether check mode compared the variants' outputs while tuning.
    checked: bool = False

    @property
    def best_variant(self) -> Variant:
        """The winning variant."""
        return self.results[self.best_index].variant

    @property
    def best(self) -> dict[str, Any]:
        """The winning variant's compile-time parameters."""
        return self.best_variant.params

    def with_source(self, source: str) -> TuneReport:
        """The same report, answered from elsewhere."""
        return TuneReport(self.key, self.best_index, source, self.results, self.checked)


class TuningError(RuntimeError):
    """Every variant failed for a key; the message names each variant and its error."""


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= _MAX_ERROR_LENGTH else text[:_MAX_ERROR_LENGTH] + " ..."


def tune(
    name: str,
    key: Hashable,
    variants: Sequence[Variant],
    args: tuple[Any, ...],
    prepare: Prepare,
    stream: Any = 0,
    check: Check | None = None,
    names: Sequence[str] = (),
) -> TuneReport:
    """Measure every variant on clones of ``args`` and report, the fastest first in the log.

    With ``check``, each variant first runs once on fresh clones and its outputs (the array
    arguments, named by ``names``) are compared with the reference's; one that disagrees is
    not measured and cannot win.
    """
    if len(variants) == 1:
        return TuneReport(key, 0, "single", [VariantResult(variants[0], None)])
    clones = arrays.clone_arguments(args, stream)
    prepared: dict[int, Launcher] = {}
    errors: dict[int, str] = {}
    progress = Progress(name, len(variants))
    for index, variant in enumerate(variants):
        try:
            prepared[index] = prepare(variant, clones)
        except Exception as error:
            errors[index] = _describe(error)
        progress.step(index + 1, "compiled")
    mismatches: dict[int, Mismatch] = {}
    if check is not None:
        mismatches = _checked(name, variants, prepared, errors, args, stream, check, names)
    launchers = {
        index: _bind(launcher, clones, stream)
        for index, launcher in prepared.items()
        if index not in errors and index not in mismatches
    }
    progress.step(len(variants), "compiled; measuring")
    timings = bench.measure(launchers, stream, inputs=clones)
    progress.close()
    results = []
    for index, variant in enumerate(variants):
        timing = timings.get(index)
        if isinstance(timing, bench.Timing):
            results.append(VariantResult(variant, timing.median_s, timing.spread_s, timing.runs))
        elif index in mismatches:
            results.append(VariantResult(variant, None, mismatch=mismatches[index]))
        else:
            error = errors.get(index) or _describe(timing)  # type: ignore[arg-type]
            results.append(VariantResult(variant, None, error=error))
    timed = sorted(
        (i for i, r in enumerate(results) if r.median_s is not None),
        key=lambda i: results[i].median_s,  # type: ignore[arg-type, return-value]
    )
    if not timed:
        lines = "\n".join(
            f"  {r.variant.label}: {r.error or f'wrong result: {r.mismatch}'}" for r in results
        )
        raise TuningError(f"{name}: every variant failed for key {key!r}:\n{lines}")
    logger.info(
        "numbatune: tuned %s for key %r: %s",
        name,
        key,
        "; ".join(
            f"{results[i].variant.label}: {results[i].median_s * 1e6:.1f} us" for i in timed[:3]
        ),
    )
    return TuneReport(key, timed[0], "benchmark", results, check is not None)


def _checked(
    name: str,
    variants: Sequence[Variant],
    prepared: dict[int, Launcher],
    errors: dict[int, str],
    args: tuple[Any, ...],
    stream: Any,
    check: Check,
    names: Sequence[str],
) -> dict[int, Mismatch]:
    """Run each prepared variant once on fresh clones of ``args``; return the mismatches with
    the reference, logged as warnings, and record in ``errors`` the variants that failed."""
    expected = checks.reference_outputs(check, args, stream) if check.reference else None
    labels = names or [f"#{i}" for i in range(len(args))]
    mismatches: dict[int, Mismatch] = {}
    for index, launcher in prepared.items():
        fresh = arrays.clone_arguments(args, stream)
        try:
            launcher(fresh, stream)
            got = checks.host_outputs(fresh, stream)
        except Exception as error:
            errors[index] = _describe(error)
            continue
        if expected is None:
            expected = got  # the first variant that runs is the reference
            continue
        mismatch = checks.compare(expected, got, labels, check)
        if mismatch is not None:
            mismatches[index] = mismatch
            logger.warning(
                "numbatune: %s: %s gives wrong results (%s); it cannot win",
                name,
                variants[index].label,
                mismatch,
            )
    return mismatches


def _bind(launcher: Launcher, args: tuple[Any, ...], stream: Any) -> Callable[[], None]:
    return lambda: launcher(args, stream)
