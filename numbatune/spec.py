"""A tuned kernel's specification: ``autotune``'s options, written once, checked once (every
check of an option is here, with the message that names the kernel and the option).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from numbatune import keys
from numbatune.arrays import Arguments
from numbatune.cache.tunecache import Winner
from numbatune.config import TIMING_CHOICES, OnMiss, Timing
from numbatune.launch.config import (
    LaunchConfig,
    check_launch,
    launch_config,
    launch_error,
    launch_params,
    needed_params,
    params_taken,
)
from numbatune.strategies import Budget, Strategy, as_budget, as_strategy
from numbatune.template import KernelTemplate
from numbatune.tuning import checks, levels
from numbatune.values import key_text
from numbatune.variants import Variant, as_variants


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """The options of one tuned kernel, as `autotune` documents them, each checked when the
    spec is made (``dataclasses.replace`` makes one checked again); what they imply is derived
    then. ``check``, ``search`` and ``budget`` stay as spelt: tuned kernels share their state only
    with those whose options are spelt alike (:meth:`sharing_options`)."""

    kernel: Any
    variants: tuple[Variant, ...]
    launch: Callable[..., LaunchConfig]
    key: str | Sequence[str] | Callable[..., Hashable] | None = None
    name: str | None = None
    level: str | None = None
    prune: levels.Prune | None = None
    check: bool | checks.Check | None = None
    read_only: frozenset[str] = frozenset()
    search: str | Strategy | None = None
    budget: Budget | int | str | None = None
    valid: Callable[..., bool] | None = None
    on_miss: OnMiss | None = None
    timing: Timing | None = None

    #: The name in messages and logs: ``name``, else the kernel function's.
    kernel_name: str = field(init=False)
    #: The kernel function, from which each variant's kernel is compiled.
    template: KernelTemplate = field(init=False)
    #: Each variant's place among the variants.
    index: Mapping[Variant, int] = field(init=False)
    #: For each variant, the parameters its launch function takes.
    launch_params: Mapping[Variant, dict[str, Any]] = field(init=False)
    #: For each variant (by index), the parameters ``valid`` takes; empty without ``valid``.
    valid_params: tuple[dict[str, Any], ...] = field(init=False)
    #: The kernel's parameter names, in order.
    parameters: tuple[str, ...] = field(init=False)
    #: The key of a call's arguments.
    key_function: keys.KeyFunction = field(init=False)
    #: Check mode (``check``), or None where the kernel leaves it to the ``check`` setting.
    checking: checks.Check | None = field(init=False)
    #: ``search`` and ``budget``, or None where the kernel leaves them to the settings.
    strategy: Strategy | None = field(init=False)
    search_budget: Budget | None = field(init=False)

    def __post_init__(self) -> None:
        name = _checked_name(self.name, self.kernel)
        derive = functools.partial(object.__setattr__, self)  # fields of a frozen spec
        derive("kernel_name", name)
        derive("template", KernelTemplate(self.kernel, name))
        derive("variants", as_variants(self.variants, name))
        derive("index", {variant: index for index, variant in enumerate(self.variants)})
        check_launch(self.launch, self.variants, self.template.signature, name)
        derive("launch_params", launch_params(self.launch, self.variants))
        derive("valid_params", _valid_params(self.valid, self.variants, name))
        taken = [*self.launch_params.values(), *self.valid_params]
        self.template.check_params(self.variants, {name for params in taken for name in params})
        derive("parameters", tuple(self.template.signature.parameters))
        _check_parameter_names(self.variants, self.parameters, name)
        derive("read_only", _checked_read_only(self.read_only, self.parameters, name))
        derive("key_function", keys.build_key(self.key, self.template.signature, name))
        derive("level", levels.check_level(self.level, name))
        derive("prune", levels.check_prune(self.prune, name))
        derive("checking", checks.as_check(self.check, name))
        where = f"autotune({name})"
        derive("strategy", None if self.search is None else as_strategy(self.search, where))
        derive("search_budget", None if self.budget is None else as_budget(self.budget, where))
        derive("on_miss", _choice(self.on_miss, tuple(OnMiss), "on_miss", name))
        derive("timing", _choice(self.timing, TIMING_CHOICES, "timing", name))

    def replaced(self, changes: Mapping[str, Any], where: str) -> KernelSpec:
        """This spec with the options ``changes`` names changed (checked again); a TypeError
        naming ``where`` and the unknown ones for names that are not options."""
        unknown = sorted(set(changes) - set(OPTIONS))
        if unknown:
            raise TypeError(f"{where}: unknown options {unknown}")
        return dataclasses.replace(self, **changes)

    def sharing_options(self) -> dict[str, Any]:
        """The options that tuned kernels of the same code must also have in common to share
        their compiled kernels and winners (:func:`numbatune.identity.sharing_key`)."""
        shared = ("key", "name", "level", "prune", "check", "search", "budget", "valid", "on_miss",
                  "timing")  # fmt: skip
        return {option: getattr(self, option) for option in shared}

    @property
    def written_variant(self) -> Variant | None:
        """The variant equal to the kernel as written, or None when no variant is."""
        return self.template.default_variant(self.variants)

    @property
    def reference_variant(self) -> Variant:
        """`written_variant`, else the first (check mode's reference is :meth:`as_written`)."""
        return self.written_variant or self.variants[0]

    def as_written(self, args: tuple[Any, ...]) -> Variant | checks.CannotRun:
        """The kernel as written, as check mode's reference for a call's ``args``: the variant
        that gives each parameter the value it has where the kernel (else a device function it
        calls, the launch or the valid function) is defined, one of the variants or not; or
        why it cannot run on ``args``: a parameter it reads, or that the launch or valid
        function needs, has no such value, or ``valid`` says it may not run on them."""
        names = dict.fromkeys(name for variant in self.variants for name in variant.params)
        also = (self.launch, self.valid)
        written = Variant(self.template.written_values(names, also))
        unset = [n for n in names if n in self.template.names_read and n not in written.params]
        if unset:
            return checks.CannotRun(
                f"it reads {unset[0]}, which has no value as written (no global or closure "
                "variable of that name where the kernel or a device function it calls is "
                "defined)"
            )
        arity = len(self.parameters)
        for role, function in (("launch", self.launch), ("valid", self.valid)):
            needed = [] if function is None else needed_params(function, arity)
            missing = [name for name in needed if name not in written.params]
            if missing:
                return checks.CannotRun(
                    f"the {role} function's parameter {missing[0]} has no default and no value "
                    "as written (no global or closure variable of that name where the kernel "
                    f"or the {role} function is defined)"
                )
        if not self.is_valid(written, args):
            return checks.CannotRun(f"valid says it ({written.label}) may not run on them")
        return written

    def key_of(self, arguments: Arguments) -> Hashable:
        """The key of a call's arguments, as read once (the default key from their views)."""
        if self.key_function is keys.default_key:
            return keys.default_key_of(arguments)
        return self.key_function(arguments.values)

    def launch_config(self, args: tuple[Any, ...], variant: Variant) -> LaunchConfig:
        """The launch configuration the launch function gives ``variant`` for ``args``."""
        params = params_taken(self.launch, variant, self.launch_params)
        return launch_config(self.launch, args, params, self.kernel_name)

    def is_valid(self, variant: Variant, args: tuple[Any, ...]) -> bool:
        """Whether ``variant`` may run on ``args``, as ``valid`` says (True without one); a
        :class:`~numbatune.errors.LaunchFunctionError` naming the parameters if ``valid`` raises."""
        if self.valid is None:
            return True
        index = self.index.get(variant)
        if index is None:  # check mode's kernel as written
            params = launch_params(self.valid, (variant,))[variant]
        else:
            params = self.valid_params[index]
        try:
            return bool(self.valid(*args, **params))
        except Exception as error:
            raise launch_error(error, params, self.kernel_name, "valid") from error

    def runnable_winner(self, winner: Winner, args: tuple[Any, ...]) -> Winner:
        """``winner``, or where ``valid`` says it may not run on ``args``, the fastest variant
        measured for the key that may; a ValueError when none is."""
        if self.valid is None or self.is_valid(winner.variant, args):
            return winner
        timed = sorted(
            (result.median_s, self.index[result.variant])
            for result in winner.report.results
            if result.median_s is not None and self.is_valid(result.variant, args)
        )
        if not timed:
            raise ValueError(
                f"{self.kernel_name}: the winner for key {key_text(winner.report.key)} "
                f"({winner.variant.label}) is not valid for these arguments, and no other "
                "variant measured for that key is; give a key that tells these arguments apart "
                "(key=...), so that they are tuned on their own"
            )
        variant = self.variants[timed[0][1]]
        return Winner(timed[0][1], variant, self.launch_params[variant], winner.report)


#: The options, by the names `autotune` takes them under.
OPTIONS = tuple(f.name for f in dataclasses.fields(KernelSpec) if f.init)


def _checked_name(name: Any, kernel: Any) -> str:
    """Validate ``name=``; the name in messages: ``name``, else the kernel function's."""
    written = getattr(kernel, "__name__", type(kernel).__name__)
    if name is None:
        return written
    if isinstance(name, str) and name:
        return name
    raise (ValueError if isinstance(name, str) else TypeError)(
        f"autotune({written}): name must be a non-empty string (the tuned kernel's name in "
        f"messages and logs) or None for the kernel function's name, got {name!r}"
    )


def _check_parameter_names(
    variants: Sequence[Variant], parameters: Sequence[str], name: str
) -> None:
    """Refuse variant parameters named like kernel arguments: the launch function would get both."""
    clash = sorted({p for v in variants for p in v.params} & set(parameters))
    if clash:
        raise ValueError(
            f"autotune({name}): variant parameters {clash} have the names of arguments of the "
            f"kernel ({', '.join(parameters)}); the launch function gets both, so rename the "
            "parameters (and the globals the kernel reads)"
        )


def _valid_params(
    valid: Callable[..., bool] | None, variants: Sequence[Variant], name: str
) -> tuple[dict[str, Any], ...]:
    """Validate ``valid=``; the parameters it takes, by variant index."""
    if valid is None:
        return ()
    if not callable(valid):
        raise TypeError(
            f"autotune({name}): valid must be a function (*args, **params) -> bool saying "
            f"whether a variant may run on the arguments, got {valid!r}"
        )
    return tuple(launch_params(valid, variants).values())


def _checked_read_only(names: Any, parameters: Sequence[str], name: str) -> frozenset[str]:
    """Validate ``read_only=``: names of the kernel's arguments."""
    listed = None if isinstance(names, str) or not isinstance(names, Iterable) else list(names)
    if listed is None or not all(isinstance(n, str) for n in listed):
        raise TypeError(
            f"autotune({name}): read_only must be a list of argument names, got {names!r}"
        )
    unknown = sorted(set(listed) - set(parameters))
    if unknown:
        raise ValueError(
            f"autotune({name}): read_only names {unknown}, which are not arguments of the "
            f"kernel; its arguments are {list(parameters)}"
        )
    return frozenset(listed)


def _choice(given: Any, choices: Sequence[Any], option: str, kernel_name: str) -> Any:
    """``autotune(<option>=)``, one of the enum members ``choices`` or its text, checked (None:
    the setting of that name decides)."""
    if given is None:
        return None
    chosen = next((choice for choice in choices if given == choice.value), None)
    if chosen is None:
        names = ", ".join(choice.value for choice in choices)
        raise ValueError(
            f"autotune({kernel_name}): {option} must be one of {names} (or None for the "
            f"{option} setting, NUMBATUNE_{option.upper()}), got {given!r}"
        )
    return chosen
