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

from numbatune import arrays, bench
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
    #: Where the answer came from: "benchmark", "memory", "disk", or "single" when the kernel
    #: has one variant and nothing was measured.
    source: str
    results: list[VariantResult] = field(repr=False)

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
        return TuneReport(self.key, self.best_index, source, self.results)


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
) -> TuneReport:
    """Measure every variant on clones of ``args`` and report, the fastest first in the log."""
    if len(variants) == 1:
        return TuneReport(key, 0, "single", [VariantResult(variants[0], None)])
    clones = tuple(arrays.clone(a, stream) if arrays.is_array(a) else a for a in args)
    launchers: dict[Hashable, Callable[[], None]] = {}
    errors: dict[int, str] = {}
    for index, variant in enumerate(variants):
        try:
            launcher = prepare(variant, clones)
        except Exception as error:
            errors[index] = _describe(error)
            continue
        launchers[index] = _bind(launcher, clones, stream)
    timings = bench.measure(launchers, stream, inputs=clones)
    results = []
    for index, variant in enumerate(variants):
        timing = timings.get(index)
        if isinstance(timing, bench.Timing):
            results.append(VariantResult(variant, timing.median_s, timing.spread_s, timing.runs))
        else:
            error = errors.get(index) or _describe(timing)  # type: ignore[arg-type]
            results.append(VariantResult(variant, None, error=error))
    timed = sorted(
        (i for i, r in enumerate(results) if r.median_s is not None),
        key=lambda i: results[i].median_s,  # type: ignore[arg-type, return-value]
    )
    if not timed:
        lines = "\n".join(f"  {r.variant.label}: {r.error}" for r in results)
        raise TuningError(f"{name}: every variant failed for key {key!r}:\n{lines}")
    logger.info(
        "numbatune: tuned %s for key %r: %s",
        name,
        key,
        "; ".join(
            f"{results[i].variant.label}: {results[i].median_s * 1e6:.1f} us" for i in timed[:3]
        ),
    )
    return TuneReport(key, timed[0], "benchmark", results)


def _bind(launcher: Launcher, args: tuple[Any, ...], stream: Any) -> Callable[[], None]:
    return lambda: launcher(args, stream)
