"""Finding a key's winner: the one walk from the winner table to a tuning.

A call whose key the winner table does not hold, and every ``tune``, ask the resolver, which
takes a snapshot of the settings and walks (docs/architecture.md draws it): memory, the claim
on the key, then under the key's lock among processes the disk, the ranks, the miss policy or a
tuning, and the winner published.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from numbatune import keys, record
from numbatune.arrays import Arguments
from numbatune.cache import entry as entries
from numbatune.cache import ranks
from numbatune.cache.tunecache import Claim, TuneCache, Winner
from numbatune.compile.compiler import Compiler, Tally
from numbatune.config import OnMiss, Snapshot, Timing, settings
from numbatune.errors import TuningError, TuningKeyError
from numbatune.forking import ForkSafeLock
from numbatune.launch.config import unchecked_launch_config
from numbatune.spec import KernelSpec
from numbatune.strategies import Search, Strategy
from numbatune.streams.handles import numba_stream, raw_stream
from numbatune.streams.monitor import monitor
from numbatune.trials import trying
from numbatune.tuning import bench, checks, levels, tuner
from numbatune.tuning.job import Compile, Journal, NoJournal, TuneJob
from numbatune.tuning.results import Source, TuneReport, VariantResult
from numbatune.values import canonical_key, key_text
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")

#: Where a report of a key served without tuning (``on_miss``) comes from.
SERVED = (Source.NEAREST, Source.UNTUNED)

#: A launch function slower than this a call (a hit costs about 5 us on an H100) is warned
#: about, timed over so many calls once a key is tuned.
_SLOW_LAUNCH_FUNCTION_S = 20e-6
_LAUNCH_FUNCTION_CALLS = 5


@dataclass(frozen=True)
class Miss:
    """One request for a key's winner."""

    key: Hashable
    #: The caller's arguments, read once (tuning runs on clones), and numba's stream for tuning.
    arguments: Arguments
    stream: Any
    #: The arguments tuning need not copy back before each run.
    unrestored: frozenset[str] = frozenset()
    #: Find the winner again, even where one is known.
    force: bool = False
    #: A call, not ``tune``: the miss policy (``on_miss``) applies.
    serve: bool = False

    @property
    def args(self) -> tuple[Any, ...]:
        """The caller's arguments."""
        return self.arguments.values


@dataclass(frozen=True)
class Resolved:
    """The resolver's answer: the winner, the report behind it, and whether the key was served
    unmeasured under the ``background`` policy (the caller then tunes it on a thread)."""

    winner: Winner
    report: TuneReport
    tune_later: bool = False


@dataclass(frozen=True)
class _Walk:
    """One walk of the resolver, fixed when it begins."""

    miss: Miss
    #: The variants a tuning of the key tries.
    plan: levels.Plan
    policy: OnMiss
    check: checks.Check | None
    search: Search
    #: The settings when the walk began.
    settings: Snapshot

    @property
    def timing(self) -> Timing:
        """How a tuning of this walk times its variants."""
        return bench.timing(self.settings)

    @property
    def searched(self) -> bool:
        """Whether a tuning searches (tries fewer than every variant of the plan's first set)."""
        return self.search.strategy.for_space(len(self.plan.first)) is not Strategy.EXHAUSTIVE


class Resolver:
    """Finds the winners of one tuned kernel's keys (see the module)."""

    def __init__(
        self,
        spec: KernelSpec,
        function_id: str,
        compiler: Compiler,
        compile_variants: Compile,
        tally: Tally,
    ) -> None:
        self._spec, self._function_id, self._compiler = spec, function_id, compiler
        self._compile_variants, self._tally = compile_variants, tally
        #: Keys whose variants were measured here.
        self.benchmarks = 0
        self._lock = ForkSafeLock()
        self._warned_slow_launch = False

    def miss(
        self,
        key: Hashable,
        arguments: Arguments,
        stream: Any,
        unrestored: frozenset[str],
        force: bool,
        serve: bool,
    ) -> Miss:
        """A request for ``key``'s winner (checked hashable), for a call's ``arguments``, on
        numba's stream for ``stream`` (the stream monitor told: tuning's clones are copied on
        it, after the arrays' last tuned uses)."""
        keys.check_hashable(key, self._spec.kernel_name)
        given, stream = stream, numba_stream(stream, arguments.values)
        handle = raw_stream(stream)
        if handle != monitor.stream:  # (told of the caller's stream object, which it holds)
            monitor.watch(handle, arguments.arrays, None, stream if given is None else given)
        return Miss(key, arguments, stream, unrestored, force, serve)

    def resolve(self, cache: TuneCache, miss: Miss) -> Resolved:
        """The winner for ``miss``'s key, from ``cache`` (the current device's) or found."""
        walk = self._walk(miss, settings.snapshot())
        self._record(walk)
        found = cache.claim(canonical_key(miss.key), miss.force)
        if isinstance(found, Winner):
            return Resolved(found, _from_memory(found))
        if not found.held:
            winner = found.wait()
            return Resolved(winner, _from_memory(winner))
        try:
            report = self._found(cache, found, walk)
            winner = cache.winner_of(report)
        except BaseException as error:
            cache.abandon(found, error)
            raise
        cache.publish(found, winner)
        later = report.source in SERVED and walk.policy is OnMiss.BACKGROUND
        return Resolved(winner, report, later)

    def peek(self, cache: TuneCache, key: Hashable, arguments: Arguments) -> TuneReport | None:
        """What a call's walk would find for ``key`` (not in the winner table) without tuning,
        waiting or recording: the stored entry that serves the plan, else what the miss policy
        serves; None where a call tunes the key first (or raises, under ``on_miss="error"``)."""
        walk = self._walk(Miss(key, arguments, None, serve=True), settings.snapshot())
        stored = _reuse(cache.load(canonical_key(key)), walk)
        if stored is not None:
            return stored
        if walk.policy in (OnMiss.NEAREST, OnMiss.BACKGROUND):
            return self._served(cache, walk)
        return None

    def _walk(self, miss: Miss, taken: Snapshot) -> _Walk:
        spec = self._spec
        plan = levels.plan(spec.kernel_name, miss.key, spec.variants, spec.level or taken.level,
                           spec.prune)  # fmt: skip
        if spec.valid is not None:
            plan = plan.keeping(lambda v: spec.is_valid(v, miss.args), spec.kernel_name)
        if spec.timing is not None:  # (the tuning reads it from its settings)
            taken = dataclasses.replace(taken, timing=spec.timing)
        policy = (spec.on_miss or taken.on_miss) if miss.serve else OnMiss.TUNE
        check = spec.checking or (checks.Check() if taken.check else None)
        strategy = spec.strategy or taken.search
        budget = spec.search_budget or taken.search_budget
        return _Walk(miss, plan, policy, check, Search(strategy, budget, taken.search_seed), taken)

    def _found(self, cache: TuneCache, claim: Claim, walk: _Walk) -> TuneReport:
        """The answer for the claimed key: from disk, the ranks, the miss policy or tuning;
        stored on disk when it was measured."""
        key, miss, taken = claim.key, walk.miss, walk.settings
        tunes = walk.policy is OnMiss.TUNE
        group = ranks.group(taken.ranks) if tunes and len(walk.plan.first) > 1 else None
        # Processes sharing the cache tune a key once (ranks: by agreeing).
        with contextlib.nullcontext() if group else cache.exclusive(key, taken.lock_timeout_s):
            stored = None if miss.force else _reuse(cache.load(key), walk)
            if group is not None:
                report = self._agreed(cache, key, walk, group, stored)
            elif stored is not None:
                report = stored
            elif walk.policy is OnMiss.ERROR:
                raise TuningKeyError(
                    f"{self._spec.kernel_name}: key {key_text(miss.key)} has no stored result, "
                    "and on_miss is 'error': tune it first (kernel.tune(...), numbatune sweep) "
                    "or import its results"
                )
            elif not tunes:
                report = self._served(cache, walk)
            else:
                journal = cache.journal(miss.key, miss.force, walk.check, walk.timing)
                report = self._tuned(self._job(cache, walk, walk.plan, walk.search, journal))
            if report.source in (Source.BENCHMARK, Source.RANKS):
                cache.store(key, report)
        return report

    def _agreed(
        self,
        cache: TuneCache,
        key: Hashable,
        walk: _Walk,
        group: ranks.RankGroup,
        local: TuneReport | None,
    ) -> TuneReport:
        """The report the job's ranks agree on for ``key``, given this rank's stored ``local``
        one (:mod:`numbatune.cache.ranks`)."""
        name, timeout_s = self._spec.kernel_name, walk.settings.rank_timeout_s
        offer = cache.offer(key, local)
        space = len(walk.plan.first)
        meeting = ranks.meet(group, name, offer, not walk.searched, space, timeout_s)
        share: dict[str, Any] | None = None
        if meeting.share is not None:
            try:
                tuned = self._share(cache, walk, meeting.share, meeting.count)
                share = {"entry": cache.encoded(key, tuned)}
            except TuningError as error:  # (each variant of the share failed: said so)
                share = {"error": str(error), "results": [entries.encode_result(result)
                                                          for result in error.results]}  # fmt: skip
        agreed = ranks.settle(group, name, offer.key, meeting, share, cache.order, timeout_s)
        return cache.adopt(key, agreed, offer, local)

    def _share(self, cache: TuneCache, walk: _Walk, index: int, count: int) -> TuneReport:
        """Tune share ``index`` of ``count`` of the plan's first set (all of it for one)."""
        miss, plan = walk.miss, walk.plan
        if count == 1:
            journal = cache.journal(miss.key, miss.force, walk.check, walk.timing)
            return self._tuned(self._job(cache, walk, plan, walk.search, journal))
        part = levels.Plan(plan.level, (tuple(plan.first[index::count]),), 1, plan.pruned)
        exhaustive = dataclasses.replace(walk.search, strategy=Strategy.EXHAUSTIVE)
        return self._tuned(self._job(cache, walk, part, exhaustive, NoJournal()))

    def _job(
        self, cache: TuneCache, walk: _Walk, plan: levels.Plan, search: Search, journal: Journal
    ) -> TuneJob:
        spec, miss = self._spec, walk.miss
        starts = self._starts(cache, miss.key, plan) if walk.searched else ()
        check, written = walk.check, spec.as_written(miss.args)
        return TuneJob(
            spec.kernel_name, miss.key, spec.variants, miss.arguments, spec.parameters, miss.stream,
            plan, self._compile_variants, check, written, miss.unrestored,
            search, starts, journal, spec.template.build_key, walk.settings,
        )  # fmt: skip

    def _tuned(self, job: TuneJob) -> TuneReport:
        """Tune ``job``'s key now; the report, with this kernel's compiles and trial time."""
        self._compiler.warm_up(job.plan.first, job.settings.compile_workers)
        trying.start_worker(job.settings)
        compiles, trial_s = self._tally.compiles, self._tally.trial_s
        report = tuner.tune(job)
        self._time_launch_function(job.args, report.winner)
        if report.source is Source.BENCHMARK:
            with self._lock:
                self.benchmarks += 1
        trial_s = self._tally.trial_s - trial_s  # timed by the tuner as compiling
        return dataclasses.replace(
            report,
            compiles=self._tally.compiles - compiles,
            compile_s=report.compile_s - trial_s,
            trial_s=trial_s,
        )

    def _served(self, cache: TuneCache, walk: _Walk) -> TuneReport:
        """A key the miss policy says not to tune now: the winner of the nearest tuned key the
        plan allows, else the kernel as written (or the plan's first variant), unmeasured."""
        spec, key = self._spec, walk.miss.key
        allowed = set(walk.plan.allowed)
        nearest = [v for v in cache.winners_near(key) if v in allowed][:1]
        if nearest:
            variant, source = nearest[0], Source.NEAREST
        else:
            written = spec.reference_variant
            variant = written if written in allowed else walk.plan.first[0]
            source = Source.UNTUNED
        results = tuple(VariantResult(v) for v in spec.variants)
        return TuneReport(key, spec.index[variant], source, results)

    def _starts(self, cache: TuneCache, key: Hashable, plan: levels.Plan) -> tuple[Variant, ...]:
        """Where a search starts: the kernel as written, the variants of the highest priority
        (where the level tunes them with lower ones: where they are the whole first set, its
        search chooses among them anyway, and a fallback set would spend its budget on them
        again first), and the winners of this kernel's other keys, nearest first."""
        highest = plan.groups[0] if plan.count > 1 else ()
        return (self._spec.reference_variant, *highest, *cache.winners_near(key))

    def _record(self, walk: _Walk) -> None:
        """Record the key (numbatune.record) where the settings ask for it."""
        taken, miss = walk.settings, walk.miss
        path = taken.record
        served = walk.policy in (OnMiss.NEAREST, OnMiss.BACKGROUND)
        if path is None and served and taken.cache_dir is not None:
            path = record.served_keys_path(taken.cache_dir)
        if path is None:
            return
        function, name = self._spec.template.function, self._spec.kernel_name
        try:
            record.write(
                path, self._function_id, function.__module__, function.__qualname__,
                key_text(miss.key), miss.args,
            )  # fmt: skip
        except (OSError, TypeError) as error:
            logger.warning("numbatune: %s: could not record key %r in %s: %s",
                           name, miss.key, path, error)  # fmt: skip

    def _time_launch_function(self, args: tuple[Any, ...], variant: Variant) -> None:
        """Time the launch function for the tuned winner (it runs on every launch); warn once
        when it is slow (a copy from the device in it, say)."""
        launch, params = self._spec.launch, self._spec.launch_params[variant]
        times = []
        for _ in range(_LAUNCH_FUNCTION_CALLS):
            started = time.perf_counter()
            unchecked_launch_config(launch, args, params, self._spec.kernel_name)
            times.append(time.perf_counter() - started)
        cost = sorted(times)[len(times) // 2]
        if cost > _SLOW_LAUNCH_FUNCTION_S and not self._warned_slow_launch:
            self._warned_slow_launch = True
            logger.warning(
                "numbatune: %s: its launch function %s takes %.0f us a call (median of %d "
                "while tuning), paid on every launch; compute values it reads from the device "
                "once and pass them as scalar arguments instead (see the porting guide)",
                self._spec.kernel_name,
                getattr(launch, "__qualname__", repr(launch)),
                cost * 1e6,
                _LAUNCH_FUNCTION_CALLS,
            )


def _from_memory(winner: Winner) -> TuneReport:
    return dataclasses.replace(winner.report, source=Source.MEMORY)


def _reuse(stored: TuneReport | None, walk: _Walk) -> TuneReport | None:
    """A stored report (if any) as the answer, or None to tune again: one timed otherwise than
    the walk's tuning times (on a GPU: launches, graph replays may choose another winner), or,
    in check mode, checked otherwise (its verdicts are not this check's); else as
    :func:`numbatune.tuning.levels.reuse` decides."""
    if stored is None or not stored.timing.serves(walk.timing):
        return None
    if walk.check is not None and stored.check != checks.fingerprint(walk.check):
        return None
    return levels.reuse(stored, walk.plan, walk.searched)
