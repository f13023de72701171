"""Running a tuning job: compile the variants, time them on clones of the arguments, pick one.

The plan's variant sets are tried in turn until one has a working variant. A variant that fails
to compile or launch is recorded with its error and left out; only when every variant fails does
tuning raise, with one message that names them all. A set of one variant is not measured.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from numbatune import arrays
from numbatune.config import Snapshot
from numbatune.errors import TuningError, as_raised
from numbatune.strategies import Budget, Strategy
from numbatune.streams.handles import synchronize
from numbatune.tuning import bench, checks, search
from numbatune.tuning.job import Bound, Launcher, TuneJob, alone
from numbatune.tuning.progress import Progress
from numbatune.tuning.results import (
    Failed,
    Mismatched,
    Outcome,
    Raised,
    Source,
    Timed,
    TuneReport,
    VariantResult,
)
from numbatune.tuning.screen import Screen
from numbatune.values import stable_text
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")


def tune(job: TuneJob) -> TuneReport:
    """Tune the job's variant sets in turn until one has a working variant (from the one an
    unfinished tuning of the key stopped in: :func:`_sets_left`); the report has one result per
    variant of the kernel, in their order."""
    plan = job.plan
    logger.info(
        "numbatune: tuning %s for key %r at level %s: %d of %d variants (%d pruned)",
        job.kernel_name,
        job.key,
        plan.level,
        len(plan.first),
        len(job.variants),
        plan.pruned,
    )
    started = time.perf_counter()
    expected = _reference_outputs(job)  # (check mode: once for every set)
    clock = Clock(compile_s=time.perf_counter() - started)
    tries = plan.tries()
    *fallbacks, last = left = _sets_left(tries, job.journal.earlier())
    job = _starting_past(job, tries[: len(tries) - len(left)])  # (failed in an earlier tuning)
    for variant_set in fallbacks:
        if len(variant_set) == 1 and not _runs(job, variant_set[0]):
            continue
        try:
            return clock.stamped(tune_set(job, variant_set, clock, expected))
        except TuningError:
            job = _starting_past(job, [variant_set])
            logger.info(
                "numbatune: every variant of %s tried for key %r failed; trying the next "
                "priority group too",
                job.kernel_name,
                job.key,
            )
    return clock.stamped(tune_set(job, last, clock, expected))


def _starting_past(job: TuneJob, failed: Sequence[Sequence[Variant]]) -> TuneJob:
    """``job`` with none of the variants of the ``failed`` sets among its starts: the next set
    holds them, and its search would spend its first batch on them again."""
    dropped = {variant for variant_set in failed for variant in variant_set}
    if not dropped.intersection(job.starts):
        return job
    return dataclasses.replace(job, starts=tuple(v for v in job.starts if v not in dropped))


def _sets_left(
    tries: Sequence[Sequence[Variant]], recorded: Mapping[Variant, Outcome]
) -> Sequence[Sequence[Variant]]:
    """The variant sets of ``tries`` to tune: from the first that holds every variant an earlier,
    unfinished tuning of the key ``recorded``. A tuning cut short in a fallback set goes on in it:
    the sets before it failed (each failure discarded the journal), and are not tuned again."""
    for start, variant_set in enumerate(tries):
        if recorded.keys() <= set(variant_set):
            return tries[start:]
    return tries


@dataclasses.dataclass
class Clock:
    """Where a tuning's time went: compiling, and checking and timing (after compiling); and
    how many variants screening dropped while others compiled (fields of :class:`TuneReport`)."""

    compile_s: float = 0.0
    benchmark_s: float = 0.0
    screened_out: int = 0

    def stamped(self, report: TuneReport) -> TuneReport:
        """``report`` with this clock's times."""
        return dataclasses.replace(report, **dataclasses.asdict(self))


def _runs(job: TuneJob, variant: Variant) -> bool:
    """Whether ``variant`` (alone in its set: not measured) compiles and runs once on clones
    of the arguments; one that fails gives way to the next priority group."""
    try:
        _launched(job, variant)
    except Exception as error:
        logger.info(
            "numbatune: %s: %s failed (%s); trying the next priority group too",
            job.kernel_name,
            variant.label,
            error,
        )
        return False
    return True


def _launched(job: TuneJob, variant: Variant) -> tuple[Any, ...]:
    """Compile ``variant`` and run it once on clones of the arguments (raising where it does not
    compile or run); the clones."""
    clones = job.arguments.clone(job.stream)
    launcher = job.compile(
        [variant], clones, job.arguments.values, job.stream, _ignore, _ignore, job.settings
    )[variant]
    if isinstance(launcher, Failed):
        raise TuningError(launcher.error)
    launcher(clones, job.stream)
    synchronize(job.stream)  # a launch error shows here
    return clones


def tune_set(
    job: TuneJob, variants: Sequence[Variant], clock: Clock, expected: checks.Observed | None
) -> TuneReport:
    """Measure the variants of ``variants`` the job's search chooses, checked first against the
    reference's ``expected`` outputs in check mode (a set of one too), and report; raise
    :class:`TuningError` when every one fails."""
    if len(variants) == 1 and expected is None:
        return _report(job, {}, best=variants[0], source=Source.SINGLE)
    strategy = job.search.strategy.for_space(len(variants))
    outcomes, best, tied = _search(job, variants, strategy, clock, expected)
    if best is None:
        job.journal.discard()  # the next set, if any, starts afresh (and, cut short, goes on)
        tried = [v for v in job.variants if v in outcomes]
        lines = "\n".join(f"  {v.label}: {_why(outcomes[v])}" for v in tried)
        error = TuningError(
            f"{job.kernel_name}: every variant failed for key {job.key!r}:\n{lines}",
            results=tuple(VariantResult(v, outcomes[v]) for v in tried),
        )
        raised = [o.exception for v in tried if isinstance(o := outcomes[v], Raised)]
        raise as_raised(error, raised if len(raised) == len(tried) else [])
    report = dataclasses.replace(
        _report(job, outcomes, best=best, source=Source.BENCHMARK),
        strategy=strategy,
        space=len(variants),
        tied=tuple(job.variants.index(v) for v in tied),
    )
    logger.info(
        "numbatune: tuned %s for key %r, timed as %s (%s search, %d of %d variants): %s",
        job.kernel_name,
        job.key,
        report.timing,
        strategy,
        report.tried,
        len(variants),
        "; ".join(f"{r.variant.label}: {r.median_s * 1e6:.1f} us" for r in report.fastest(3)),
    )
    return report


def _search(
    job: TuneJob,
    variants: Sequence[Variant],
    strategy: Strategy,
    clock: Clock,
    expected: checks.Observed | None,
) -> tuple[dict[Variant, Outcome], Variant | None, tuple[Variant, ...]]:
    """Measure the batches ``strategy`` proposes (from where a journal says an earlier tuning
    stopped) until the space or the budget is spent, then settle ties (:func:`_settled`); the
    outcomes, the best, and the variants it was chosen among as ties. The journal keeps the outcomes
    after each batch that another follows (the last batch's are the result, stored)."""
    budget = job.search.budget
    limit = len(variants)  # how many variants it may measure
    if strategy is not Strategy.EXHAUSTIVE and budget.variants is not None:
        limit = min(limit, budget.variants)
    bench.prepare()
    clones = job.arguments.clone(job.stream)
    restore = arrays.restorer(clones, _originals(job), job.stream)
    progress = Progress(job.kernel_name, limit)
    randomness = search.randomness_for(job.search.seed, stable_text(job.key))
    batch = max(_BATCH, job.settings.compile_workers)
    proposals = search.proposer(strategy, variants, job.starts, randomness, batch)
    # Variants built together (one compile) are measured together, except by an exhaustive
    # search, which measures each anyway.
    exhaustive = strategy is Strategy.EXHAUSTIVE
    build_key = alone if exhaustive else job.build_key
    together = {} if exhaustive else search.siblings(variants, build_key)
    outcomes = _resumed(job, variants)
    launchers: dict[Variant, Launcher] = {}  # of the variants measured here
    times = {v: _median(outcome) for v, outcome in outcomes.items()}
    best = _fastest(job, times, times, None)
    started = time.perf_counter()
    count = min(limit - len(outcomes), proposals.batch)  # how many the next batch may take
    measured: list[Variant] = []
    while count > 0:
        batch_started = time.perf_counter()
        proposal, builds = search.next_batch(proposals, times, best, count, together, build_key)
        if not proposal:
            break
        proposal = proposal[: limit - len(outcomes)]
        measured = [*proposal, best] if best is not None else proposal
        outcomes.update(
            _measure(job, measured, clones, restore, clock, progress, outcomes, expected, launchers)
        )
        times.update({v: _median(outcomes[v]) for v in measured})
        best = _fastest(job, measured, times, best)
        room = _room(budget, strategy, started, batch_started, builds, job.settings)
        _log_batch(job, len(outcomes), limit, best, times)
        count = int(min(limit - len(outcomes), room, proposals.batch))
        if count > 0:  # another batch follows: a tuning cut short in it goes on from here
            job.journal.record(outcomes)
    last = {v: launchers[v] for v in measured if v in launchers}  # (timed with the best)
    best, tied = _settled(job, outcomes, best, last, clones, restore, clock)
    progress.close()
    return outcomes, best, tied


def _settled(
    job: TuneJob,
    outcomes: dict[Variant, Outcome],
    best: Variant | None,
    launchers: Mapping[Variant, Launcher],
    clones: tuple[Any, ...],
    restore: bench.Run,
    clock: Clock,
) -> tuple[Variant | None, tuple[Variant, ...]]:
    """The winner, and the variants it was chosen among (none where no other was tied).

    Of the variants of the ``launchers``, the last batch, measured with ``best`` (the medians
    of other batches are not comparable with its), those timed within noise of ``best``
    (:func:`numbatune.tuning.bench.within_noise`) are ties: they are timed again, together
    and interleaved (their ``outcomes`` replaced), and among those still within noise of the
    fastest, a stable rule chooses: the kernel as written, else the first in the kernel's
    order. Fresh processes, whose timings of such variants fall either way, so agree on one."""
    timed = {v: o for v, o in outcomes.items() if isinstance(o, Timed) and v in launchers}
    if best not in timed:
        return best, ()
    tied = [v for v in job.variants if v in timed and bench.within_noise(timed[best], timed[v])]
    if len(tied) < 2:
        return best, ()
    started = time.perf_counter()
    runs = {v: Bound(launchers[v], clones, job.stream) for v in tied}
    with bench.device_lock:
        again = bench.measure(runs, job.stream, clones, restore, taken=job.settings)
    clock.benchmark_s += time.perf_counter() - started
    outcomes.update({variant: _outcome(timing) for variant, timing in again.items()})
    retimed = {v: timing for v, timing in again.items() if isinstance(timing, Timed)}
    if not retimed:  # (every one failed when run again: the best of the others wins)
        times = {v: _median(outcome) for v, outcome in outcomes.items()}
        return _fastest(job, (), times, None), ()
    fastest = min(retimed, key=lambda v: (retimed[v].median_s, job.variants.index(v)))
    ties = tuple(v for v in tied if v in retimed and bench.within_noise(retimed[fastest],
                                                                        retimed[v]))  # fmt: skip
    winner = job.reference if job.reference in ties else ties[0]
    logger.info(
        "numbatune: %s: for key %r, %s are within noise of each other: %s wins (the kernel as "
        "written first, then the variants' order)",
        job.kernel_name,
        job.key,
        ", ".join(v.label for v in ties),
        winner.label,
    )
    return winner, ties if len(ties) > 1 else ()


#: The fewest variants a search proposes at once (one a compile worker, where more wait), each with
#: its siblings: smaller batches let a search step from what it measured more often in its budget.
_BATCH = 8


def _resumed(job: TuneJob, variants: Sequence[Variant]) -> dict[Variant, Outcome]:
    """The outcomes of ``variants`` that an earlier, unfinished tuning of the key measured."""
    inside = set(variants)
    earlier = {v: outcome for v, outcome in job.journal.earlier().items() if v in inside}
    if earlier:
        logger.info(
            "numbatune: %s: going on with an unfinished tuning of key %r: %d variants measured",
            job.kernel_name,
            job.key,
            len(earlier),
        )
    return earlier


def _fastest(
    job: TuneJob,
    candidates: Iterable[Variant],
    times: Mapping[Variant, float | None],
    best: Variant | None,
) -> Variant | None:
    """The fastest timed of ``candidates`` (one batch, measured with the best so far; the first in
    the kernel's order among equals), else ``best`` while its latest run was timed, else the fastest
    timed in any batch (or None): never a variant whose latest run failed."""
    timed = [v for v in candidates if times[v] is not None]
    if not timed and best is not None and times[best] is not None:
        return best
    timed = timed or [v for v in job.variants if times.get(v) is not None]
    return min(timed, key=lambda v: (times[v], job.variants.index(v)), default=None)


def _log_batch(
    job: TuneJob,
    measured: int,
    limit: int,
    best: Variant | None,
    times: Mapping[Variant, float | None],
) -> None:
    found = "none works so far"
    if best is not None:
        found = f"the best so far: {best.label} ({times[best] * 1e6:.1f} us)"  # type: ignore[operator]
    logger.debug(
        "numbatune: %s: %d of %d variants measured; %s", job.kernel_name, measured, limit, found
    )


def _room(
    budget: Budget,
    strategy: Strategy,
    started: float,
    batch_started: float,
    builds: int,
    taken: Snapshot,
) -> float:
    """How many builds the next batch may take: with a budget in seconds, as many as fit in
    the seconds left at the pace of the last batch (``builds``, in rounds of one build for each
    compile worker: a round lasts as long as its longest build); else any number."""
    if strategy is Strategy.EXHAUSTIVE or budget.seconds is None:
        return math.inf
    workers = max(1, taken.compile_workers)
    now = time.perf_counter()
    per_round = (now - batch_started) / math.ceil(builds / workers)
    return workers * ((budget.seconds - (now - started)) // max(per_round, 1e-9))


def _median(outcome: Outcome) -> float | None:
    return outcome.median_s if isinstance(outcome, Timed) else None


def _measure(
    job: TuneJob,
    variants: Sequence[Variant],
    clones: tuple[Any, ...],
    restore: bench.Run,
    clock: Clock,
    progress: Progress,
    earlier: Mapping[Variant, Outcome],
    expected: checks.Observed | None,
    kept: dict[Variant, Launcher],
) -> dict[Variant, Outcome]:
    """Compile ``variants`` (trial runs included; on a GPU, screening them as they arrive),
    check those not checked ``earlier`` in check mode (:func:`_checked`), and time the others
    together; each one's outcome. The launchers of those that compiled go in ``kept``. The
    progress line counts each variant once: those measured ``earlier`` are done already."""
    done = len(earlier)
    again = sum(variant in earlier for variant in variants)
    started = time.perf_counter()
    screen = Screen(clones, job.stream, restore, job.settings) if _screening(variants) else None
    try:
        compiled = job.compile(
            variants,
            clones,
            job.arguments.values,
            job.stream,
            lambda count: progress.step(done + max(count - again, 0), "compiled"),
            _ignore if screen is None else screen.arrived,
            job.settings,
        )
    except BaseException:
        if screen is not None:
            screen.abandon()
        raise
    finally:
        clock.compile_s += time.perf_counter() - started
    started = time.perf_counter()  # screening what compiled last is timing, not compiling
    dropped = {} if screen is None else screen.finish()
    outcomes: dict[Variant, Outcome] = {
        variant: launcher for variant, launcher in compiled.items() if isinstance(launcher, Failed)
    }
    launchers = {v: launcher for v, launcher in compiled.items() if v not in outcomes}
    kept.update(launchers)
    if expected is not None:
        outcomes.update(_checked(job, launchers, earlier, expected))
    for variant, timing in dropped.items():  # check mode's verdict stands
        outcome = outcomes.setdefault(variant, _outcome(timing))
        clock.screened_out += isinstance(outcome, Timed)  # not those whose run raised
    runs = {
        variant: Bound(launcher, clones, job.stream)
        for variant, launcher in launchers.items()
        if variant not in outcomes
    }
    progress.step(done + len(variants) - again, f"compiled; measuring {len(runs)}")
    with bench.device_lock:  # other tunings' trial runs and screening wait
        timings = bench.measure(runs, job.stream, clones, restore, taken=job.settings)
    outcomes.update({variant: _outcome(timing) for variant, timing in timings.items()})
    clock.benchmark_s += time.perf_counter() - started
    return outcomes


def _outcome(timing: Timed | Exception) -> Outcome:
    return timing if isinstance(timing, Timed) else Raised.of(timing)


def _screening(variants: Sequence[Variant]) -> bool:
    """Whether to screen ``variants`` while they compile (:mod:`numbatune.tuning.screen`): on a
    GPU, where compiling takes seconds, for more than two."""
    return not arrays.SIMULATOR and len(variants) > 2


def _ignore(*args: Any) -> None:
    pass


def _why(outcome: Outcome) -> str:
    if isinstance(outcome, Mismatched):
        return f"wrong result: {outcome.mismatch}"
    return outcome.error if isinstance(outcome, Failed) else str(outcome)


def _report(
    job: TuneJob, outcomes: Mapping[Variant, Outcome], best: Variant, source: Source
) -> TuneReport:
    results = tuple(VariantResult(v, outcomes[v]) if v in outcomes else VariantResult(v)
                    for v in job.variants)  # fmt: skip
    check = job.check if source is Source.BENCHMARK else None  # (what it checked)
    fingerprint = "" if check is None else checks.fingerprint(check)
    return TuneReport(job.key, job.variants.index(best), source, results, check is not None,
                      check=fingerprint, timing=bench.timing(job.settings))  # fmt: skip


def _reference_outputs(job: TuneJob) -> checks.Observed | None:
    """In check mode, the outputs every variant's are compared with, computed once: the
    check's reference function's, else what the kernel as written leaves, run on clones of the
    arguments (a :class:`TuningError` that says why where it cannot run: nothing is measured
    then, no variant's results could be trusted); None outside check mode."""
    check = job.check
    if check is None:
        return None
    if check.reference is not None:
        return checks.reference_outputs(check, job.args, _names(job), job.stream)
    written = job.reference
    assert written is not None
    if isinstance(written, checks.CannotRun):
        why = written.why
    else:
        try:
            return checks.observe(check, _launched(job, written), _names(job), job.stream)
        except Exception as error:
            why = f"it ({written.label}) failed: {error}"
    raise TuningError(
        f"{job.kernel_name}: check mode compares every variant with the kernel as written, "
        f"which cannot run for key {job.key!r}: {why}. Nothing was measured; give the kernel "
        "as written the values it needs (module globals), or check=numbatune.Check(reference="
        "...) a function that computes the expected outputs"
    )


def _names(job: TuneJob) -> tuple[str, ...]:
    return job.parameter_names or tuple(f"#{i}" for i in range(len(job.args)))


def _checked(
    job: TuneJob,
    launchers: Mapping[Variant, Launcher],
    earlier: Mapping[Variant, Outcome],
    expected: checks.Observed,
) -> dict[Variant, Outcome]:
    """Run each variant not checked ``earlier`` once on fresh clones of the arguments; those
    whose outputs differ from the ``expected`` ones (:class:`Mismatched`, warned of) or fail."""
    check = job.check
    assert check is not None
    names = _names(job)
    outcomes: dict[Variant, Outcome] = {}
    for variant in launchers:
        if variant in earlier:  # (its verdict stands)
            continue
        fresh = job.arguments.clone(job.stream)
        try:
            launchers[variant](fresh, job.stream)
            got = checks.observe(check, fresh, names, job.stream)
        except Exception as error:
            outcomes[variant] = Raised.of(error)
            continue
        mismatch = checks.compare(expected, got, check)
        if mismatch is not None:
            outcomes[variant] = Mismatched(mismatch)
            logger.warning(
                "numbatune: %s: %s gives wrong results (%s); it cannot win",
                job.kernel_name,
                variant.label,
                mismatch,
            )
    return outcomes


def _originals(job: TuneJob) -> tuple[Any, ...]:
    """Clones of the arguments every run starts from (None for those a run leaves as the next
    one needs them): a kernel that writes its inputs, such as a stream compaction with a
    counter, runs each time on what the caller passed."""
    return tuple(
        None if name in job.unrestored else arrays.clone_value(value, job.stream)
        for name, value in zip(_names(job), job.args, strict=True)
    )
