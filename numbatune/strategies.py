"""What a search is asked to do (its strategy, budget and seed), as the settings and
``autotune(search=..., budget=...)`` hold it; the strategies are in :mod:`numbatune.tuning.search`.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from typing import Any

from numbatune.values import TextEnum

#: ``auto`` searches spaces of up to this many variants exhaustively.
EXHAUSTIVE_UP_TO = 100
#: Why ``search="model"`` cannot run without scikit-learn, and what to install.
MODEL_NEEDS_SKLEARN = (
    "search='model' fits its model with scikit-learn, which is not installed: "
    "pip install 'numbatune[model]'"
)


class Strategy(TextEnum):
    """How a tuning chooses the variants it measures: ``autotune(search=...)`` and the ``search``
    setting (compares equal to its value).

    Attributes
    ----------
    AUTO
        Every variant of spaces of up to 100 variants, a pattern search of larger ones.
    EXHAUSTIVE
        Every variant.
    RANDOM
        Variants drawn at random.
    PATTERN
        A local search over the parameter grid, from the kernel as written and the winners
        of nearby keys.
    MODEL
        A random forest fitted to the times so far picks the next variants (scikit-learn:
        ``pip install 'numbatune[model]'``).
    """

    AUTO = "auto"
    EXHAUSTIVE = "exhaustive"
    RANDOM = "random"
    PATTERN = "pattern"
    MODEL = "model"

    def for_space(self, size: int) -> Strategy:
        """The strategy that runs for a space of ``size`` variants: this one, or for `AUTO`
        `EXHAUSTIVE` or `PATTERN` by the size.

        Parameters
        ----------
        size
            The number of variants in the space.
        """
        if self is not Strategy.AUTO:
            return self
        return Strategy.EXHAUSTIVE if size <= EXHAUSTIVE_UP_TO else Strategy.PATTERN


def as_strategy(value: Any, where: str) -> Strategy:
    """A ``search=`` value as a :class:`Strategy`, or a ValueError naming ``where`` (an
    ImportError for ``model`` without scikit-learn)."""
    try:
        strategy = Strategy(value)
    except ValueError:
        choices = ", ".join(s.value for s in Strategy)
        raise ValueError(f"{where}: search must be one of {choices}, got {value!r}") from None
    if strategy is Strategy.MODEL and importlib.util.find_spec("sklearn") is None:
        raise ImportError(f"{where}: {MODEL_NEEDS_SKLEARN}")
    return strategy


@dataclass(frozen=True)
class Budget:
    """When a search stops: after ``variants`` tried or ``seconds`` of tuning, whichever first.

    A search does not start a batch that would end past the seconds if it took as long as the
    one before (one that takes longer still does). An exhaustive search ignores the budget.

    Parameters
    ----------
    variants
        The most variants a search tries, or None for no limit of that kind.
    seconds
        The most seconds of tuning (compiling, trial runs and timing), or None for no limit of
        that kind.

    Raises
    ------
    TypeError
        ``variants`` is neither an integer nor None.
    ValueError
        ``variants`` is below 1, or ``seconds`` is not a finite number > 0.

    Examples
    --------
    >>> Budget(variants=200, seconds=60)
    Budget(variants=200, seconds=60)
    >>> str(Budget(seconds=60))  # the default of 100 variants still holds
    '100,60s'
    """

    variants: int | None = 100
    seconds: float | None = None

    def __post_init__(self) -> None:
        variants, seconds = self.variants, self.seconds
        if variants is not None and (isinstance(variants, bool) or not isinstance(variants, int)):
            raise TypeError(f"Budget: variants must be an integer or None, got {variants!r}")
        if variants is not None and variants < 1:
            raise ValueError(f"Budget: variants must be >= 1, got {variants}")
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if seconds is not None and not (number and seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"Budget: seconds must be a number > 0 or None, got {seconds!r}")

    def __str__(self) -> str:
        parts = [] if self.variants is None else [str(self.variants)]
        parts += [] if self.seconds is None else [f"{self.seconds:g}s"]
        return ",".join(parts) or "unlimited"

    @classmethod
    def parse(cls, text: str) -> Budget:
        """A budget from its text, the form of ``NUMBATUNE_SEARCH_BUDGET`` and ``str(budget)``.

        Parameters
        ----------
        text
            ``"200"`` (variants), ``"60s"`` (seconds), ``"200,60s"`` (both) or ``"unlimited"``;
            a ValueError for any other.
        """
        variants: int | None = None
        seconds: float | None = None
        for part in text.replace(" ", "").lower().split(","):
            try:
                if part.endswith("s"):
                    seconds = float(part[:-1])
                elif part != "unlimited":
                    variants = int(part)
            except ValueError:
                raise ValueError(
                    f"a budget is a number of variants (200), seconds (60s), both (200,60s) "
                    f"or unlimited; got {text!r}"
                ) from None
        return cls(variants, seconds)


def as_budget(value: Any, where: str) -> Budget:
    """A ``budget=`` value (a :class:`Budget`, a number of variants, or its text) as a Budget,
    or an error naming ``where``."""
    if isinstance(value, Budget):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Budget(variants=value)
    if isinstance(value, str):
        try:
            return Budget.parse(value)
        except ValueError as error:
            raise ValueError(f"{where}: budget: {error}") from None
    raise TypeError(
        f"{where}: budget must be a numbatune.Budget, a number of variants or text such as "
        f"'60s', got {value!r}"
    )


@dataclass(frozen=True)
class Search:
    """A tuning's search: its strategy, budget and seed."""

    strategy: Strategy = Strategy.AUTO
    budget: Budget = field(default_factory=Budget)
    seed: int = 0
