"""Stored entries: a tuning report as JSON, and back, checked field by field.

An entry is what the disk cache keeps for one key (and what an exported cache file carries):
the format, the checksum of the kernel it was tuned with, the search that chose the variants,
and one result per variant tried (a search of a large space tries few of them). Reading
one checks every field; anything out of place (another format, an index out of range, an
unknown variant, a field of the wrong type) raises :class:`DamagedEntry`, so a damaged entry is
never trusted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping
from typing import Any

from numbatune.config import Timing
from numbatune.strategies import Strategy
from numbatune.tuning.checks import Mismatch
from numbatune.tuning.results import (
    NOT_TRIED,
    Failed,
    Mismatched,
    Outcome,
    Source,
    Status,
    Timed,
    TuneReport,
    VariantResult,
)
from numbatune.values import stable_text
from numbatune.variants import Variant

#: Version of the stored entries; entries of another format are tuned again.
FORMAT = 3
#: The report's fields an entry stores as they are.
_AS_STORED = ("checked", "compile_s", "benchmark_s", "trial_s", "compiles", "space")


def storage_key(key_text: str, checksum: str) -> str:
    """What an entry is stored under: its key's text and the kernel's checksum, so that
    entries of other versions of a kernel (before an upgrade, or imported) never collide."""
    return f"{key_text} @{checksum}"


def key_of(stored_under: str) -> str:
    """The key text of a :func:`storage_key` (or a :func:`journal_key`)."""
    return stored_under.rpartition(" @")[0] or stored_under


_JOURNAL = " (unfinished)"


def journal_key(key_text: str, checksum: str) -> str:
    """What the outcomes of an unfinished tuning of a key are stored under
    (:mod:`numbatune.cache.journal`); storing the key's result replaces them."""
    return storage_key(key_text, checksum) + _JOURNAL


def is_journal(stored_under: str) -> bool:
    """Whether ``stored_under`` is a :func:`journal_key`."""
    return stored_under.endswith(_JOURNAL)


class DamagedEntry(ValueError):
    """A stored entry that is not what numbatune writes; it is discarded."""


def encode(report: TuneReport, checksum: str, function: str, key_text: str) -> dict[str, Any]:
    """The stored form of ``report``: the results of the variants tried, in the kernel's
    order; ``best_index`` indexes them."""
    tried = [result for result in report.results if result.tried]
    return {
        "format": FORMAT,
        "checksum": checksum,
        "function": function,
        "key": key_text,
        "best_index": tried.index(report.results[report.best_index]),
        **{name: getattr(report, name) for name in _AS_STORED},
        "check": report.check,
        "strategy": report.strategy.value,
        "results": [encode_result(result) for result in tried],
        "tied": [tried.index(report.results[index]) for index in report.tied],
        "timing": report.timing.value,
    }


def encode_result(result: VariantResult) -> dict[str, Any]:
    """The stored form of one variant's result, as an entry's ``results`` hold it."""
    outcome = result.outcome
    mismatch = dataclasses.asdict(outcome.mismatch) if isinstance(outcome, Mismatched) else None
    return {
        "variant": result.variant.label,
        "params": {k: stable_text(v) for k, v in result.variant.params.items()},
        "jit": {k: stable_text(v) for k, v in result.variant.jit.items()},
        "status": result.status.value,
        "median_s": result.median_s,
        "spread_s": result.spread_s,
        "runs": result.runs,
        "error": result.error,
        "mismatch": mismatch,
    }


def encode_outcomes(
    outcomes: Mapping[Variant, Outcome], checksum: str, check: str | None, timing: Timing
) -> dict[str, Any]:
    """The stored form of an unfinished tuning's outcomes (:mod:`numbatune.cache.journal`),
    with its check's fingerprint (None: no check mode) and its timing."""
    results = [encode_result(VariantResult(v, o)) for v, o in outcomes.items()]
    return {"format": FORMAT, "checksum": checksum, "checked": check is not None,
            "check": check, "timing": timing.value, "results": results}  # fmt: skip


def decode_outcomes(
    stored: Any, variants: Mapping[str, Variant], checksum: str, check: str | None,
    timing: Timing,
) -> dict[Variant, Outcome]:  # fmt: skip
    """The outcomes :func:`encode_outcomes` stored, or :class:`DamagedEntry`: none where of
    another checksum, or not checked (:func:`_checked_alike`) or timed
    (:meth:`~numbatune.config.Timing.serves`) as this tuning does."""
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        raise DamagedEntry(f"an unfinished tuning's outcomes are not of format {FORMAT}")
    if not isinstance(stored.get("results"), list):
        raise DamagedEntry(f"results are {stored.get('results')!r}, expected a list")
    if stored.get("checksum") != checksum or not _checked_alike(stored, check):
        return {}
    return _outcomes(stored["results"], variants) if _timing(stored).serves(timing) else {}


def _timing(stored: dict[str, Any]) -> Timing:
    """How a stored entry's (or journal's) variants were timed: as launches where stored
    before it was kept; :class:`DamagedEntry` for what is no timing."""
    timing = stored.get("timing", Timing.LAUNCHES.value)
    if not isinstance(timing, str) or timing not in {t.value for t in Timing}:
        raise DamagedEntry(f"timing {timing!r} is not a timing")
    return Timing(timing)


def _checked_alike(stored: dict[str, Any], check: str | None) -> bool:
    """Whether the unfinished tuning of ``stored`` checked its variants' outputs as one with
    ``check`` (a fingerprint, or None: no check mode) does: with the same check (which variants
    were wrong depends on it), or not at all. Outcomes stored before the check was kept have
    none: only a tuning without check mode goes on with them, where they checked nothing."""
    if check is not None:
        return stored.get("check") == check
    return stored.get("checked") is False


def _outcomes(results: list[Any], variants: Mapping[str, Variant]) -> dict[Variant, Outcome]:
    """Each stored result's outcome, by its variant; :class:`DamagedEntry` for a result that
    is damaged, names a variant not of the kernel's, or repeats one."""
    outcomes: dict[Variant, Outcome] = {}
    for result in results:
        outcome = _outcome(result)
        variant = variants.get(result["variant"])
        if variant is None:
            raise DamagedEntry(f"variant {result['variant']!r} is not one of the kernel's")
        if variant in outcomes:
            raise DamagedEntry(f"variant {result['variant']!r} has two results")
        outcomes[variant] = outcome
    return outcomes


def check(entry: Any) -> dict[str, Any]:
    """``entry`` if it is a well-formed stored entry (whatever its kernel); else
    :class:`DamagedEntry` says what is wrong."""
    if not isinstance(entry, dict):
        raise DamagedEntry(f"an entry is a JSON object, got {type(entry).__name__}")
    if entry.get("format") != FORMAT:
        raise DamagedEntry(f"format {entry.get('format')!r}, expected {FORMAT}")
    fields = (("checksum", str), ("function", str), ("key", str), ("results", list),
              ("checked", bool))  # fmt: skip
    for name, kind in fields:
        if not isinstance(entry.get(name), kind):
            raise DamagedEntry(f"{name} is {entry.get(name)!r}, expected a {kind.__name__}")
    if not isinstance(entry.get("check", ""), str):  # (entries stored before have none)
        raise DamagedEntry(f"check is {entry['check']!r}, expected a str")
    for name in ("compile_s", "benchmark_s", "trial_s"):
        _number(entry, name)
    for name in ("compiles", "space"):
        if type(entry.get(name)) is not int or entry[name] < 0:
            raise DamagedEntry(f"{name} is {entry.get(name)!r}, expected an integer >= 0")
    searches = {s.value for s in Strategy} - {Strategy.AUTO.value}
    strategy = entry.get("strategy")
    if not isinstance(strategy, str) or strategy not in searches:  # (a list is unhashable)
        raise DamagedEntry(f"strategy {strategy!r} is not a search strategy")
    best, count = entry.get("best_index"), len(entry["results"])
    if type(best) is not int or not 0 <= best < count:
        raise DamagedEntry(f"best_index {best!r} is not one of the {count} results")
    tied = entry.get("tied", [])  # (entries stored before have none)
    if not isinstance(tied, list) or not all(type(i) is int and 0 <= i < count for i in tied):
        raise DamagedEntry(f"tied is {tied!r}, expected indices of results")
    _timing(entry)
    for result in entry["results"]:
        _outcome(result)
    if not isinstance(_outcome(entry["results"][best]), Timed):
        raise DamagedEntry(f"the best result, #{best}, was not timed")
    return entry


def _float(value: Any, name: str) -> float:
    """``value`` (stored as ``name``) as a float; :class:`DamagedEntry` where it is not a
    number, or an integer beyond a float's range (JSON's integers have no bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DamagedEntry(f"{name} is {value!r}, expected a number")
    try:
        return float(value)
    except OverflowError:
        raise DamagedEntry(f"{name} is an integer beyond a float's range") from None


def _number(result: Any, name: str) -> float:
    value = _float(result.get(name), name)
    if not math.isfinite(value):
        raise DamagedEntry(f"{name} is {value!r}, expected a finite number")
    if value < 0:
        raise DamagedEntry(f"{name} is {value!r}, expected a number >= 0")
    return value


def _texts(result: dict[str, Any], name: str) -> None:
    value = result.get(name)
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise DamagedEntry(f"{name} is {value!r}, expected names and their values' text")


def _absent(result: dict[str, Any], status: Status, *names: str) -> None:
    """A result of ``status`` has no value for ``names`` (what only other outcomes have)."""
    for name in names:
        value = result.get(name)
        if value is not None and (type(value) is not int or value != 0):
            raise DamagedEntry(f"{name} is {value!r} in a {status.value} result")


def _mismatch(found: Any) -> Mismatch:
    if not isinstance(found, dict) or set(found) != {"output", "count", "size", "largest_error"}:
        raise DamagedEntry(f"mismatch is {found!r}, expected output, count, size, largest_error")
    counts = [found["count"], found["size"]]
    if not isinstance(found["output"], str) or any(type(n) is not int or n < 0 for n in counts):
        raise DamagedEntry(f"mismatch is {found!r}: a name and counts >= 0 expected")
    error = _float(found["largest_error"], "largest_error")
    return Mismatch(found["output"], found["count"], found["size"], error)


def _outcome(result: Any) -> Outcome:
    """The outcome a stored result records, every field checked (a failed result with a time
    is damaged)."""
    if not isinstance(result, dict) or not isinstance(result.get("variant"), str):
        raise DamagedEntry(f"a result is {result!r}, expected an object naming its variant")
    try:
        status = Status(result.get("status"))
    except ValueError:
        raise DamagedEntry(f"status {result.get('status')!r} is not a status") from None
    _texts(result, "params"), _texts(result, "jit")
    if status in (Status.TIMED, Status.STOPPED_EARLY):
        _absent(result, status, "error", "mismatch")
        runs = result.get("runs")
        if type(runs) is not int or runs < 1:
            raise DamagedEntry(f"runs is {runs!r}, expected an integer >= 1")
        median, spread = _number(result, "median_s"), _number(result, "spread_s")
        return Timed(median, spread, runs, status is Status.STOPPED_EARLY)
    _absent(result, status, "median_s", "spread_s", "runs")
    if status is Status.FAILED:
        _absent(result, status, "mismatch")
        if not isinstance(result.get("error"), str):
            raise DamagedEntry(f"error is {result.get('error')!r}, expected text")
        return Failed(result["error"])
    _absent(result, status, "error")
    if status is Status.MISMATCHED:
        return Mismatched(_mismatch(result.get("mismatch")))
    _absent(result, status, "mismatch")
    return NOT_TRIED


def decode(
    entry: Any, key: Hashable, variants: Mapping[str, Variant], checksum: str
) -> TuneReport | None:
    """The report ``entry`` stores for ``key``, None where stale (another checksum), or
    :class:`DamagedEntry`."""
    entry = check(entry)
    if entry["checksum"] != checksum:
        return None
    outcomes = _outcomes(entry["results"], variants)
    order = list(variants.values())

    def place(index: int) -> int:  # of the variant of the stored result ``index``
        return order.index(variants[entry["results"][index]["variant"]])

    return TuneReport(
        key,
        place(entry["best_index"]),
        Source.DISK,
        tuple(VariantResult(v, outcomes.get(v, NOT_TRIED)) for v in order),
        **{name: entry[name] for name in _AS_STORED},
        check=entry.get("check", ""),
        strategy=Strategy(entry["strategy"]),
        tied=tuple(map(place, entry.get("tied", ()))),
        timing=_timing(entry),
    )
