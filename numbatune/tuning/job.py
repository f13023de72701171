"""A tuning job: everything one key's tuning needs, in one frozen object (cubecl's ``TuneJob``),
made by the resolver (:mod:`numbatune.resolver`) on a miss and run by the tuner, which reads the
snapshot of the settings taken when the miss began, never the settings of the moment.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from numbatune import config
from numbatune.arrays import Arguments
from numbatune.config import Snapshot
from numbatune.strategies import Search
from numbatune.tuning.checks import CannotRun, Check
from numbatune.tuning.levels import Plan
from numbatune.tuning.results import Failed, Outcome
from numbatune.variants import Variant

#: Launches one compiled variant on the given arguments, on the given stream.
Launcher = Callable[[tuple[Any, ...], Any], None]


@dataclass(frozen=True, eq=False)
class Bound:
    """A launcher bound to arguments and a stream: called, it launches ``launcher`` on
    ``args`` on ``stream``; :meth:`on` puts it on another stream (where the graph stopwatch
    captures it, :mod:`numbatune.tuning.bench`)."""

    launcher: Launcher
    args: tuple[Any, ...]
    stream: Any

    def __call__(self) -> None:
        self.launcher(self.args, self.stream)

    def on(self, stream: Any) -> Bound:
        """The same launch on ``stream``."""
        return Bound(self.launcher, self.args, stream)


#: Told, from any thread, that a variant is compiled (and through its trial run) and may run:
#: ``arrived(variant, launcher)``.
Arrived = Callable[[Variant, Launcher], None]

#: ``compile(variants, args, launch_args, stream, done, arrived, taken)``: each variant's
#: launcher, or why it failed (:func:`numbatune.trials.trying.compile_and_try` says how).
Compile = Callable[
    [
        Sequence[Variant],
        tuple[Any, ...],
        tuple[Any, ...],
        Any,
        Callable[[int], None],
        Arrived,
        Snapshot,
    ],
    Mapping[Variant, Launcher | Failed],
]


def alone(variant: Variant) -> Hashable:
    """A build key under which ``variant`` is built alone."""
    return variant


class Journal(Protocol):
    """Where a tuning keeps its variants' outcomes as they are measured, so that a tuning cut
    short goes on where it stopped (:mod:`numbatune.cache.journal`)."""

    def earlier(self) -> Mapping[Variant, Outcome]:
        """What an earlier, unfinished tuning of the key measured."""

    def record(self, outcomes: Mapping[Variant, Outcome]) -> None:
        """Keep ``outcomes``, every variant measured so far."""

    def discard(self) -> None:
        """Forget them."""


class NoJournal:
    """Nothing kept (no cache directory, or a rank's share of a tuning)."""

    def earlier(self) -> Mapping[Variant, Outcome]:
        return {}

    def record(self, outcomes: Mapping[Variant, Outcome]) -> None:
        pass

    def discard(self) -> None:
        pass


@dataclass(frozen=True)
class TuneJob:
    """One key's tuning, from the resolver through the tuner to the timing."""

    #: The tuned kernel's name, for messages.
    kernel_name: str
    key: Hashable
    #: Every variant of the kernel, in order: reports have one result per variant.
    variants: tuple[Variant, ...]
    #: The caller's arguments, read once (tuning runs on clones), and their names.
    arguments: Arguments
    parameter_names: tuple[str, ...]
    #: numba's stream for tuning's launches.
    stream: Any
    #: Which variants to try, in which groups.
    plan: Plan
    #: How to compile variants.
    compile: Compile
    #: Check mode, or None.
    check: Check | None = None
    #: The kernel as written (one of ``variants`` or not), or why it cannot run: check mode's
    #: reference where its check has no function, and the winner among ties.
    reference: Variant | CannotRun | None = None
    #: Arguments not copied back before each run: a run leaves them as the next one needs them.
    unrestored: frozenset[str] = frozenset()
    #: How to choose the variants measured, and where a search starts (numbatune.tuning.search).
    search: Search = field(default_factory=Search)
    starts: tuple[Variant, ...] = ()
    #: Where the outcomes are kept as they are measured (for the job's check).
    journal: Journal = field(default_factory=NoJournal)
    #: What of a variant decides numba's compile of it: variants with the same are built for
    #: about the cost of one, so a search measures them together.
    build_key: Callable[[Variant], Hashable] = alone
    #: The settings when the tuning began (``numbatune.configure`` while it runs changes the next).
    settings: Snapshot = field(default_factory=lambda: config.settings.snapshot())

    @property
    def args(self) -> tuple[Any, ...]:
        """The caller's arguments."""
        return self.arguments.values
