"""Settings: defaults, ``NUMBATUNE_<NAME>`` environment variables read at import, and
:func:`configure` from Python. An invalid value raises a ``ValueError`` naming the setting and
what it expects: from ``configure`` at once; from a variable, when a kernel is tuned or the
command line runs (:func:`check_environment`), importing numbatune itself succeeds.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numbatune.errors import deprecated
from numbatune.strategies import Budget, Strategy
from numbatune.values import TextEnum


def _default_isolation() -> Isolate:
    from numba.cuda.core import config as numba_config  # numba.cuda chose already

    return Isolate.OFF if numba_config.ENABLE_CUDASIM else Isolate.NEW


def _usable_cores() -> int:
    """The cores this process may run on (its affinity, where the platform tells)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "numbatune"


def _parse_optional_path(text: str) -> Path | None:
    """A path (``~`` expanded), or None for ``off``."""
    return None if text.strip().lower() in {"", "off", "none"} else Path(text).expanduser()


def _number(
    kind: type[int] | type[float], least: int, above: bool = False, note: str = ""
) -> Callable[[str], Any]:
    """A parser of a ``kind`` (int or float) of ``least`` or more (more than ``least``, where
    ``above``); a ValueError says what it must be, and ``note``."""
    expects = f"{'an integer' if kind is int else 'a number'} {'>' if above else '>='} {least}"

    def parse(text: str) -> Any:
        value = kind(text)
        if not (value > least if above else value >= least):
            raise ValueError(f"must be {expects}{note}")
        return value

    return parse


def _parse_bool(text: str) -> bool:
    words = {"1": True, "true": True, "on": True, "yes": True}
    words.update({"0": False, "false": False, "off": False, "no": False})
    try:
        return words[text.strip().lower()]
    except KeyError:
        raise ValueError("must be one of 1/0, true/false, on/off, yes/no") from None


#: Tuning levels, from the fewest variants tried to all of them (see numbatune.tuning.levels).
LEVELS = ("minimal", "balanced", "extensive", "full")


def _one_of(*choices: str) -> Callable[[str], str]:
    """A parser that accepts one of ``choices``, in any case."""

    def parse(text: str) -> str:
        choice = text.strip().lower()
        if choice not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return choice

    return parse


def _parse_enum(kind: type[enum.Enum], members: Any = None) -> Callable[[str], Any]:
    """A parser that accepts the value of one member of ``kind`` (of ``members``, where given),
    in any case."""
    choose = _one_of(*(member.value for member in members or kind))
    return lambda text: kind(choose(text))


#: A count from its text: an integer, 1 or more (ValueError, saying so, otherwise).
parse_positive_int = _number(int, 1)
_positive, _non_negative = _number(float, 0, above=True), _number(float, 0)


class OnMiss(TextEnum):
    """What a call does with a key that has no stored result (the ``on_miss`` setting, or
    ``autotune(on_miss=...)``, which wins over it).

    Attributes
    ----------
    TUNE
        Tune it now (the default).
    NEAREST
        Launch the winner of the kernel's nearest tuned key, else the kernel as written,
        unmeasured, and record the key for ``numbatune sweep``.
    BACKGROUND
        The same, and tune the key in a background thread, whose winner then replaces it.
    ERROR
        Raise :class:`~numbatune.TuningKeyError`, naming the key, and measure nothing: for CI
        and production runs that may only use shipped results.
    """

    TUNE = "tune"
    NEAREST = "nearest"
    BACKGROUND = "background"
    ERROR = "error"


class Timing(TextEnum):
    """How a tuning times each variant (the ``timing`` setting, or ``autotune(timing=...)``,
    which wins over it), and a report's ``timing``: how its variants were timed.

    Attributes
    ----------
    LAUNCHES
        Each launch queued on the tuning's stream between two CUDA events (the default).
    GRAPH
        :data:`~numbatune.tuning.bench.GRAPH_LAUNCHES` launches captured into a CUDA graph,
        timed as its replays: for kernels that will run inside graphs.
    WALL_CLOCK
        Under the simulator, which has neither events nor graphs, whatever was asked: the
        wall clock, whose times say nothing about speed. A report's timing, not a choice.
    """

    LAUNCHES = "launches"
    GRAPH = "graph"
    WALL_CLOCK = "wall clock"

    def serves(self, tuning: Timing) -> bool:
        """Whether results timed so serve a tuning that times as ``tuning``: where timed
        alike (launches and graph replays are different measurements, which may choose
        different winners); any, under the simulator (``tuning`` the wall clock), whose times
        mean nothing."""
        return tuning is Timing.WALL_CLOCK or self is tuning


#: The timings a tuning may be asked for.
TIMING_CHOICES = (Timing.LAUNCHES, Timing.GRAPH)


class Isolate(TextEnum):
    """Which variants run first in a separate process (the ``isolate`` setting): those that
    never ran on this kind of device, all at every tuning, or none."""

    NEW = "new"
    ALL = "all"
    OFF = "off"


class Ranks(TextEnum):
    """Whether the ranks of a torch.distributed job tune keys together (the ``ranks``
    setting)."""

    AUTO = "auto"
    OFF = "off"


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """numbatune's settings at one moment: a tuning takes one when it begins and reads only
    it, so that ``configure`` while it runs changes the next tuning, not this one (each
    setting's variable and meaning: docs/configuration.md)."""

    #: Where tuning results are kept on disk; ``None`` (``off``) keeps them in memory only.
    cache_dir: Path | None = dataclasses.field(default_factory=_default_cache_dir)
    #: Time spent measuring the variants of one key, in seconds, after warm-up.
    budget_s: float = 0.1
    #: Fewest and most timed runs of each variant on a GPU.
    min_runs: int = 10
    max_runs: int = 500
    #: Untimed rounds over all variants run for at least this long, in seconds, before timing.
    warmup_s: float = 0.025
    #: Empty the GPU's L2 cache before each timed run when the arrays fit in twice its size.
    flush_l2: bool = True
    #: After ``early_stop_rounds`` rounds, a variant whose fastest run is slower than this many
    #: times the leader's median stops being measured (``inf``: none stops).
    early_stop_ratio: float = 1.5
    early_stop_rounds: int = 5
    #: Timed runs of each variant under the simulator, where timing means nothing.
    simulator_runs: int = 2
    #: How a tuning times each variant (:class:`Timing`).
    timing: Timing = Timing.LAUNCHES
    #: Launch winners through numbatune's fast path (numbatune.launch), not numba's launch.
    fast_launch: bool = True
    #: How many priority groups of variants a key's tuning tries (:data:`LEVELS`: one, two,
    #: three, all; numbatune.tuning.levels).
    level: str = "full"
    #: Check mode for every tuned kernel (numbatune.tuning.checks).
    check: bool = False
    #: What a call does with a key that has no stored result (:class:`OnMiss`).
    on_miss: OnMiss = OnMiss.TUNE
    #: A file that records every key each tuned kernel meets, for ``numbatune sweep``
    #: (numbatune.record); None (``off``): none.
    record: Path | None = None
    #: Level of the ``numbatune`` logger: debug, info, warning or error; None: the application's.
    log_level: str | None = None
    #: Worker processes that compile variants in parallel; 0 or 1 compiles here.
    compile_workers: int = dataclasses.field(default_factory=lambda: _usable_cores())
    #: Seconds one variant's compile may take in a worker before the variant fails.
    compile_timeout_s: float = 300.0
    #: Which variants run first in a separate process (:class:`Isolate`): ``new`` on a GPU,
    #: ``off`` under the simulator.
    isolate: Isolate = dataclasses.field(default_factory=lambda: _default_isolation())
    #: Seconds a variant's trial runs may take before their worker is stopped (numbatune.trials).
    trial_timeout_s: float = 30.0
    #: Seconds a process waits for another tuning the same key before it tunes it itself.
    lock_timeout_s: float = 300.0
    #: How a key's tuning chooses the variants it measures (numbatune.tuning.search).
    search: Strategy = Strategy.AUTO
    #: When a search (not an exhaustive tuning) stops (:class:`~numbatune.strategies.Budget`).
    search_budget: Budget = dataclasses.field(default_factory=Budget)
    #: Seed of a search's random choices (with the key's text).
    search_seed: int = 0
    #: Whether the ranks of a torch.distributed job tune each key together (numbatune.cache.ranks).
    ranks: Ranks = Ranks.AUTO
    #: Seconds a rank waits for the others at a key's tuning before it fails.
    rank_timeout_s: float = 1800.0


class Settings(Snapshot):
    """numbatune's settings now (``numbatune.settings``, changed by :func:`configure`): a
    :class:`Snapshot` whose values can change."""

    __hash__ = None  # type: ignore[assignment]  # (its values change)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)

    @property
    def tune(self) -> bool:
        """Deprecated: `on_miss`; whether it is ``"tune"``."""
        deprecated("settings.tune", "settings.on_miss")
        return self.on_miss is OnMiss.TUNE

    def snapshot(self) -> Snapshot:
        """The settings as they are now, frozen."""
        return Snapshot(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


_PARSERS: dict[str, Callable[[str], Any]] = {
    "cache_dir": _parse_optional_path,
    "budget_s": _positive,
    "min_runs": parse_positive_int,
    "max_runs": parse_positive_int,
    "warmup_s": _non_negative,
    "flush_l2": _parse_bool,
    "early_stop_ratio": _number(float, 1, True, " (inf turns early stopping off)"),
    "early_stop_rounds": parse_positive_int,
    "simulator_runs": parse_positive_int,
    "timing": _parse_enum(Timing, TIMING_CHOICES),
    "fast_launch": _parse_bool,
    "level": _one_of(*LEVELS),
    "check": _parse_bool,
    "on_miss": _parse_enum(OnMiss),
    "record": _parse_optional_path,
    "log_level": _one_of("debug", "info", "warning", "error"),
    "compile_workers": _number(int, 0),
    "compile_timeout_s": _positive,
    "isolate": _parse_enum(Isolate),
    "trial_timeout_s": _positive,
    "lock_timeout_s": _positive,
    "search": _parse_enum(Strategy),
    "search_budget": Budget.parse,
    "search_seed": _number(int, 0),
    "ranks": _parse_enum(Ranks),
    "rank_timeout_s": _positive,
}

#: Settings on their way out (:func:`configure` warns, and takes them as the setting named).
_DEPRECATED: dict[str, Callable[[str], Any]] = {"tune": _parse_bool}

settings = Settings()


def _validated(name: str, value: Any) -> Any:
    parsers = {**_PARSERS, **_DEPRECATED}
    if name not in parsers:
        raise ValueError(f"numbatune: unknown setting {name!r}; settings are {sorted(_PARSERS)}")
    if name in ("cache_dir", "record") and (value is None or isinstance(value, os.PathLike)):
        return None if value is None else Path(value)
    if name == "log_level" and value is None:  # the default: the application's logging decides
        return None
    try:
        return parsers[name](str(value))
    except ValueError as error:
        raise ValueError(
            f"numbatune: invalid value {value!r} for setting {name} "
            f"(NUMBATUNE_{name.upper()}): {error}"
        ) from None


def configure(**values: Any) -> Settings:
    """Change settings from Python, e.g. ``numbatune.configure(budget_s=0.5)``.

    Every setting, its ``NUMBATUNE_...`` environment variable and its default are on the
    Configuration page; ``numbatune.settings`` holds the current values.

    Parameters
    ----------
    **values
        Settings by name (``cache_dir``, ``level``, ``on_miss``, ``budget_s``, ``search``,
        ...), each a Python value or its text as the environment variable takes it.

    Returns
    -------
    Settings
        ``numbatune.settings``, changed.

    Raises
    ------
    ValueError
        An unknown setting, or a value it does not take (the message names the setting, its
        variable and what it expects), or ``min_runs`` above ``max_runs``. No setting is
        changed then.
    """
    checked = {name: _validated(name, value) for name, value in values.items()}
    if "tune" in checked:
        deprecated("the tune setting (NUMBATUNE_TUNE)", "on_miss (NUMBATUNE_ON_MISS): 'tune' "
                   "for on, 'nearest' for off")  # fmt: skip
        checked.setdefault("on_miss", OnMiss.TUNE if checked.pop("tune") else OnMiss.NEAREST)
    if checked.get("min_runs", settings.min_runs) > checked.get("max_runs", settings.max_runs):
        raise ValueError("numbatune: setting min_runs must not exceed max_runs")
    level_was_set = settings.log_level is not None
    for name, value in checked.items():
        setattr(settings, name, value)
    if checked.get("log_level") is not None:
        logging.getLogger("numbatune").setLevel(checked["log_level"].upper())
    elif "log_level" in checked and level_was_set:  # undo numbatune's level, none of the app's
        logging.getLogger("numbatune").setLevel(logging.NOTSET)
    return settings


#: Why the ``NUMBATUNE_*`` variables could not all be taken when numbatune was imported (the
#: settings they name kept their defaults), or None: :func:`check_environment` raises it.
environment_problem: str | None = None


def load_environment() -> None:
    """Read every ``NUMBATUNE_<NAME>`` variable that is set. Where one is invalid, importing
    numbatune still succeeds (the command line can then say so in one line), the settings of
    the invalid ones keep their defaults, and :func:`check_environment` raises why."""
    global environment_problem
    given = {
        name: os.environ[f"NUMBATUNE_{name.upper()}"]
        for name in (*_PARSERS, *_DEPRECATED)
        if f"NUMBATUNE_{name.upper()}" in os.environ
    }
    valid, problems = {}, []
    for name, value in given.items():
        try:
            _validated(name, value)
        except ValueError as error:
            problems.append(str(error))
        else:
            valid[name] = value
    try:
        configure(**valid)
    except ValueError as error:  # (settings that contradict each other: none is taken)
        problems.append(str(error))
    environment_problem = "; ".join(problems) or None


def check_environment() -> None:
    """Raise a ValueError, naming the variable and what it expects, where a ``NUMBATUNE_*``
    variable was invalid when numbatune was imported."""
    if environment_problem is not None:
        raise ValueError(environment_problem)
