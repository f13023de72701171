"""Profiles: the device time of the tuned launches made while one is open.

:func:`numbatune.start_profile` returns a token that :func:`numbatune.end_profile` takes
(cubecl's ``start_profile``/``end_profile``); profiles may nest and overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ProfileToken:
    """What `start_profile` returns and `end_profile` takes; nothing else."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"<numbatune.ProfileToken {self.number}>"


@dataclass
class Profile:
    """The device time of the tuned launches made while a profile was open.

    Attributes
    ----------
    device_s : float
        Total device time of those launches, in seconds (each from its own pair of events).
    launches : int
        Number of those launches.
    by_kernel : dict[str, float]
        Device time in seconds by tuned kernel name.
    """

    device_s: float = 0.0
    launches: int = 0
    by_kernel: dict[str, float] = field(default_factory=dict)
