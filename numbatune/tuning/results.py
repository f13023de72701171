"""What tuning a key found: one outcome per variant, and the report that names the winner.

A variant was timed (:class:`Timed`), failed (:class:`Failed`; its run raised: :class:`Raised`),
gave wrong results in check mode (:class:`Mismatched`) or was not tried (:data:`NOT_TRIED`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from numbatune.config import Timing
from numbatune.errors import deprecated
from numbatune.strategies import Strategy
from numbatune.tuning.checks import Mismatch
from numbatune.values import TextEnum
from numbatune.variants import Variant


class Source(TextEnum):
    """Where a report's answer came from (compares equal to its value: ``"benchmark"``).

    Attributes
    ----------
    BENCHMARK
        Measured now.
    MEMORY
        Measured earlier in this process.
    DISK
        Read from the disk cache.
    RANKS
        Tuned by the ranks of a torch.distributed job together, or another rank's stored
        result.
    SINGLE
        The kernel has one variant (to try): it was chosen without measuring.
    UNTUNED
        Not tuned (the ``on_miss`` setting) and no key of the kernel tuned: the kernel as
        written (or the first variant the level tries), unmeasured.
    NEAREST
        Not tuned (the ``on_miss`` setting): the winner of the kernel's nearest tuned key,
        unmeasured for this one.
    """

    BENCHMARK = "benchmark"
    MEMORY = "memory"
    DISK = "disk"
    RANKS = "ranks"
    SINGLE = "single"
    UNTUNED = "untuned"
    NEAREST = "nearest"


class Origin(TextEnum):
    """Where the variant a call launches comes from, as `TunedKernel.lookup` says without
    tuning (compares equal to its value: ``"tuned"``).

    Attributes
    ----------
    TUNED
        Measured in this process.
    DISK
        Read from the disk cache (an imported result too).
    RANKS
        Tuned by the ranks of a torch.distributed job together, or another rank's result.
    SINGLE
        The kernel's only variant (to try), unmeasured.
    NEAREST
        The winner of the kernel's nearest tuned key (``on_miss``), unmeasured for this one.
    AS_WRITTEN
        The kernel as written (``on_miss``, with no key of the kernel tuned), unmeasured.
    NONE
        No answer yet: a call tunes the key first (``on_miss="tune"``) or raises
        (``on_miss="error"``).
    """

    TUNED = "tuned"
    DISK = "disk"
    RANKS = "ranks"
    SINGLE = "single"
    NEAREST = "nearest"
    AS_WRITTEN = "as written"
    NONE = "none"

    @classmethod
    def of(cls, source: Source) -> Origin:
        """The origin of a report's answer, from its ``source``."""
        return _ORIGINS[source]


_ORIGINS = {
    Source.BENCHMARK: Origin.TUNED,
    Source.MEMORY: Origin.TUNED,  # (a report served again; the winner table keeps the first)
    Source.DISK: Origin.DISK,
    Source.RANKS: Origin.RANKS,
    Source.SINGLE: Origin.SINGLE,
    Source.NEAREST: Origin.NEAREST,
    Source.UNTUNED: Origin.AS_WRITTEN,
}


@dataclass(frozen=True)
class Lookup:
    """What a call with some arguments launches, and where that answer comes from
    (`TunedKernel.lookup`, which tunes nothing).

    Attributes
    ----------
    key : Hashable
        The call's tuning key.
    origin : Origin
        Where the answer comes from.
    variant : Variant | None
        The variant a call launches; None where there is no answer yet (``Origin.NONE``).
    in_memory : bool
        Whether the answer is in this process's winner table already (a call launches it
        without reading the disk).
    """

    key: Hashable
    origin: Origin
    variant: Variant | None = None
    in_memory: bool = False


class Status(TextEnum):
    """How one variant fared (compares equal to its value: ``"timed"``).

    Attributes
    ----------
    TIMED
        Measured to the end.
    STOPPED_EARLY
        Timed, then no longer measured: clearly slower than the leader.
    FAILED
        Failed to compile or to run; the result's ``error`` says why.
    MISMATCHED
        In check mode, its outputs differed from the reference's.
    NOT_TRIED
        Not tried by this tuning: pruned, beyond the level, not chosen by the search, or the
        kernel's only variant.
    """

    TIMED = "timed"
    STOPPED_EARLY = "stopped early"
    FAILED = "failed"
    MISMATCHED = "mismatched"
    NOT_TRIED = "not tried"


@dataclass(frozen=True)
class Timed:
    """A variant's measured time."""

    median_s: float
    #: Interquartile range of the timed runs.
    spread_s: float
    runs: int
    #: Stopped being measured early, being clearly slower than the leader.
    stopped_early: bool = False


_MAX_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class Failed:
    """A variant that failed to compile or to run; ``error`` says why."""

    error: str

    @classmethod
    def of(cls, error: BaseException) -> Failed:
        """The failure an exception describes (its type and message, cut at 2000 characters)."""
        text = f"{type(error).__name__}: {error}"
        if len(text) > _MAX_ERROR_LENGTH:
            text = text[:_MAX_ERROR_LENGTH] + " ..."
        return cls(text)


@dataclass(frozen=True)
class Raised(Failed):
    """A variant whose run raised ``exception`` (a debug kernel's ``raise MyError``, numba's
    refusal of the arguments), kept in memory only, so that a tuning where every variant raised
    it can raise it too; without its traceback, whose frames hold the tuning's clones."""

    exception: BaseException = field(compare=False, repr=False)

    @classmethod
    def of(cls, error: BaseException) -> Raised:
        return cls(Failed.of(error).error, error.with_traceback(None))


@dataclass(frozen=True)
class Mismatched:
    """In check mode, a variant whose outputs differed from the reference's."""

    mismatch: Mismatch


@dataclass(frozen=True)
class NotTried:
    """A variant this tuning did not try (pruned, beyond the level, or the only one)."""


NOT_TRIED = NotTried()

Outcome = Timed | Failed | Mismatched | NotTried


@dataclass(frozen=True)
class VariantResult:
    """How one variant fared while tuning a key: one of `TuneReport.results`.

    Attributes
    ----------
    variant : Variant
        The variant.
    outcome
        What happened to it (its kind is `status`), which the properties below read.
    """

    variant: Variant
    outcome: Outcome = NOT_TRIED

    @property
    def status(self) -> Status:
        """The outcome's kind."""
        outcome = self.outcome
        if isinstance(outcome, Timed):
            return Status.STOPPED_EARLY if outcome.stopped_early else Status.TIMED
        if isinstance(outcome, Failed):
            return Status.FAILED
        if isinstance(outcome, Mismatched):
            return Status.MISMATCHED
        return Status.NOT_TRIED

    @property
    def params(self) -> dict[str, Any]:
        """The variant's compile-time parameters."""
        return self.variant.params

    @property
    def median_s(self) -> float | None:
        """Median time of one launch in seconds, if the variant was timed."""
        return self.outcome.median_s if isinstance(self.outcome, Timed) else None

    @property
    def spread_s(self) -> float | None:
        """Interquartile range of its timed runs, if the variant was timed."""
        return self.outcome.spread_s if isinstance(self.outcome, Timed) else None

    @property
    def runs(self) -> int:
        """How many timed runs it had."""
        return self.outcome.runs if isinstance(self.outcome, Timed) else 0

    @property
    def error(self) -> str | None:
        """Why the variant failed, if it did."""
        return self.outcome.error if isinstance(self.outcome, Failed) else None

    @property
    def mismatch(self) -> Mismatch | None:
        """Where its outputs differed from the reference's, if they did (check mode)."""
        return self.outcome.mismatch if isinstance(self.outcome, Mismatched) else None

    @property
    def tried(self) -> bool:
        """Whether this tuning has a result for it: timed, failed or mismatched."""
        return not isinstance(self.outcome, NotTried)


@dataclass(frozen=True, repr=False)
class TuneReport:
    """The outcome of tuning one key, as ``tuned.tune(...)`` returns it.

    Attributes
    ----------
    key : Hashable
        The tuning key.
    best_index : int
        Index of the winner in ``results`` (and in the decorator's variant list).
    source : Source
        Where the answer came from.
    results : tuple[VariantResult, ...]
        One result per variant, in the decorator's order.
    checked : bool
        Whether check mode compared the variants' outputs while tuning.
    check : str
        Of a checked tuning, the fingerprint of its check
        (:func:`numbatune.tuning.checks.fingerprint`); empty for others, and for older results.
    compile_s, trial_s, benchmark_s : float
        Seconds spent in this tuning compiling variants, running them first in a separate
        process (the ``isolate`` setting), and checking and timing them.
    screened_out : int
        Variants timed while others compiled and dropped then, as clearly slower than the
        best so far: their results are stopped early.
    compiles : int
        Kernels compiled for it (variants that differ only in what the launch function reads
        share one; kernels loaded from disk are not counted).
    strategy : Strategy
        The search strategy that chose the variants tried.
    space : int
        The number of variants it chose from.
    tied : tuple[int, ...]
        Indices in ``results`` of the variants within noise of each other, the winner among
        them, when timed again together (the kernel as written where it is one, else the
        first); empty where none was tied with the winner.
    timing : Timing
        How the variants were timed: launches between CUDA events, replays of a CUDA graph, or
        the wall clock under the simulator (older results: launches).
    """

    key: Hashable
    best_index: int
    source: Source
    results: tuple[VariantResult, ...] = field(repr=False)
    checked: bool = False
    compile_s: float = 0.0
    benchmark_s: float = 0.0
    trial_s: float = 0.0
    screened_out: int = 0
    compiles: int = 0
    strategy: Strategy = Strategy.EXHAUSTIVE
    space: int = 0
    check: str = ""
    tied: tuple[int, ...] = ()
    timing: Timing = Timing.LAUNCHES

    @property
    def tried(self) -> int:
        """How many variants this tuning tried (timed, failed or mismatched)."""
        return sum(result.tried for result in self.results)

    @property
    def tuning_s(self) -> float:
        """Seconds the tuning took: compiling, trial runs, checking and timing."""
        return self.compile_s + self.trial_s + self.benchmark_s

    @property
    def winner(self) -> Variant:
        """The whole winner: the winning variant, its compile-time parameters
        (``winner.params``) and its ``numba.cuda.jit`` options (``winner.jit``), as Triton's
        ``best_config`` is the whole winning config."""
        return self.results[self.best_index].variant

    @property
    def best(self) -> dict[str, Any]:
        """The winning variant's compile-time parameters, without its jit options: the values
        host code reads (a buffer sized from the tuned block count), as Triton's
        ``best_config.kwargs``. The whole winner is `winner`."""
        return self.winner.params

    @property
    def best_variant(self) -> Variant:
        """Deprecated: `winner`, which it returns."""
        deprecated("TuneReport.best_variant", "TuneReport.winner")
        return self.winner

    def with_source(self, source: Source | str) -> TuneReport:
        """Deprecated: ``dataclasses.replace(report, source=...)``, which it returns.

        Parameters
        ----------
        source
            Where the copy's answer came from.
        """
        deprecated("TuneReport.with_source", "dataclasses.replace(report, source=...)")
        return replace(self, source=Source(source))

    def __repr__(self) -> str:
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr]
        return f"TuneReport(winner={self.winner!r}, {', '.join(shown)})"

    def fastest(self, count: int) -> list[VariantResult]:
        """The ``count`` fastest timed results, fastest first: the winner, then the others by
        their medians.

        Each median is from the variant's latest measurement. A tuning that measures in
        batches (a search, or an exhaustive run of more than 256 variants) measures each with
        the best so far, and medians of different batches are not comparable (a GPU that heats
        up runs the later batch slower): another variant's median may be below the winner's,
        which comes first all the same.

        Parameters
        ----------
        count
            How many results at most.

        Returns
        -------
        list[VariantResult]
            The timed results (failed and untried variants left out), fastest first.
        """
        winner = self.results[self.best_index]
        timed = [result for result in self.results if result.median_s is not None]
        timed.sort(key=lambda result: (result is not winner, result.outcome.median_s))
        return timed[:count]
